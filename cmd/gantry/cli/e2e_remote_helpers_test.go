package cli

// Helpers of the end-to-end tests of remote execution, against Bazel's remote
// worker (e2e_remote_test.go) and BuildGrid with gantry workers
// (e2e_buildgrid_test.go): the busybox projects, long runs, and the processes
// the builds start on this machine.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testtree"
)

// remoteTimeout bounds a whole remote session: a JVM worker on a loaded
// two-core machine runs an action in about a second.
const remoteTimeout = 3 * time.Minute

// remoteApplets are the busybox applets the remote projects' commands and
// gantry's remote script use.
var remoteApplets = []string{"sh", "mkdir", "cp", "rm", "cat", "echo", "ls", "sleep", "test", "true", "printf"}

// newBusyboxProject is a project of projectTOML and files (elements and sources)
// with a busybox sysroot of copies (not links: Bazel's worker drops the input
// root's symlinks) at files/sysroot, the element sysroot.toml.
func newBusyboxProject(t *testing.T, projectTOML string, files map[string]string) *e2eProject {
	t.Helper()
	all := map[string]string{"project.toml": projectTOML, "elements/sysroot.toml": localImport("files/sysroot")}
	for k, v := range files {
		all[k] = v
	}
	p := newE2EProject(t, all)
	bin := filepath.Join(p.root, "files", "sysroot", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range remoteApplets {
		copyFile(t, "/bin/busybox", filepath.Join(bin, applet), 0o755)
	}
	return p
}

// runLong is run with remoteTimeout instead of e2eTimeout.
func (p *e2eProject) runLong(want int, args ...string) (stdout, stderr string) {
	p.t.Helper()
	g := p.start(args...)
	code := g.wait(remoteTimeout)
	if code != want {
		p.t.Fatalf("gantry %s: exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, g.stdout.String(), g.output())
	}
	return g.stdout.String(), g.output()
}

// twentyElements is a project of twenty manual elements on the sysroot: a
// binary tree under e00 and e19 on top of the leaves. Each writes its own file
// after its dependencies' ones, what it sees as /, and tries a marker in /tmp.
func twentyElements(marker string) map[string]string {
	files := map[string]string{"files/src/hello.txt": "hello from the sources\n"}
	for i := 0; i < 20; i++ {
		var deps []string
		switch {
		case i == 19:
			for j := 9; j <= 18; j++ {
				deps = append(deps, fmt.Sprintf("e%02d.toml", j))
			}
		case i > 0:
			deps = []string{fmt.Sprintf("e%02d.toml", (i-1)/2)}
		}
		dir := fmt.Sprintf("%%{install-root}/share/e%02d", i)
		cmds := []string{"mkdir -p " + dir}
		for _, d := range deps {
			cmds = append(cmds, "cat /share/"+strings.TrimSuffix(d, ".toml")+"/out.txt >> "+dir+"/out.txt")
		}
		cmds = append(cmds, fmt.Sprintf("echo e%02d >> %s/out.txt", i, dir), "ls / > "+dir+"/root.txt",
			"echo ran > "+marker)
		s := "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n"
		if len(deps) > 0 {
			s += "depends = " + tomlList(deps...) + "\n"
		}
		if i == 0 {
			s += "[[sources]]\nkind = \"local\"\npath = \"files/src\"\n"
			cmds = append(cmds, "cp hello.txt "+dir+"/hello.txt")
		}
		s += "[config]\nbuild-commands = " + tomlList(cmds...) + "\n"
		files[fmt.Sprintf("elements/e%02d.toml", i)] = s
	}
	return files
}

// checkBuiltRemotely checks the logs of the twenty elements of p: each built on
// the execution service at url, in an action the line ran names (its first
// group, if any, is the worker, returned by element), and ran no command here.
func checkBuiltRemotely(t *testing.T, p *e2eProject, url string, ran *regexp.Regexp) map[string]string {
	t.Helper()
	ranOn := map[string]string{}
	for i := 0; i < 20; i++ {
		el := fmt.Sprintf("e%02d.toml", i)
		log, _ := p.mustRun(0, "artifact", "log", el)
		m := ran.FindStringSubmatch(log)
		if !strings.Contains(log, "building remotely on "+url) || m == nil {
			t.Errorf("%s did not build on the execution service; its log:\n%s", el, log)
		} else if len(m) > 1 {
			ranOn[el] = m[1]
		}
		if strings.Contains(log, "sandbox: ") || strings.Contains(log, "\n+ ") {
			t.Errorf("%s ran a command here; its log:\n%s", el, log)
		}
	}
	return ranOn
}

// checkAsLocal checks that the twenty elements' keys and `artifact checkout
// --deps all` of e19 are the same in the remotely built project rp and the
// locally built lp, and returns rp's checkout.
func checkAsLocal(t *testing.T, rp, lp *e2eProject) map[string]string {
	t.Helper()
	keys := func(p *e2eProject) string {
		out, _ := p.mustRun(0, "show", "--deps", "all", "--format", "%{name} %{key}", "e19.toml")
		return out
	}
	if r, l := keys(rp), keys(lp); r != l {
		t.Errorf("the keys of the remote project differ from the local one's:\nremote:\n%slocal:\n%s", r, l)
	}
	rout, lout := filepath.Join(rp.tmp, "out"), filepath.Join(lp.tmp, "out")
	rp.mustRun(0, "artifact", "checkout", "--deps", "all", "e19.toml", rout)
	lp.mustRun(0, "artifact", "checkout", "--deps", "all", "e19.toml", lout)
	rt := testtree.Read(t, rout)
	if d := testtree.Diff(testtree.Read(t, lout), rt); d != "" {
		t.Errorf("the checkout of the remote build differs from the local one's (want: local, got: remote):\n%.4000s", d)
	}
	if got, want := rt["share/e19/out.txt"], "file:e00\ne01\ne04\ne09\n"; !strings.HasPrefix(got, want) {
		t.Errorf("e19's out.txt is %q, want it to start with %q: its dependencies' files", got, want)
	}
	return rt
}

// checkFromActionCache checks that the twenty elements of p, built in a clean
// cache, all came from the action cache (no log line ran matches) and that the
// checkout of e19 is want.
func checkFromActionCache(t *testing.T, p *e2eProject, ran *regexp.Regexp, want map[string]string) {
	t.Helper()
	for i := 0; i < 20; i++ {
		el := fmt.Sprintf("e%02d.toml", i)
		log, _ := p.mustRun(0, "artifact", "log", el)
		if !strings.Contains(log, "remote build: the action cache had action ") || ran.MatchString(log) {
			t.Errorf("%s was not an action cache hit; its log:\n%s", el, log)
		}
	}
	p.mustRun(0, "artifact", "checkout", "--deps", "all", "e19.toml", filepath.Join(p.tmp, "out"))
	if d := testtree.Diff(want, testtree.Read(t, filepath.Join(p.tmp, "out"))); d != "" {
		t.Errorf("the action cache's artifacts differ from the first remote build's (want: first, got: second):\n%.4000s", d)
	}
}

// badElement is bad.toml, whose third command fails with exit code 3 after the
// first wrote partial.txt in the build directory.
var badElement = map[string]string{
	"elements/bad.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = " +
		tomlList("echo partial > partial.txt", "echo about to fail", "exit 3") + "\n",
}

// checkRemoteFailure checks bad.toml of p after its remote build failed: its
// log says failed (the session's line) and the command's marker lines, it is
// cached as failed, explain says where (builtOn), and shell --build opens the
// failed build tree.
func checkRemoteFailure(t *testing.T, p *e2eProject, failed, builtOn string) {
	t.Helper()
	log, _ := p.mustRun(0, "artifact", "log", "bad.toml")
	for _, w := range []string{failed, "[gantry] build-commands 3/3: exit 3", "about to fail"} {
		if !strings.Contains(log, w) {
			t.Errorf("the failed build's log does not say %q:\n%s", w, log)
		}
	}
	if st := p.state("bad.toml"); st != "failed" {
		t.Errorf("bad.toml is %q, want failed", st)
	}
	wantExplain := "bad.toml: its build at this key failed on " + builtOn + " and is cached: 'gantry build --retry-failed' builds it again\n"
	if out, _ := p.mustRun(0, "explain"); out != wantExplain {
		t.Errorf("explain says %q, want %q", out, wantExplain)
	}
	out, _ := p.mustRun(0, "shell", "--build", "bad.toml", "--", "sh", "-c", "cat partial.txt")
	if out != "partial\n" {
		t.Errorf("shell --build in the failed build tree: cat partial.txt = %q, want %q", out, "partial\n")
	}
}

// waitForSleep waits until a process `sleep ARG` runs on this machine (the
// worker's command; the tests use a distinct ARG each).
func waitForSleep(t *testing.T, arg string) {
	t.Helper()
	eventually(t, remoteTimeout, "the worker runs `sleep "+arg+"`", func() bool { return sleepRuns(arg) })
}

// waitForSleep waits until a process `sleep ARG` runs on this machine, failing
// the test at once if gantry exits first.
func (g *gantryProc) waitForSleep(arg string) {
	g.t.Helper()
	eventually(g.t, remoteTimeout, "the worker runs `sleep "+arg+"`", func() bool {
		select {
		case <-g.exited:
			g.t.Fatalf("gantry exited (code %d) before the worker ran `sleep %s`:\n%s", g.exitCode, arg, g.output())
		default:
		}
		return sleepRuns(arg)
	})
}

// interruptDuringSleep runs `gantry ARGS`, sends it SIGINT once a process
// `sleep ARG` runs (the worker's command), and checks that it exits with 130
// within 10 s; the element must not be cached (failed or built).
func (p *e2eProject) interruptDuringSleep(element, arg string, args ...string) {
	p.t.Helper()
	g := p.start(args...)
	g.waitForSleep(arg)
	g.signal(syscall.SIGINT)
	signalled := time.Now()
	if code := g.wait(remoteTimeout); code != 130 {
		p.t.Fatalf("exit code %d after SIGINT, want 130\n%s", code, g.output())
	}
	if d := g.exitedAt.Sub(signalled); d > 10*time.Second {
		p.t.Errorf("gantry took %v to end after SIGINT", d)
	}
	if st := p.state(element); st == "failed" || st == "cached" {
		p.t.Errorf("%s is %q after an interrupted remote build", element, st)
	}
}

// sleepRuns reports whether a process `sleep ARG` runs.
func sleepRuns(arg string) bool { return len(sleepPids(arg)) > 0 }

// sleepPids are the processes `sleep ARG` running on this machine.
func sleepPids(arg string) []int {
	return processes(func(args []string) bool {
		return len(args) == 2 && filepath.Base(args[0]) == "sleep" && args[1] == arg
	})
}

// processes are the processes of this machine whose arguments match.
func processes(match func(args []string) bool) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}
