package cli

// End-to-end tests of what outlives gantry: nothing a build started.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/proctest"
)

// markedProcesses lists the pids of live processes whose command line contains marker.
func markedProcesses(marker string) []int { return processesWith("cmdline", marker) }

// processesWith lists the pids of live processes whose /proc/PID/file (cmdline,
// environ) contains marker.
func processesWith(file, marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), file))
		if err == nil && bytes.Contains(b, []byte(marker)) && proctest.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killMarkedOnCleanup kills, when the test ends, whatever carries marker, so that a
// failing test leaves nothing behind.
func killMarkedOnCleanup(t *testing.T, marker string) {
	t.Cleanup(func() {
		for _, pid := range markedProcesses(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// longLivedBuild is a build command that starts three processes carrying marker in
// their command line, each meant to live for minutes: one in the background, one
// daemonised (setsid, and orphaned by its own parent's exit), and one in the
// foreground, after touching ready.
func longLivedBuild(marker, ready string) string {
	sleeper := "./" + marker
	return fmt.Sprintf("ln -s \"$(command -v sleep)\" %[1]s; %[1]s 300 & setsid sh -c '%[1]s 300 & exit 0'; touch %[2]s; %[1]s 300",
		sleeper, ready)
}

// waitMarked waits until n processes carry marker.
func waitMarked(t *testing.T, marker string, n int) []int {
	t.Helper()
	var pids []int
	eventually(t, e2eTimeout, fmt.Sprintf("%d build processes marked %s run", n, marker), func() bool {
		pids = markedProcesses(marker)
		return len(pids) >= n
	})
	return pids
}

// kill -9 of gantry: every process the build started dies with it, including one
// that left the job's process group and session (setsid) and whose parent exited.
func TestE2EKill9LeavesNoBuildProcess(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("gantry-orphan-%d", time.Now().UnixNano())
	killMarkedOnCleanup(t, marker)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("long.toml")})
	ready := p.scratch("ready")
	p.write("elements/long.toml", manualElement(nil, longLivedBuild(marker, ready)))

	g := p.start("build", "--ui", "json", "--sandbox", "host")
	g.waitEvent("job-start", "build", "long.toml")
	eventually(t, e2eTimeout, "the build is ready", func() bool { _, err := os.Stat(ready); return err == nil })
	pids := waitMarked(t, marker, 3)

	g.signal(syscall.SIGKILL)
	g.wait(e2eTimeout)
	eventually(t, 10*time.Second, fmt.Sprintf("no process marked %s is left (was %v)", marker, pids), func() bool {
		return len(markedProcesses(marker)) == 0
	})
}

// A build that leaves a daemon behind and succeeds: the daemon dies with the job.
func TestE2EFinishedJobLeavesNoDaemon(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("gantry-daemon-%d", time.Now().UnixNano())
	killMarkedOnCleanup(t, marker)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("d.toml")})
	sleeper := "./" + marker
	p.write("elements/d.toml", manualElement(nil,
		fmt.Sprintf("ln -s \"$(command -v sleep)\" %[1]s; setsid sh -c '%[1]s 300 >/dev/null 2>&1 & exit 0'; %[1]s 0.01", sleeper)))
	_, stderr := p.mustRun(0, "build", "--ui", "json", "--sandbox", "host")
	if left := markedProcesses(marker); len(left) > 0 {
		t.Errorf("the build's daemon outlived its job: %v\n%s", left, strings.TrimSpace(stderr))
	}
}

// A second Ctrl-C kills jobs outright (SIGKILL to the job's group), so the job cannot
// clean up; a daemon it started must die with the session anyway.
func TestE2EKilledJobLeavesNoDaemon(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("gantry-killed-%d", time.Now().UnixNano())
	killMarkedOnCleanup(t, marker)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("k.toml")})
	ready := p.scratch("ready")
	sleeper := "./" + marker
	// The foreground loop survives SIGTERM, so only the kill ends the job.
	p.write("elements/k.toml", manualElement(nil, fmt.Sprintf(
		"ln -s \"$(command -v sleep)\" %[1]s; setsid sh -c '%[1]s 300 & exit 0'; trap '' TERM; touch %[2]s; while :; do %[1]s 0.05 || :; done",
		sleeper, ready)))

	g := p.start("build", "--ui", "json", "--sandbox", "host")
	g.waitEvent("job-start", "build", "k.toml")
	eventually(t, e2eTimeout, "the build is ready", func() bool { _, err := os.Stat(ready); return err == nil })
	waitMarked(t, marker, 2)
	g.signal(syscall.SIGINT)
	g.signal(syscall.SIGINT)
	g.wait(e2eTimeout)
	eventually(t, 10*time.Second, "no process marked "+marker+" is left", func() bool { return len(markedProcesses(marker)) == 0 })
}

// Under bwrap too, kill -9 of gantry leaves nothing of the build (bwrap's
// --die-with-parent and the job's own cleanup).
func TestE2EKill9LeavesNoBwrapProcess(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	marker := fmt.Sprintf("gantry-bwrap-orphan-%d", time.Now().UnixNano())
	killMarkedOnCleanup(t, marker)
	p := newE2EProject(t, map[string]string{
		"project.toml":          projectTOML("long.toml"),
		"elements/sysroot.toml": "kind = \"import\"\n[[sources]]\nkind = \"local\"\npath = \"files/sysroot\"\n",
		// Each sh carries marker as its $0 and waits for its sleep.
		"elements/long.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = " + tomlList(
			fmt.Sprintf("sh -c 'sleep 300; :' %[1]s & setsid sh -c 'sleep 300; :' %[1]s & touch ready; sh -c 'sleep 300; :' %[1]s", marker)) + "\n",
	})
	bin := filepath.Join(p.root, "files", "sysroot", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, "/bin/busybox", filepath.Join(bin, "busybox"), 0o755)
	for _, tool := range []string{"sh", "sleep", "setsid", "touch"} {
		if err := os.Symlink("busybox", filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}

	g := p.start("build", "--ui", "json", "--sandbox", "bwrap")
	g.waitEvent("job-start", "build", "long.toml")
	pids := waitMarked(t, marker, 4) // the build's sh -c and the three marked shells
	g.signal(syscall.SIGKILL)
	g.wait(e2eTimeout)
	eventually(t, 10*time.Second, fmt.Sprintf("no process marked %s is left (was %v)", marker, pids), func() bool {
		return len(markedProcesses(marker)) == 0
	})
}
