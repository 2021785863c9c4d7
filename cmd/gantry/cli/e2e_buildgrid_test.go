package cli

// End-to-end remote execution through BuildGrid 0.9.1 with two real `gantry
// worker`s (bwrap, 2 slots each): the twenty-element busybox project of
// e2e_remote_test.go built with --remote-executor, failures, a dropped stream,
// Ctrl-C and a worker killed mid-action. The workers run each action with the
// input root as /, so the projects set no wrap.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/proctest"
	"github.com/gantry-build/gantry/internal/testreapi"
)

// bgKeepalive is BuildGrid's bot keepalive in these tests: a killed worker's
// lease is re-queued about this long after its last poll (600 s by default).
// A live idle worker polls every 0.8 of it, so it leaves a loaded machine 3 s.
const bgKeepalive = 15 * time.Second

// bgThreads is BuildGrid's thread pool, its limit of concurrent RPCs: the
// default (5 per CPU, 10 here) is below gantry's Execute streams (remote-jobs,
// 32) and the workers' polls: over it BuildGrid answers ResourceExhausted, which
// gantry waits out with backoff (TestRunRetriesABusyCAS), at a cost in time.
const bgThreads = 64

// bgProjectTOML is a project.toml for BuildGrid: no [remote-execution] settings, so
// that gantry's defaults are shown to suit a default BuildGrid (its
// max-execution-timeout of 7200 s refuses a longer Action.timeout with
// InvalidArgument). The execution service is --remote-executor's.
func bgProjectTOML(targets ...string) string {
	return projectTOML(targets...)
}

// bgWorkers are the names of the two workers.
var bgWorkers = []string{"gantry-e2e-a", "gantry-e2e-b"}

// bgRanOn matches the log line of an action a worker ran and names the worker.
var bgRanOn = regexp.MustCompile(`remote build: action [0-9a-f]{64}/\d+ ran on worker (\S+)\n`)

func TestE2EBuildGridTwoWorkers(t *testing.T) {
	requireSandboxTools(t)
	gantryBinary(t)
	bg := testreapi.StartBuildGrid(t, testreapi.BuildGridOptions{BotKeepalive: bgKeepalive, ThreadPoolSize: bgThreads})
	workers := map[string]*gantryWorker{}
	for _, name := range bgWorkers {
		workers[name] = startGantryWorker(t, bg, name, "--sandbox", "bwrap", "--slots", "2")
	}
	conn := bg.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := func(p *e2eProject, want int, url string) string {
		_, stderr := p.runLong(want, "build", "--ui", "plain", "--remote-executor", url)
		return stderr
	}

	// Twenty elements built on both workers give the artifacts, file by file, and
	// the keys of a local bwrap build; a second cache gets them all from
	// BuildGrid's action cache.
	t.Run("TwentyElements", func(t *testing.T) {
		marker := filepath.Join("/tmp", "gantry-bg-e2e-marker-"+filepath.Base(t.TempDir()))
		files := twentyElements(marker)
		rp := newBusyboxProject(t, bgProjectTOML("e19.toml"), files)
		stderr := build(rp, 0, bg.URL())
		if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the marker the builds write is on the host (%v): a build ran here\n%s", err, stderr)
		}
		ranOn := map[string]int{}
		for _, w := range checkBuiltRemotely(t, rp, bg.URL(), bgRanOn) {
			ranOn[w]++
		}
		for _, w := range bgWorkers {
			if ranOn[w] == 0 {
				t.Errorf("worker %s ran none of the twenty actions (they ran on %v)", w, ranOn)
			}
		}
		t.Logf("the twenty actions ran on %v", ranOn)

		lp := newBusyboxProject(t, bgProjectTOML("e19.toml"), files)
		lp.runLong(0, "build", "--ui", "plain", "--sandbox", "bwrap")
		rt := checkAsLocal(t, rp, lp)

		// A second, clean cache: every action is in BuildGrid's action cache, and
		// no worker accepts a lease.
		leases := countLeases(workers)
		second := newBusyboxProject(t, bgProjectTOML("e19.toml"), files)
		build(second, 0, bg.URL())
		checkFromActionCache(t, second, bgRanOn, rt)
		if got := countLeases(workers); got != leases {
			t.Errorf("the workers accepted %d leases during the build from the action cache, want none", got-leases)
		}
	})

	// A failing command: exit 1, the log names the command and the worker, and
	// the failed artifact's build tree opens with shell --build.
	t.Run("Failure", func(t *testing.T) {
		p := newBusyboxProject(t, bgProjectTOML("bad.toml"), badElement)
		stderr := build(p, 1, bg.URL())
		failed := regexp.MustCompile(`build-commands 3/3 failed on worker (` + strings.Join(bgWorkers, "|") + `) with exit code 3`)
		m := failed.FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("the session's output does not match %s:\n%s", failed, stderr)
		}
		checkRemoteFailure(t, p, m[0], bg.URL()+" (worker "+m[1]+")")
	})

	// An Action.timeout over BuildGrid's maximum (7200 s): refused at once, not
	// retried, said to be a matter of configuration, and nothing cached.
	t.Run("TimeoutRefused", func(t *testing.T) {
		p := newBusyboxProject(t, bgProjectTOML("bad.toml")+"\n[remote-execution]\ntimeout = \"3h\"\n", badElement)
		stderr := build(p, 1, bg.URL())
		want := regexp.MustCompile(`bad.toml \(build\): remote execution: executing action [0-9a-f]{64}/\d+: .*InvalidArgument.*timeout.*; not cached as the element's failure: the execution service refuses the action as configured — check \[remote-execution\] \(timeout, platform, instance\)`)
		if !want.MatchString(stderr) {
			t.Errorf("the session's output does not match %s:\n%s", want, stderr)
		}
		if st := p.state("bad.toml"); st == "failed" || st == "cached" {
			t.Errorf("bad.toml is %q after a refused action, want it not cached", st)
		}
	})

	// Every connection between gantry and BuildGrid cut while the action runs:
	// gantry follows the operation again with WaitExecution (BuildGrid keeps
	// operations), and the action runs once.
	t.Run("DroppedStream", func(t *testing.T) {
		proxy := testreapi.StartFaultProxy(t, bg.Addr)
		p := newBusyboxProject(t, bgProjectTOML("dropped.toml"), map[string]string{
			"elements/dropped.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = " +
				tomlList("sleep 6.17", "mkdir -p %{install-root}/x", "echo done > %{install-root}/x/y") + "\n",
		})
		leases := countLeases(workers)
		g := p.start("build", "--ui", "plain", "--remote-executor", proxy.URL())
		g.waitForSleep("6.17")
		conns := proxy.Conns()
		if n := proxy.Cut(); n == 0 {
			t.Fatalf("no connection to cut while the action ran\n%s", g.output())
		}
		if code := g.wait(remoteTimeout); code != 0 {
			t.Fatalf("exit code %d after the dropped stream, want 0\n%s", code, g.output())
		}
		if proxy.Conns() <= conns {
			t.Errorf("gantry made no new connection after the cut (%d before, %d after)", conns, proxy.Conns())
		}
		if got := countLeases(workers) - leases; got != 1 {
			t.Errorf("the workers accepted %d leases for the action, want 1: it ran again", got)
		}
		ops := bgOperations(t, ctx, conn, bg, "dropped.toml")
		if len(ops) != 1 || !ops[0].GetDone() {
			t.Errorf("BuildGrid has %d operations for dropped.toml (%v), want one, done: gantry executed it again rather than WaitExecution", len(ops), ops)
		}
		if st := p.state("dropped.toml"); st != "cached" {
			t.Errorf("dropped.toml is %q, want cached", st)
		}
	})

	// Ctrl-C during an action: gantry cancels the operation and exits 130;
	// BuildGrid ends the operation CANCELLED and the worker kills the action.
	t.Run("CtrlC", func(t *testing.T) {
		p := newBusyboxProject(t, bgProjectTOML("interrupted.toml"), map[string]string{
			"elements/interrupted.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = [\"sleep 97.4\"]\n",
		})
		p.interruptDuringSleep("interrupted.toml", "97.4", "build", "--ui", "plain", "--remote-executor", bg.URL())
		ops := bgOperations(t, ctx, conn, bg, "interrupted.toml")
		var resp repb.ExecuteResponse
		if len(ops) != 1 || !ops[0].GetDone() || ops[0].GetResponse().UnmarshalTo(&resp) != nil || codes.Code(resp.GetStatus().GetCode()) != codes.Canceled {
			t.Errorf("BuildGrid's operations for interrupted.toml: %v, want one, done and CANCELLED", ops)
		}
		proctest.EventuallyDescribed(t, "the cancelled action (sleep 97.4) to end on the worker",
			func() bool { return !sleepRuns("97.4") },
			func() string { return psForest() })
	})

	// kill -9 of the worker running the action: nothing of it is left running;
	// BuildGrid closes its bot session after the keepalive and gives the lease
	// to the other worker; the session succeeds.
	t.Run("KilledWorker", func(t *testing.T) {
		p := newBusyboxProject(t, bgProjectTOML("killed.toml"), map[string]string{
			"elements/killed.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = " +
				tomlList("sleep 4.53", "mkdir -p %{install-root}/x", "echo done > %{install-root}/x/y") + "\n",
		})
		g := p.start("build", "--ui", "plain", "--remote-executor", bg.URL())
		g.waitForSleep("4.53")
		pids := sleepPids("4.53")
		if len(pids) != 1 {
			t.Fatalf("sleep 4.53 runs %d times, want once", len(pids))
		}
		var victim, other string
		for name, w := range workers {
			if descendsFrom(pids[0], w.pid) {
				victim = name
			} else {
				other = name
			}
		}
		if victim == "" {
			t.Fatalf("the action's process %d descends from no worker\n%s", pids[0], psForest())
		}
		w := workers[victim]
		if len(processesNaming(w.workDir)) == 0 {
			t.Fatalf("no process names the worker's work directory %s while its action runs", w.workDir)
		}
		w.kill()
		killed := time.Now()
		proctest.EventuallyDescribed(t, "the killed worker's processes to end",
			func() bool { return len(processesNaming(w.workDir)) == 0 && !proctest.Alive(pids[0]) },
			func() string { return fmt.Sprintf("left: %v\n%s", processesNaming(w.workDir), psForest()) })
		if code := g.wait(remoteTimeout); code != 0 {
			t.Fatalf("exit code %d after a worker was killed, want 0 (BuildGrid re-queues its lease)\n%s\nBuildGrid:\n%s", code, g.output(), bg.Log())
		}
		t.Logf("the session ended %s after the kill", time.Since(killed).Round(100*time.Millisecond))
		log, _ := p.mustRun(0, "artifact", "log", "killed.toml")
		if m := bgRanOn.FindStringSubmatch(log); m == nil || m[1] != other {
			t.Errorf("killed.toml's log does not say it ran on the other worker, %s:\n%s", other, log)
		}
		if st := p.state("killed.toml"); st != "cached" {
			t.Errorf("killed.toml is %q, want cached", st)
		}
	})
}

// countLeases is how many leases the workers accepted so far, by their logs.
func countLeases(workers map[string]*gantryWorker) int {
	n := 0
	for _, w := range workers {
		n += strings.Count(w.log.String(), " accepted\n")
	}
	return n
}

// bgOperations are BuildGrid's operations whose RequestMetadata names target
// (gantry sends the element as target_id), from its Operations service.
func bgOperations(t *testing.T, ctx context.Context, conn *grpc.ClientConn, bg *testreapi.BuildGrid, target string) []*longrunningpb.Operation {
	t.Helper()
	resp, err := longrunningpb.NewOperationsClient(conn).ListOperations(ctx, &longrunningpb.ListOperationsRequest{
		Name: bg.Instance, Filter: "target_id = " + target, PageSize: 100})
	if err != nil {
		t.Fatalf("ListOperations of %s on BuildGrid: %v", target, err)
	}
	return resp.GetOperations()
}

// descendsFrom is whether process pid has ancestor among its parents.
func descendsFrom(pid, ancestor int) bool {
	for pid > 1 {
		p, ok := proctest.Read(pid)
		if !ok {
			return false
		}
		if pid = p.PPID; pid == ancestor {
			return true
		}
	}
	return false
}

// processesNaming are the processes whose command line holds s.
func processesNaming(s string) []int {
	return processes(func(args []string) bool { return strings.Contains(strings.Join(args, " "), s) })
}

// psForest is `ps -ef --forest`, for failure messages.
func psForest() string {
	out, _ := exec.Command("ps", "-ef", "--forest").CombinedOutput()
	return string(out)
}
