package cli

// End-to-end tests of remote execution against a real execution server: Bazel's
// own remote worker (REAPI v2.0), compiled once per test run by
// internal/testreapi and started on 127.0.0.1. The worker runs commands in a
// plain directory, so the projects set wrap = "bwrap"; it drops input
// symlinks, so the sysroot is busybox copied once per applet.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testreapi"
)

// remoteProjectTOML is a project.toml building on the worker at url with wrap = "bwrap".
func remoteProjectTOML(url string, targets ...string) string {
	return projectTOML(targets...) + "\n[remote-execution]\nwrap = \"bwrap\"\n[remote-execution.execution-service]\nurl = \"" + url + "\"\n"
}

// newRemoteProject is a project of files (elements and sources) with a busybox
// sysroot of copies at files/sysroot (sysroot.toml), building on worker if
// it is not nil, else locally.
func newRemoteProject(t *testing.T, worker *testreapi.Worker, files map[string]string, targets ...string) *e2eProject {
	t.Helper()
	if worker != nil {
		return newBusyboxProject(t, remoteProjectTOML(worker.URL(), targets...), files)
	}
	return newBusyboxProject(t, projectTOML(targets...), files)
}

// startRemoteWorker starts Bazel's remote worker, with bwrap and busybox
// required as for any bwrap test.
func startRemoteWorker(t *testing.T, jobs int) *testreapi.Worker {
	t.Helper()
	requireSandboxTools(t)
	return testreapi.StartBazelWorker(t, testreapi.WorkerOptions{Jobs: jobs})
}

// remoteLogLine matches the log line of a remote build's action.
var remoteLogLine = regexp.MustCompile(`remote build: action [0-9a-f]{64}/\d+ ran on the execution service \(it names no worker\)`)

func TestE2ERemoteExecutionOnBazelWorker(t *testing.T) {
	t.Parallel()
	worker := startRemoteWorker(t, 4)

	// Twenty elements built entirely on the worker give the artifacts, file by
	// file, and the keys of a local bwrap build; a second cache gets them all
	// from the action cache.
	t.Run("twenty elements", func(t *testing.T) {
		t.Parallel()
		marker := filepath.Join("/tmp", "gantry-remote-e2e-marker-"+filepath.Base(t.TempDir()))
		files := twentyElements(marker)
		rp := newRemoteProject(t, worker, files, "e19.toml")
		_, stderr := rp.runLong(0, "build", "--ui", "plain")
		if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the marker the builds write is on the host (%v): a build ran here\n%s", err, stderr)
		}
		checkBuiltRemotely(t, rp, worker.URL(), remoteLogLine)

		lp := newRemoteProject(t, nil, files, "e19.toml")
		lp.runLong(0, "build", "--ui", "plain", "--sandbox", "bwrap")
		rt := checkAsLocal(t, rp, lp)

		// A second, clean cache: every action is in the worker's action cache.
		second := newRemoteProject(t, worker, files, "e19.toml")
		second.runLong(0, "build", "--ui", "plain")
		checkFromActionCache(t, second, remoteLogLine, rt)
	})

	// A failing command: exit 1, the log names the command, and the failed
	// artifact's build tree opens with shell --build.
	t.Run("failure", func(t *testing.T) {
		t.Parallel()
		p := newRemoteProject(t, worker, badElement, "bad.toml")
		_, stderr := p.runLong(1, "build", "--ui", "plain")
		const want = "build-commands 3/3 failed on the execution service (it names no worker) with exit code 3"
		if !strings.Contains(stderr, want) {
			t.Errorf("the session's output does not say %q:\n%s", want, stderr)
		}
		checkRemoteFailure(t, p, want, worker.URL())
	})

	// Ctrl-C during a long action ends the session at once with 130, nothing cached.
	t.Run("ctrl-c", func(t *testing.T) {
		t.Parallel()
		p := newRemoteProject(t, worker, map[string]string{
			"elements/long.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = [\"sleep 97.3\"]\n",
		}, "long.toml")
		p.interruptDuringSleep("long.toml", "97.3", "build", "--ui", "plain")
		// Bazel's worker serves no Operations: CancelOperation is refused and the
		// command runs on until the worker ends (TestRunCancelledCancelsTheOperation
		// shows the call against the fake).
		t.Logf("after the cancel, the worker's command still runs: %v", sleepRuns("97.3"))
	})
}

// The worker killed while an action runs: an infrastructure failure, retried,
// then an error naming the service; nothing is cached as failed, and the
// element builds once a worker answers again.
func TestE2ERemoteWorkerKilled(t *testing.T) {
	t.Parallel()
	worker := startRemoteWorker(t, 2)
	files := map[string]string{
		"elements/long.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = [\"sleep 5.37\", \"mkdir -p %{install-root}/x\", \"echo done > %{install-root}/x/y\"]\n",
	}
	p := newRemoteProject(t, worker, files, "long.toml")
	g := p.start("build", "--ui", "plain")
	waitForSleep(t, "5.37")
	worker.Kill()
	code := g.wait(remoteTimeout)
	out := g.output()
	if code != 1 {
		t.Fatalf("exit code %d after the worker died, want 1\n%s", code, out)
	}
	// Retried (four attempts with backoff), then an error saying what was
	// being done, what the service answered, and that nothing was cached.
	want := regexp.MustCompile(`long.toml \(build\): remote execution: executing action [0-9a-f]{64}/\d+ \(4 attempts\): Unavailable: .*127\.0\.0\.1:` +
		fmt.Sprint(worker.Port) + `: connect: connection refused"; not cached as the element's failure: build again to retry\n`)
	if !want.MatchString(out) {
		t.Errorf("the session's summary does not match %s:\n%s", want, out)
	}
	if st := p.state("long.toml"); st == "failed" || st == "cached" {
		t.Errorf("long.toml is %q after an infrastructure failure, want it not cached", st)
	}

	again := startRemoteWorker(t, 2)
	p.write("project.toml", remoteProjectTOML(again.URL(), "long.toml"))
	p.runLong(0, "build", "--ui", "plain")
	if st := p.state("long.toml"); st != "cached" {
		t.Errorf("long.toml is %q after the rebuild, want cached", st)
	}
}

// Every connection between gantry and Bazel's worker cut while the action runs
// (a TCP proxy between them): gantry follows the operation again with
// WaitExecution, or, when the worker has forgotten it, executes the action again
// (it is deterministic); either way the build succeeds on a new connection and its
// artifact is cached. Which of the two happened is logged: the worker keeps
// in-flight operations only.
func TestE2ERemoteDroppedStreamOnBazelWorker(t *testing.T) {
	t.Parallel()
	worker := startRemoteWorker(t, 2)
	proxy := testreapi.StartFaultProxy(t, worker.Addr)
	p := newBusyboxProject(t, remoteProjectTOML(proxy.URL(), "dropped.toml"), map[string]string{
		"elements/dropped.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = " +
			tomlList("sleep 6.23", "mkdir -p %{install-root}/x", "echo done > %{install-root}/x/y") + "\n",
	})
	g := p.start("build", "--ui", "plain")
	g.waitForSleep("6.23")
	conns := proxy.Conns()
	if n := proxy.Cut(); n == 0 {
		t.Fatalf("no connection to cut while the action ran\n%s", g.output())
	}
	// The runs of the action: the distinct `sleep 6.23` processes seen until
	// the session ends (a second run lasts 6 s: it cannot be missed).
	runs := map[int]bool{}
	done := make(chan int, 1)
	go func() { done <- g.wait(remoteTimeout) }()
	var code int
	for watching := true; watching; {
		for _, pid := range sleepPids("6.23") {
			runs[pid] = true
		}
		select {
		case code = <-done:
			watching = false
		case <-time.After(50 * time.Millisecond):
		}
	}
	if code != 0 {
		t.Fatalf("exit code %d after the dropped stream, want 0\n%s", code, g.output())
	}
	if proxy.Conns() <= conns {
		t.Errorf("gantry made no new connection after the cut (%d before, %d after)", conns, proxy.Conns())
	}
	if st := p.state("dropped.toml"); st != "cached" {
		t.Errorf("dropped.toml is %q, want cached", st)
	}
	how := "followed with WaitExecution"
	if len(runs) > 1 {
		how = "executed again"
	}
	t.Logf("the action ran %d time(s): %s", len(runs), how)
}
