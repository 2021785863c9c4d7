package cli

// End-to-end tests: the real gantry binary, real job processes, real signals.
// Helpers are in e2e_helpers_test.go. Nothing here sleeps to wait for an
// event; the only fixed waits are the windows in which something must NOT
// happen (a stopped job must not write).

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/proctest"
)

// tomlList renders strings as a TOML array of basic strings (strconv.Quote is
// valid TOML for the ASCII text used here).
func tomlList(items ...string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// manualElement is a manual element depending on deps whose build-commands are cmds.
func manualElement(deps []string, cmds ...string) string {
	s := "kind = \"manual\"\n"
	if len(deps) > 0 {
		s += "depends = " + tomlList(deps...) + "\n"
	}
	return s + "\n[config]\nbuild-commands = " + tomlList(cmds...) + "\n"
}

func projectTOML(targets ...string) string {
	return "name = \"e2e\"\ndefault-targets = " + tomlList(targets...) + "\n"
}

// parseEvents decodes the JSON lines of a finished `--ui json` run.
func parseEvents(stderr string) []e2eEvent {
	var out []e2eEvent
	for _, line := range strings.Split(stderr, "\n") {
		var e e2eEvent
		if json.Unmarshal([]byte(line), &e) == nil {
			e.Raw = line
			out = append(out, e)
		}
	}
	return out
}

func findEvent(evs []e2eEvent, event, action, element string) (e2eEvent, bool) {
	for _, e := range evs {
		if e.is(event, action, element) {
			return e, true
		}
	}
	return e2eEvent{}, false
}

// waitGrowth waits until the file at path is larger than from.
func waitGrowth(t *testing.T, path string, from int64) int64 {
	t.Helper()
	var size int64
	eventually(t, e2eTimeout, fmt.Sprintf("%s grows beyond %d bytes", filepath.Base(path), from), func() bool {
		size = fileSize(path)
		return size > from
	})
	return size
}

func assertNotBuilt(t *testing.T, p *e2eProject, element string) {
	t.Helper()
	switch st := p.state(element); st {
	case "cached", "failed":
		log, _, _ := p.run("artifact", "log", element)
		t.Errorf("%s is %q after an interrupted build; nothing should have been cached. Its cached log:\n%s", element, st, log)
	}
}

// Ctrl-Z (SIGTSTP) stops every process of every job, then gantry itself;
// SIGCONT resumes them; SIGTERM then terminates and leaves nothing behind.
func TestE2ESuspendStopsJobProcesses(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("tick.toml")})
	ticks, shPid := p.scratch("ticks"), p.scratch("sh.pid")
	p.write("elements/tick.toml", manualElement(nil,
		fmt.Sprintf("echo $$ > %s; while :; do echo x >> %s; sleep 0.05; done", shPid, ticks)))

	g := p.start("build", "--ui", "json", "--sandbox", "host")
	g.waitEvent("job-start", "build", "tick.toml")
	sh := readPid(t, shPid)
	shInfo, ok := proctest.Read(sh)
	if !ok {
		t.Fatalf("build command (pid %d) is not running", sh)
	}
	pgid := shInfo.PGrp
	if pgid == g.pid() || pgid == syscall.Getpgrp() {
		t.Fatalf("the build command runs in process group %d, not in a job group of its own (gantry %d, test %d)",
			pgid, g.pid(), syscall.Getpgrp())
	}
	killGroupOnCleanup(t, pgid)
	size := waitGrowth(t, ticks, 0)
	waitGrowth(t, ticks, size) // really ticking

	g.signal(syscall.SIGTSTP)
	eventually(t, e2eTimeout, "gantry is stopped (state T)", func() bool {
		pi, ok := proctest.Read(g.pid())
		return ok && pi.State == 'T'
	})
	// gantry stops itself only after it sent SIGSTOP to every job.
	waitGroupStopped(t, pgid)
	time.Sleep(100 * time.Millisecond) // grace for a write in flight
	stopped := fileSize(ticks)
	time.Sleep(300 * time.Millisecond) // settle window: no tick may be written
	if now := fileSize(ticks); now != stopped {
		t.Fatalf("ticks grew from %d to %d bytes while suspended: the job was not stopped", stopped, now)
	}

	g.signal(syscall.SIGCONT)
	waitGrowth(t, ticks, stopped)
	if pi, ok := proctest.Read(g.pid()); !ok || pi.State == 'T' {
		t.Errorf("gantry is not running after SIGCONT (state %c)", pi.State)
	}
	g.waitEvent("resumed", "", "")
	if _, ok := findEvent(g.snapshot(), "suspended", "", ""); !ok {
		t.Errorf("no suspended event\n%s", g.output())
	}

	g.signal(syscall.SIGTERM)
	if code := g.wait(e2eTimeout); code != exitTerminated {
		t.Fatalf("gantry exited with %d after SIGTERM, want %d\n%s", code, exitTerminated, g.output())
	}
	eventually(t, 2*time.Second, "the job's processes are gone", func() bool { return len(proctest.Group(pgid)) == 0 })
	if end, ok := findEvent(g.snapshot(), "job-end", "build", "tick.toml"); !ok || end.Result != "terminated" {
		t.Errorf("job-end of tick.toml: %+v, want result terminated", end)
	}
	assertNotBuilt(t, p, "tick.toml")
}

// SIGTERM terminates the build; no process the build started survives, and
// nothing is cached for the element.
func TestE2ESigtermLeavesNoProcess(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("orphan.toml")})
	childFile, orphanFile := p.scratch("grandchild.pid"), p.scratch("orphan.pid")
	// A background grandchild the shell waits for, and one orphaned at once (its
	// subshell exits), which only a kill of the job's process group reaches.
	p.write("elements/orphan.toml", manualElement(nil, fmt.Sprintf(
		"sleep 1000 & echo $! > %s; (sleep 1000 >/dev/null 2>&1 & echo $! > %s); wait", childFile, orphanFile)))

	g := p.start("build", "--ui", "json", "--sandbox", "host")
	gc, orphan := readPid(t, childFile), readPid(t, orphanFile)
	gcInfo, ok := proctest.Read(gc)
	if !ok {
		t.Fatalf("the background sleep (pid %d) is not running", gc)
	}
	pgid := gcInfo.PGrp
	if pgid == g.pid() || pgid == syscall.Getpgrp() {
		t.Fatalf("the background sleep is in group %d, not in its job's group", pgid)
	}
	killGroupOnCleanup(t, pgid)
	if oi, ok := proctest.Read(orphan); !ok || oi.PGrp != pgid {
		t.Fatalf("the orphaned sleep (pid %d) is not running in the job's group %d: %+v", orphan, pgid, oi)
	}
	g.waitEvent("job-start", "build", "orphan.toml")

	g.signal(syscall.SIGTERM)
	if code := g.wait(e2eTimeout); code != exitTerminated {
		t.Fatalf("gantry exited with %d after SIGTERM, want %d\n%s", code, exitTerminated, g.output())
	}
	eventually(t, 2*time.Second, fmt.Sprintf("the background sleep (pid %d) is gone", gc), func() bool { return !proctest.Alive(gc) })
	eventually(t, 2*time.Second, fmt.Sprintf("the orphaned sleep (pid %d) is gone", orphan), func() bool { return !proctest.Alive(orphan) })
	eventually(t, 2*time.Second, fmt.Sprintf("process group %d is empty", pgid), func() bool { return len(proctest.Group(pgid)) == 0 })

	end, ok := findEvent(g.snapshot(), "session-end", "", "")
	if !ok || end.Summary == nil || !end.Summary.Interrupted {
		t.Errorf("session-end does not say interrupted: %+v\n%s", end.Summary, g.output())
	}
	if last := lastEvent(t, g.output()); last.Event != "error" || last.Text != "interrupted by SIGTERM" || last.ExitCode == nil || *last.ExitCode != exitTerminated {
		t.Errorf("stderr does not end with an error event 'interrupted by SIGTERM' (exit %d)\n%s", exitTerminated, g.output())
	}
	assertNotBuilt(t, p, "orphan.toml")
	p.verifyCache()
}

// Without a terminal, SIGINT terminates; a second SIGINT during the grace
// period kills at once.
func TestE2ESecondSigintKills(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("stubborn.toml")})
	pidFile, termFile := p.scratch("sh.pid"), p.scratch("got-term")
	// The shell survives SIGTERM (it notes it and goes on; `|| :` because the
	// commands run under sh -e and the sleep does die of it), so only SIGKILL ends it.
	p.write("elements/stubborn.toml", manualElement(nil,
		fmt.Sprintf("echo $$ > %s; trap 'echo term >> %s' TERM; while :; do sleep 0.05 || :; done", pidFile, termFile)))

	// stdin, stdout and stderr are pipes or /dev/null: no terminal.
	g := p.start("build", "--ui", "json", "--sandbox", "host")
	g.waitEvent("job-start", "build", "stubborn.toml")
	sh := readPid(t, pidFile)
	if shInfo, ok := proctest.Read(sh); ok && shInfo.PGrp != g.pid() && shInfo.PGrp != syscall.Getpgrp() {
		killGroupOnCleanup(t, shInfo.PGrp)
	}

	g.signal(syscall.SIGINT)
	eventually(t, e2eTimeout, "the build command gets SIGTERM", func() bool { return fileSize(termFile) > 0 })
	time.Sleep(200 * time.Millisecond) // window in which gantry must keep waiting for the job
	select {
	case <-g.exited:
		t.Fatalf("gantry exited (code %d) right after the first SIGINT, while a job ignoring SIGTERM still ran\n%s",
			g.exitCode, g.output())
	default:
	}
	if !proctest.Alive(sh) {
		t.Fatalf("the build command (pid %d) died of SIGTERM although it traps it", sh)
	}

	second := time.Now()
	g.signal(syscall.SIGINT)
	if code := g.wait(e2eTimeout); code != exitInterrupted {
		t.Fatalf("gantry exited with %d after SIGINT, want %d\n%s", code, exitInterrupted, g.output())
	}
	if d := g.exitedAt.Sub(second); d > time.Second {
		t.Errorf("gantry took %v to exit after the second SIGINT, want it at once", d)
	}
	end, ok := findEvent(g.snapshot(), "job-end", "build", "stubborn.toml")
	if !ok || end.Result != "terminated" || !strings.Contains(end.Error, "signal 9") {
		t.Errorf("job-end of stubborn.toml: result %q, error %q; want terminated by SIGKILL (signal 9)\n%s",
			end.Result, end.Error, g.output())
	}
	eventually(t, 2*time.Second, "the build command is gone", func() bool { return !proctest.Alive(sh) })
	assertNotBuilt(t, p, "stubborn.toml")
}

// kill -9 of gantry mid-build: the jobs die with it, the cache stays clean, and
// the next build reuses every artifact committed before the kill.
func TestE2EKill9ThenRebuildReusesArtifacts(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("e6.toml")})
	goFile, pid4 := p.scratch("go"), p.scratch("e4.pid")
	for i := 1; i <= 6; i++ {
		var deps []string
		if i > 1 {
			deps = []string{fmt.Sprintf("e%d.toml", i-1)}
		}
		cmds := []string{fmt.Sprintf("echo %d > %%{install-root}/e%d.txt", i, i)}
		if i == 4 {
			cmds = append([]string{fmt.Sprintf("echo $$ > %s; while [ ! -f %s ]; do sleep 0.05; done", pid4, goFile)}, cmds...)
		}
		p.write(fmt.Sprintf("elements/e%d.toml", i), manualElement(deps, cmds...))
	}

	g := p.start("build", "--ui", "json", "--sandbox", "host", "--builders", "2")
	g.waitFor("e1–e3 built and durable, and e4 started", func(evs []e2eEvent) bool {
		n := 0
		for _, e := range evs {
			if e.is("job-durable", "build", "") && (e.Element == "e1.toml" || e.Element == "e2.toml" || e.Element == "e3.toml") {
				n++
			}
		}
		_, started := findEvent(evs, "job-start", "build", "e4.toml")
		return n == 3 && started
	})
	sh := readPid(t, pid4)
	shInfo, ok := proctest.Read(sh)
	if !ok {
		t.Fatalf("e4's build command (pid %d) is not running", sh)
	}
	jobGroup := shInfo.PGrp
	killGroupOnCleanup(t, jobGroup)

	g.signal(syscall.SIGKILL)
	g.wait(e2eTimeout)
	eventually(t, 5*time.Second, fmt.Sprintf("e4's blocked build command (pid %d) dies with gantry", sh), func() bool { return !proctest.Alive(sh) })
	eventually(t, 5*time.Second, fmt.Sprintf("e4's job group %d is empty", jobGroup), func() bool { return len(proctest.Group(jobGroup)) == 0 })

	rep := p.verifyCache()
	if rep.Refs != 3 {
		t.Errorf("cache has %d refs after the kill, want 3 (e1–e3)", rep.Refs)
	}
	for i, want := range []string{"cached", "cached", "cached", "buildable", "waiting", "waiting"} {
		el := fmt.Sprintf("e%d.toml", i+1)
		if st := p.state(el); st != want {
			t.Errorf("after kill -9: %s is %q, want %q", el, st, want)
		}
	}

	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr := p.mustRun(0, "build", "--ui", "json", "--sandbox", "host", "--builders", "2")
	evs := parseEvents(stderr)
	for i := 1; i <= 6; i++ {
		el := fmt.Sprintf("e%d.toml", i)
		_, started := findEvent(evs, "job-start", "build", el)
		if i <= 3 && started {
			t.Errorf("the rebuild built %s again although it was cached before the kill", el)
		}
		if i > 3 && !started {
			t.Errorf("the rebuild did not build %s", el)
		}
	}
	if end, ok := findEvent(evs, "session-end", "", ""); !ok || end.Summary == nil || !end.Summary.OK {
		t.Errorf("rebuild did not succeed:\n%s", stderr)
	}
	p.verifyCache()
}

// A failed build is reported with its log, cached as failed, not retried until
// --retry-failed; with on-error continue its dependants are not built but an
// independent element is.
func TestE2EFailedBuild(t *testing.T) {
	t.Parallel()
	const marker = "MARKER-7f3a9c"
	p := newE2EProject(t, map[string]string{
		"project.toml":        projectTOML("dep.toml", "indep.toml"),
		"elements/bad.toml":   manualElement(nil, "echo "+marker, "exit 3"),
		"elements/dep.toml":   manualElement([]string{"bad.toml"}, "echo dep > %{install-root}/dep.txt"),
		"elements/indep.toml": manualElement(nil, "echo indep > %{install-root}/indep.txt"),
	})
	common := []string{"--sandbox", "host", "--on-error", "continue"}

	_, stderr := p.mustRun(1, append([]string{"build", "--ui", "plain", "--builders", "1"}, common...)...)
	for _, re := range []string{
		`\]\[build:bad\.toml\] +FAILURE +build-commands: .*exit code 3`,
		`(?m)^ +` + marker + `$`,
		`\]\[build:indep\.toml\] +SUCCESS`,
		`(?m)^Failed:\n  bad\.toml \(build\): .*exit code 3.*\n    log: \S+bad\S*\.log$`,
		`(?m)^Not built:\n  dep\.toml: dependency bad\.toml failed$`,
	} {
		if !regexp.MustCompile(re).MatchString(stderr) {
			t.Errorf("plain output does not match %s\n%s", re, stderr)
		}
	}
	m := regexp.MustCompile(`\(full log: (\S+)\)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("plain output names no log file\n%s", stderr)
	}
	if log, err := os.ReadFile(m[1]); err != nil || !strings.Contains(string(log), marker) {
		t.Errorf("log %s (err %v) does not contain %s:\n%s", m[1], err, marker, log)
	}

	out, _ := p.mustRun(0, "artifact", "log", "bad.toml")
	if !strings.Contains(out, marker) || !strings.Contains(out, "exit code 3") {
		t.Errorf("artifact log bad.toml lacks the marker or the exit code:\n%s", out)
	}
	for el, want := range map[string]string{"bad.toml": "failed", "dep.toml": "waiting", "indep.toml": "cached"} {
		if st := p.state(el); st != want {
			t.Errorf("%s is %q, want %q", el, st, want)
		}
	}

	// Again: the cached failure is reported, nothing is built.
	_, stderr = p.mustRun(1, append([]string{"build", "--ui", "json"}, common...)...)
	evs := parseEvents(stderr)
	if e, ok := findEvent(evs, "job-start", "", ""); ok {
		t.Errorf("the second build started a job: %s", e.Raw)
	}
	end, ok := findEvent(evs, "session-end", "", "")
	if !ok || end.Summary == nil || len(end.Summary.Failed) != 1 || end.Summary.Failed[0].Element != "bad.toml" || !end.Summary.Failed[0].Cached {
		t.Errorf("the second build does not report bad.toml's cached failure:\n%s", stderr)
	}

	// --retry-failed builds it again (and it fails again).
	_, stderr = p.mustRun(1, append([]string{"build", "--ui", "json", "--retry-failed"}, common...)...)
	evs = parseEvents(stderr)
	if _, ok := findEvent(evs, "job-start", "build", "bad.toml"); !ok {
		t.Errorf("--retry-failed did not build bad.toml:\n%s", stderr)
	}
	if e, ok := findEvent(evs, "job-end", "build", "bad.toml"); !ok || e.Result != "failure" {
		t.Errorf("--retry-failed: bad.toml's job-end is %+v, want failure", e)
	}
	p.verifyCache()
}

// requireSandboxTools skips (or, in CI, fails) unless bwrap works here and
// /bin/busybox is a static binary.
func requireSandboxTools(t *testing.T) {
	t.Helper()
	missing := func(why string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: install bubblewrap busybox-static", why)
		}
		t.Skipf("%s: install bubblewrap busybox-static", why)
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		missing("bwrap is not installed")
	}
	f, err := elf.Open("/bin/busybox")
	if err != nil {
		missing("no /bin/busybox")
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			missing("/bin/busybox is dynamically linked")
		}
	}
	if out, err := exec.Command(bwrap, "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc",
		"--", "/bin/true").CombinedOutput(); err != nil {
		missing(fmt.Sprintf("bwrap does not work here (%v: %s)", err, out))
	}
}

// localImport is an import element of the project directory dir.
func localImport(dir string) string {
	return "kind = \"import\"\n[[sources]]\nkind = \"local\"\npath = \"" + dir + "\"\n"
}

// sysrootProject is a project whose default target app.toml is a manual element running
// cmds on sysroot.toml, a busybox with tools (so that it builds under bwrap too).
func sysrootProject(t *testing.T, cmds []string, tools ...string) *e2eProject {
	t.Helper()
	p := newE2EProject(t, map[string]string{
		"project.toml":          projectTOML("app.toml"),
		"elements/sysroot.toml": localImport("files/sysroot"),
		"elements/app.toml":     "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = " + tomlList(cmds...) + "\n",
	})
	writeBusyboxSysroot(t, filepath.Join(p.root, "files", "sysroot"), tools...)
	return p
}

// writeBusyboxSysroot writes bin/busybox under dir, with the tools as links to it.
func writeBusyboxSysroot(t *testing.T, dir string, tools ...string) {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, "/bin/busybox", filepath.Join(bin, "busybox"), 0o755)
	for _, tool := range tools {
		if err := os.Symlink("busybox", filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
}

// With --sandbox auto and a sysroot that provides /bin/sh, the build runs
// under bubblewrap and sees only the staged sysroot.
func TestE2EBwrapSandbox(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	p := sysrootProject(t, []string{
		"echo hello > %{install-root}/out.txt",
		"ls / > %{install-root}/root.txt",
		"cat /etc/hostname > %{install-root}/hostname.txt 2>/dev/null || echo absent > %{install-root}/hostname.txt",
	}, "sh", "echo", "cat", "mkdir", "ls", "true")

	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "auto")
	log, _ := p.mustRun(0, "artifact", "log", "app.toml")
	if !strings.Contains(log, "sandbox: bwrap") {
		t.Fatalf("the build did not run under bwrap:\n%s", log)
	}
	out := filepath.Join(t.TempDir(), "out")
	p.mustRun(0, "artifact", "checkout", "app.toml", out)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("artifact of app.toml: %v", err)
		}
		return string(b)
	}
	if got := read("out.txt"); got != "hello\n" {
		t.Errorf("out.txt = %q, want %q", got, "hello\n")
	}
	root := strings.Fields(read("root.txt"))
	for _, hostOnly := range []string{"home", "root", "etc", "usr", "var"} {
		for _, entry := range root {
			if entry == hostOnly {
				t.Errorf("the sandbox's / lists the host's %s: %q", hostOnly, root)
			}
		}
	}
	if !strings.Contains(" "+strings.Join(root, " ")+" ", " bin ") {
		t.Errorf("the sandbox's / lacks the staged bin: %q", root)
	}
	if got := read("hostname.txt"); got != "absent\n" {
		t.Errorf("the sandbox sees the host's /etc/hostname: %q", got)
	}
	p.verifyCache()
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// SIGHUP (the terminal or the ssh connection closed) ends a session as SIGTERM does:
// every running job's process group is terminated, the summary is printed, and gantry
// exits 129.
func TestE2ESighupEndsTheSession(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("a.toml", "b.toml")})
	gate := p.scratch("gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	pids := map[string]string{}
	for _, name := range []string{"a", "b"} {
		pids[name] = p.scratch(name + ".pid")
		// Blocked on the test's fifo, which nobody ever writes.
		p.write("elements/"+name+".toml", manualElement(nil, fmt.Sprintf("echo $$ > %s; read line < %s", pids[name], gate)))
	}
	g := p.start("build", "--ui", "json", "--sandbox", "host", "--builders", "2")
	var groups []int
	for _, name := range []string{"a", "b"} {
		sh := readPid(t, pids[name])
		info, ok := proctest.Read(sh)
		if !ok || info.PGrp == g.pid() || info.PGrp == syscall.Getpgrp() {
			t.Fatalf("the build command of %s.toml (pid %d) is not running in a job group of its own: %+v", name, sh, info)
		}
		killGroupOnCleanup(t, info.PGrp)
		groups = append(groups, info.PGrp)
	}

	g.signal(syscall.SIGHUP)
	if code := g.wait(e2eTimeout); code != exitHangup {
		t.Fatalf("gantry exited with %d after SIGHUP, want %d\n%s", code, exitHangup, g.output())
	}
	for _, pgid := range groups {
		eventually(t, 2*time.Second, fmt.Sprintf("job process group %d is empty", pgid), func() bool { return len(proctest.Group(pgid)) == 0 })
	}
	end, ok := findEvent(g.snapshot(), "session-end", "", "")
	if !ok || end.Summary == nil || !end.Summary.Interrupted {
		t.Fatalf("no session-end summary saying interrupted: %+v\n%s", end.Summary, g.output())
	}
	for _, name := range []string{"a.toml", "b.toml"} {
		if e, ok := findEvent(g.snapshot(), "job-end", "build", name); !ok || e.Result != "terminated" {
			t.Errorf("job-end of %s: %+v, want result terminated", name, e)
		}
		assertNotBuilt(t, p, name)
	}
	if last := lastEvent(t, g.output()); last.Event != "error" || last.Text != "interrupted by SIGHUP" || last.ExitCode == nil || *last.ExitCode != exitHangup {
		t.Errorf("stderr does not end with an error event 'interrupted by SIGHUP' (exit %d)\n%s", exitHangup, g.output())
	}
}
