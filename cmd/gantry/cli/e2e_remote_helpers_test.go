package cli

// Helpers of the end-to-end tests of remote execution, against Bazel's remote
// worker (e2e_remote_test.go) and BuildGrid with gantry workers
// (e2e_buildgrid_test.go): the busybox projects, long runs, and the processes
// the builds start on this machine.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
