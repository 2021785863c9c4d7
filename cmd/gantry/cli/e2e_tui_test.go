package cli

// The interactive display end to end: gantry runs in a real terminal (a tmux pane),
// the test types keys with send-keys and reads the screen with capture-pane.

import (
	"fmt"
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

// tmuxPane is one gantry process in a pane of a private tmux server.
type tmuxPane struct {
	t      *testing.T
	tmux   string
	socket string
	status string // where the pane's shell writes gantry's exit status
}

// requireTmux returns tmux's path; it skips the test without tmux, or fails it in CI.
func requireTmux(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tmux is not installed: install tmux (apt-get install tmux)")
		}
		t.Skip("tmux is not installed: install tmux to run the terminal display's end-to-end test")
	}
	return path
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// startInTmux runs gantry with args in a new 100×30 tmux pane. The pane stays after
// gantry exits, so the screen it left and its exit status (file "status") can be read.
func (p *e2eProject) startInTmux(args ...string) *tmuxPane {
	p.t.Helper()
	tp := &tmuxPane{t: p.t, tmux: requireTmux(p.t), socket: filepath.Join(p.tmp, "tmux.sock"), status: filepath.Join(p.tmp, "status")}
	conf := filepath.Join(p.tmp, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g status off\n"), 0o644); err != nil {
		p.t.Fatal(err)
	}
	// gantry runs under a shell, as at a prompt: tmux sends SIGCONT to a pane's own
	// process when it stops, which would undo Ctrl-Z. The shell records the exit status
	// and keeps the pane open (a dead pane no longer reports the terminal's modes).
	script := filepath.Join(p.tmp, "run.sh")
	status := shellQuote(tp.status)
	if err := os.WriteFile(script, []byte("\"$@\"\necho $? > "+status+".tmp\nmv "+status+".tmp "+status+"\nexec sleep 3600\n"), 0o755); err != nil {
		p.t.Fatal(err)
	}
	cmd := p.command(args...)
	line := []string{"exec", "env", "-i"}
	for _, kv := range append(cmd.Env, "TERM=screen") {
		if !strings.HasPrefix(kv, "TERM=") || kv == "TERM=screen" {
			line = append(line, shellQuote(kv))
		}
	}
	line = append(line, "/bin/sh", shellQuote(script))
	for _, a := range cmd.Args {
		line = append(line, shellQuote(a))
	}
	tp.run("-f", conf, "new-session", "-d", "-x", "100", "-y", "30", "-s", "gantry", "-c", p.tmp, strings.Join(line, " "))
	p.t.Cleanup(func() { exec.Command(tp.tmux, "-S", tp.socket, "kill-server").Run() })
	return tp
}

func (tp *tmuxPane) run(args ...string) string {
	tp.t.Helper()
	out, err := exec.Command(tp.tmux, append([]string{"-S", tp.socket}, args...)...).CombinedOutput()
	if err != nil {
		tp.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// format expands a tmux format string for the pane (pane_pid, pane_dead, ...).
func (tp *tmuxPane) format(f string) string {
	return strings.TrimSpace(tp.run("display-message", "-p", "-t", "gantry", f))
}

// gantryPid is the pid of gantry, the child of the pane's shell.
func (tp *tmuxPane) gantryPid() int {
	tp.t.Helper()
	sh := tp.format("#{pane_pid}")
	b, err := os.ReadFile("/proc/" + sh + "/task/" + sh + "/children")
	if err != nil {
		tp.t.Fatalf("children of the pane's shell: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		tp.t.Fatalf("the pane's shell has children %q, want gantry alone", b)
	}
	return pid
}

// waitExit waits until gantry has exited, and returns its exit status and the screen
// it left.
func (tp *tmuxPane) waitExit() (int, string) {
	tp.t.Helper()
	eventually(tp.t, e2eTimeout, "gantry exits", func() bool { return fileSize(tp.status) > 0 })
	b, _ := os.ReadFile(tp.status)
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		tp.t.Fatalf("exit status %q: %v", b, err)
	}
	return code, tp.screen()
}

// screen is what the pane shows now.
func (tp *tmuxPane) screen() string { return tp.run("capture-pane", "-p", "-t", "gantry") }

// keys types keys (tmux key names: "s", "C-c", "Enter").
func (tp *tmuxPane) keys(keys ...string) {
	tp.t.Helper()
	tp.run(append([]string{"send-keys", "-t", "gantry"}, keys...)...)
}

// waitScreen waits until the screen matches re, and returns it.
func (tp *tmuxPane) waitScreen(what, re string) string {
	tp.t.Helper()
	return tp.waitScreenIs(what, re, true)
}

// waitScreenIs waits until whether the screen matches re is want.
func (tp *tmuxPane) waitScreenIs(what, re string, want bool) string {
	tp.t.Helper()
	rx := regexp.MustCompile(re)
	var screen string
	deadline := time.Now().Add(e2eTimeout)
	for {
		screen = tp.screen()
		if rx.MatchString(screen) == want {
			return screen
		}
		if time.Now().After(deadline) {
			tp.t.Fatalf("timed out after %v waiting for %s (/%s/); the screen:\n%s", e2eTimeout, what, re, screen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopAndContinue types Ctrl-Z, waits until gantry is stopped, writes shell (what a
// shell would print meanwhile, below the display) to the terminal, waits until the
// screen matches shown, and sends gantry SIGCONT, as fg does.
func (tp *tmuxPane) stopAndContinue(shell, shown string) {
	tp.t.Helper()
	gantry := tp.gantryPid()
	tp.keys("C-z")
	eventually(tp.t, e2eTimeout, "gantry is stopped (state T)", func() bool {
		pi, ok := proctest.Read(gantry)
		return ok && pi.State == 'T'
	})
	tty, err := os.OpenFile(tp.format("#{pane_tty}"), os.O_WRONLY, 0)
	if err != nil {
		tp.t.Fatal(err)
	}
	fmt.Fprint(tty, shell)
	tty.Close()
	tp.waitScreen("the shell's lines", shown)
	syscall.Kill(gantry, syscall.SIGCONT)
}

// TestE2ETUI: the header and the running job appear; s stops the job's processes and s
// resumes them; Ctrl-C suspends and asks, c continues; Ctrl-Z stops jobs and gantry,
// SIGCONT resumes; the session ends with the summary, exit code 0 and a clean terminal.
func TestE2ETUI(t *testing.T) {
	t.Parallel()
	requireTmux(t)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("tick.toml")})
	ticks, shPid, release := p.scratch("ticks"), p.scratch("sh.pid"), p.scratch("release")
	p.write("elements/tick.toml", manualElement(nil,
		fmt.Sprintf("echo $$ > %s; while [ ! -e %s ]; do echo x >> %s; sleep 0.05; done; echo ticking done", shPid, release, ticks)))
	tp := p.startInTmux("build", "--sandbox", "host")

	tp.waitScreen("the header and the running job", `(?s)e2e.*build.*tick\.toml`)
	sh, ok := proctest.Read(readPid(t, shPid))
	if !ok {
		t.Fatal("the build command is not running")
	}
	pgid := sh.PGrp // the job's process group
	killGroupOnCleanup(t, pgid)
	waitGrowth(t, ticks, 0)

	// s suspends every job; s again resumes them.
	tp.keys("s")
	tp.waitScreen("the header saying SUSPENDED", `SUSPENDED`)
	waitGroupStopped(t, pgid)
	tp.keys("s")
	waitGrowth(t, ticks, fileSize(ticks))
	tp.waitScreenIs("the header without SUSPENDED", `SUSPENDED`, false)

	// Ctrl-C suspends and asks; c continues.
	tp.keys("C-c")
	tp.waitScreen("the Ctrl-C prompt", `(?i)continue.*quit.*terminate`)
	waitGroupStopped(t, pgid)
	tp.keys("c")
	waitGrowth(t, ticks, fileSize(ticks))

	// Ctrl-Z stops the jobs and gantry; SIGCONT (what fg sends) resumes both.
	gantry := tp.gantryPid()
	tp.keys("C-z")
	eventually(t, e2eTimeout, "gantry is stopped (state T)", func() bool {
		pi, ok := proctest.Read(gantry)
		return ok && pi.State == 'T'
	})
	waitGroupStopped(t, pgid)
	syscall.Kill(gantry, syscall.SIGCONT)
	waitGrowth(t, ticks, fileSize(ticks))
	tp.waitScreen("the display back after SIGCONT", `tick\.toml`)

	// Let the build finish: the live area gives way to the summary.
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, screen := tp.waitExit()
	if !strings.Contains(screen, "Session summary") || !strings.Contains(screen, "Success.") {
		t.Errorf("no summary on the screen after the session:\n%s", screen)
	}
	if code != 0 {
		t.Errorf("gantry exited with status %d, want 0; the screen:\n%s", code, screen)
	}
	if cursor := tp.format("#{cursor_flag}"); cursor != "1" {
		t.Errorf("the cursor is hidden after gantry exited (cursor_flag %s)", cursor)
	}
	if alt := tp.format("#{alternate_on}"); alt != "0" {
		t.Errorf("the terminal is left in the alternate screen")
	}
	if st := p.state("tick.toml"); st != "cached" {
		t.Errorf("tick.toml is %q after the session, want cached", st)
	}
}

// TestE2ETUIFailurePrompt: with no --on-error, a failed build holds the session and
// asks; l shows the failed job's log, esc goes back to the question, r runs the build
// again (it passes the second time) and the session ends successfully.
func TestE2ETUIFailurePrompt(t *testing.T) {
	t.Parallel()
	requireTmux(t)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("flaky.toml")})
	marker := p.scratch("second-try")
	p.write("elements/flaky.toml", manualElement(nil,
		fmt.Sprintf("if [ ! -e %s ]; then touch %s; echo 'first try: broken on purpose'; exit 3; fi; echo 'second try: fine'", marker, marker)))
	tp := p.startInTmux("build", "--sandbox", "host")

	tp.waitScreen("the failure question", `(?s)flaky\.toml.*c continue.*r retry.*l log`)
	tp.keys("l")
	// The failure's lines above the live area quote the log too: wait for the view.
	tp.waitScreen("the failed job's log", `(?s)log of build flaky\.toml.*first try: broken on purpose.*esc back`)
	tp.keys("Escape")
	tp.waitScreenIs("the log view closed", `esc back`, false)
	tp.waitScreen("the question again", `r retry`)
	tp.keys("r")
	code, screen := tp.waitExit()
	if code != 0 {
		t.Errorf("gantry exited with status %d after a successful retry, want 0; the screen:\n%s", code, screen)
	}
	if !strings.Contains(screen, "Success.") {
		t.Errorf("no successful summary:\n%s", screen)
	}
	if st := p.state("flaky.toml"); st != "cached" {
		t.Errorf("flaky.toml is %q after the retry, want cached", st)
	}
	log, _ := p.mustRun(0, "artifact", "log", "flaky.toml")
	if !strings.Contains(log, "second try: fine") {
		t.Errorf("the cached log is not the retry's:\n%s", log)
	}
}

// TestE2ETUITerminate: t asks, y terminates the running job; gantry exits with 130,
// nothing of the job survives, nothing is cached, and the terminal is left clean.
func TestE2ETUITerminate(t *testing.T) {
	t.Parallel()
	requireTmux(t)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("tick.toml")})
	ticks, shPid := p.scratch("ticks"), p.scratch("sh.pid")
	p.write("elements/tick.toml", manualElement(nil,
		fmt.Sprintf("echo $$ > %s; while :; do echo x >> %s; sleep 0.05; done", shPid, ticks)))
	tp := p.startInTmux("build", "--sandbox", "host")
	tp.waitScreen("the running job", `build +tick\.toml`)
	sh, ok := proctest.Read(readPid(t, shPid))
	if !ok {
		t.Fatal("the build command is not running")
	}
	killGroupOnCleanup(t, sh.PGrp)
	tp.keys("t")
	tp.waitScreen("the confirmation", `(?i)terminate.*y/N`)
	tp.keys("y")
	code, screen := tp.waitExit()
	if code != exitInterrupted {
		t.Errorf("gantry exited with status %d after terminate, want %d; the screen:\n%s", code, exitInterrupted, screen)
	}
	if !strings.Contains(screen, "Interrupted.") {
		t.Errorf("the summary does not say the session was interrupted:\n%s", screen)
	}
	eventually(t, 2*time.Second, "the job's processes are gone", func() bool { return len(proctest.Group(sh.PGrp)) == 0 })
	if cursor := tp.format("#{cursor_flag}"); cursor != "1" {
		t.Errorf("the cursor is hidden after gantry exited (cursor_flag %s)", cursor)
	}
	assertNotBuilt(t, p, "tick.toml")
}

// TestE2ETUILogViewAndRedraw: the log view follows a running job's log like tail -f;
// after Ctrl-Z, with the shell writing below the display while gantry is stopped, fg
// (SIGCONT) redraws the screen without the stale lines, and the header once.
func TestE2ETUILogViewAndRedraw(t *testing.T) {
	t.Parallel()
	requireTmux(t)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("tick.toml")})
	release := p.scratch("release")
	p.write("elements/tick.toml", manualElement(nil,
		fmt.Sprintf("i=0; while [ ! -e %s ]; do i=$((i+1)); echo tick $i; sleep 0.05; done", release)))
	tp := p.startInTmux("build", "--sandbox", "host")
	tp.waitScreen("the running job", `build +tick\.toml`)
	tp.keys("Enter")
	tp.waitScreen("the log view", `(?s)log of build tick\.toml.*tick 3\b`)
	tp.waitScreen("the log view growing", `tick 30\b`)

	tp.stopAndContinue("\r\n[1]+  Stopped   STALE-LINE-1\r\n$ fg STALE-LINE-2\r\n", `STALE-LINE-2`)
	screen := tp.waitScreenIs("the screen redrawn without the shell's lines", `STALE-LINE`, false)
	if n := strings.Count(screen, "log of build tick.toml"); n != 1 {
		t.Errorf("the log view's title is on the screen %d times, want once:\n%s", n, screen)
	}
	tp.waitScreen("the log view still following", `tick [1-9]\d\d\b`)

	// A narrower terminal: the display is drawn again at the new width, once.
	tp.run("resize-window", "-t", "gantry", "-x", "60")
	tp.waitScreen("the counters wrapped to the new width", `(?m)^build \d+ ok`)
	screen = tp.screen()
	if n := strings.Count(screen, "log of build tick.toml"); n != 1 {
		t.Errorf("after the resize the log view's title is on the screen %d times, want once:\n%s", n, screen)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, screen := tp.waitExit(); code != 0 {
		t.Errorf("gantry exited with status %d, want 0; the screen:\n%s", code, screen)
	}
}

// TestE2ETUINoGhostLinesAfterResizeOrStop: the live area (header, counters, two
// running builds, under the lines of three finished ones) is on the screen once — no
// copy of the header or the counters is left above it — after the terminal gets
// narrower (the terminal reflows the wide lines onto more rows than were drawn),
// wider again, and after Ctrl-Z with the shell writing its lines below the display,
// then fg (SIGCONT).
func TestE2ETUINoGhostLinesAfterResizeOrStop(t *testing.T) {
	t.Parallel()
	requireTmux(t)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("a.toml", "b.toml")})
	release := p.scratch("release")
	first := []string{"c1.toml", "c2.toml", "c3.toml"}
	for _, name := range first {
		p.write("elements/"+name, manualElement(nil, "true"))
	}
	for _, name := range []string{"a", "b"} {
		p.write("elements/"+name+".toml", manualElement(first,
			fmt.Sprintf("i=0; while [ ! -e %s ]; do i=$((i+1)); echo %s $i; sleep 0.05; done", release, name)))
	}
	tp := p.startInTmux("build", "--sandbox", "host", "--builders", "2")
	header, counters := regexp.MustCompile(`\] e2e +\d+/5 elements`), regexp.MustCompile(`fetch \d+ ok`)
	once := func(when, screen string) {
		t.Helper()
		for _, rx := range []*regexp.Regexp{header, counters} {
			if n := len(rx.FindAllString(screen, -1)); n != 1 {
				t.Errorf("%s: /%s/ is on the screen %d times, want once:\n%s", when, rx, n, screen)
			}
		}
	}
	once("at the start", tp.waitScreen("the finished builds, the header and both builds", `(?s)\] e2e +3/5 elements.*build +[ab]\.toml.*build +[ab]\.toml`))

	// Narrower than the counters' line: they are drawn on two lines.
	tp.run("resize-window", "-t", "gantry", "-x", "50")
	once("after the terminal got narrower", tp.waitScreen("the counters on two lines", `(?m)^build \d+ ok`))
	tp.run("resize-window", "-t", "gantry", "-x", "100")
	once("after the terminal got wider", tp.waitScreen("the counters on one line", `wait │ build \d+ ok`))

	tp.stopAndContinue("\r\n[1]+  Stopped   gantry build\r\n$ fg\r\n", `\$ fg`)
	once("after Ctrl-Z and fg", tp.waitScreen("the live area after fg", `(?s)all jobs resumed.*\] e2e .*build +[ab]\.toml.*build +[ab]\.toml`))

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, screen := tp.waitExit(); code != 0 {
		t.Errorf("gantry exited with status %d, want 0; the screen:\n%s", code, screen)
	}
}

// TestE2ETUIShellFromFailurePrompt: s at the failure question opens a shell in the
// failed build tree, with the banner and the [project/element:/path]$ prompt; after
// exit the live area is drawn again once, the question under it.
func TestE2ETUIShellFromFailurePrompt(t *testing.T) {
	t.Parallel()
	requireTmux(t)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("bad.toml")})
	p.write("elements/bad.toml", manualElement(nil, "echo broken > left-behind.txt; exit 3"))
	tp := p.startInTmux("build", "--sandbox", "host")
	tp.waitScreen("the failure question", `(?s)bad\.toml.*c continue.*s shell`)
	tp.keys("s")
	tp.waitScreen("the shell's banner and prompt", `(?s)gantry shell: bad\.toml \(key [0-9a-f]{8}, failed build\), host sandbox.*\[e2e/bad\.toml:[^\]]*\]\$`)
	tp.keys("cat left-behind.txt; exit", "Enter")
	screen := tp.waitScreen("the question again after the shell", `(?s)broken.*c continue`)
	for _, once := range []string{"c continue", "e2e  1/1 elements"} {
		if n := strings.Count(screen, once); n != 1 {
			t.Errorf("%q is on the screen %d times after the shell, want once:\n%s", once, n, screen)
		}
	}
	tp.keys("c")
	if code, screen := tp.waitExit(); code != 1 {
		t.Errorf("gantry exited with status %d, want 1; the screen:\n%s", code, screen)
	}
}

// TestE2EBwrapShellJobControl: `gantry shell` under bwrap gives the interactive shell the
// terminal as its controlling terminal: no "can't access tty" / "cannot set terminal
// process group" noise, and job control works.
func TestE2EBwrapShellJobControl(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	p := newE2EProject(t, map[string]string{
		"project.toml":          projectTOML("app.toml"),
		"elements/sysroot.toml": localImport("files/sysroot"),
		"elements/app.toml":     "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n",
	})
	writeBusyboxSysroot(t, filepath.Join(p.root, "files", "sysroot"), "sh", "sleep", "echo")
	p.mustRun(0, "build", "--ui", "plain", "sysroot.toml")
	tp := p.startInTmux("shell", "--build", "--sandbox", "bwrap", "app.toml")
	tp.waitScreen("the shell's prompt", `\[e2e/app\.toml:/gantry/build\]\$`)
	tp.keys("sleep 30 &", "Enter")
	tp.keys("jobs; echo jobs-listed", "Enter")
	screen := tp.waitScreen("the job list", `(?s)Running\s+sleep 30.*\njobs-listed`)
	for _, noise := range []string{"can't access tty", "job control turned off", "cannot set terminal process group", "Cannot set tty", "no job control"} {
		if strings.Contains(screen, noise) {
			t.Errorf("the shell under bwrap says %q:\n%s", noise, screen)
		}
	}
	tp.keys("kill %1; exit", "Enter")
	if code, screen := tp.waitExit(); code != 0 {
		t.Errorf("gantry shell exited with status %d, want 0; the screen:\n%s", code, screen)
	}
}
