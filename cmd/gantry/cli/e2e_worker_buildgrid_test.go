package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gantry-build/gantry/internal/proctest"
	"github.com/gantry-build/gantry/internal/testreapi"
)

// workerLog is a worker's output, read while it runs.
type workerLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *workerLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// gantryWorker is a running `gantry worker`.
type gantryWorker struct {
	log     *workerLog
	stop    func() // SIGTERM; it must exit 0 within 15s
	kill    func() // SIGKILL, as a crash
	pid     int
	workDir string // its --work-dir
}

// startGantryWorker runs `gantry worker` (the real binary) against bg with args and
// returns once its bot session exists (bg nil: args or the user configuration name
// the server). It is stopped when the test ends.
func startGantryWorker(t *testing.T, bg *testreapi.BuildGrid, botID string, args ...string) *gantryWorker {
	t.Helper()
	if bg != nil {
		args = append([]string{"--bots", bg.URL()}, args...)
	}
	workDir := t.TempDir()
	cmd := exec.Command(gantryBinary(t), append([]string{"worker", "--bot-id", botID, "--work-dir", workDir}, args...)...)
	log := &workerLog{}
	cmd.Stdout = lockedWriter{&log.mu, &log.buf}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	killed := false
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				if code := cmd.ProcessState.ExitCode(); code != 0 && !killed {
					t.Errorf("gantry worker exited %d after SIGTERM:\n%s", code, log.String())
				}
			case <-time.After(15 * time.Second):
				t.Errorf("gantry worker did not stop within 15s of SIGTERM:\n%s", log.String())
			}
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			if t.Failed() {
				t.Logf("gantry worker's output:\n%s", log.String())
			}
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(log.String(), "bot session ") {
		select {
		case <-exited:
			t.Fatalf("gantry worker exited before its bot session existed:\n%s", log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("gantry worker has no bot session after 60s:\n%s", log.String())
		}
	}
	kill := func() {
		killed = true
		_ = cmd.Process.Kill()
		<-exited
	}
	return &gantryWorker{log: log, stop: stop, kill: kill, pid: cmd.Process.Pid, workDir: workDir}
}

// bgExecute uploads blobs, executes the action through BuildGrid and returns the
// Execute stream's first operation's name and a function waiting for the response.
func bgExecute(t *testing.T, ctx context.Context, conn *grpc.ClientConn, bg *testreapi.BuildGrid, blobs testreapi.Blobs, action *repb.Digest) (string, func() *repb.ExecuteResponse) {
	t.Helper()
	blobs.Upload(t, ctx, conn, bg.Instance)
	stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{
		InstanceName: bg.Instance, ActionDigest: action, SkipCacheLookup: true})
	if err != nil {
		t.Fatal(err)
	}
	op, err := stream.Recv()
	if err != nil {
		t.Fatalf("Execute stream: %v", err)
	}
	return op.GetName(), func() *repb.ExecuteResponse {
		t.Helper()
		for !op.GetDone() {
			if op, err = stream.Recv(); err != nil {
				t.Fatalf("Execute stream of %s: %v", op.GetName(), err)
			}
		}
		var resp repb.ExecuteResponse
		if e := op.GetError(); e != nil {
			resp.Status = e
			return &resp
		}
		if err := op.GetResponse().UnmarshalTo(&resp); err != nil {
			t.Fatalf("operation %s response: %v", op.GetName(), err)
		}
		return &resp
	}
}

// waitPidFile waits for an action to write its pid into path.
func waitPidFile(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, 60*time.Second, "the action to start", func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return pid > 0
	})
	return pid
}

// bgAction is the Action running argv in the input root described as for
// testreapi.Blobs.Dir, with the given output paths.
func bgAction(t *testing.T, blobs testreapi.Blobs, root map[string]string, argv []string, outputs ...string) *repb.Digest {
	cmd := &repb.Command{Arguments: argv, OutputPaths: outputs,
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/bin:/usr/bin"}}}
	return blobs.AddMessage(t, &repb.Action{CommandDigest: blobs.AddMessage(t, cmd), InputRootDigest: blobs.Dir(t, root), DoNotCache: true})
}

// TestWorkerBuildGrid runs gantry workers under a real BuildGrid 0.9.1 and executes
// actions through BuildGrid's Execution service with the REAPI client.
func TestWorkerBuildGrid(t *testing.T) {
	gantryBinary(t)
	bg := testreapi.StartBuildGrid(t, testreapi.BuildGridOptions{})
	conn := bg.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stopHost := startGantryWorker(t, bg, "gantry-host-bot", "--sandbox", "host", "--slots", "2").stop

	t.Run("OutputsAndStdout", func(t *testing.T) {
		blobs := testreapi.Blobs{}
		action := bgAction(t, blobs, map[string]string{"in/data": "input\n"}, []string{"/bin/sh", "-c",
			"echo hi > out/x && mkdir -p out/d/sub && cp in/data out/d/sub/copy && ln -s x out/link && echo to-stdout && echo to-stderr >&2 && exit 0"},
			"out/x", "out/d", "out/link")
		_, wait := bgExecute(t, ctx, conn, bg, blobs, action)
		resp := wait()
		if resp.GetStatus().GetCode() != 0 {
			t.Fatalf("status %v, want OK", resp.GetStatus())
		}
		r := resp.GetResult()
		if r.GetExitCode() != 0 {
			t.Fatalf("exit code %d, want 0; stderr %q", r.GetExitCode(), testreapi.Read(t, ctx, conn, bg.Instance, r.GetStderrDigest()))
		}
		if got := r.GetExecutionMetadata().GetWorker(); got != "gantry-host-bot" {
			t.Errorf("worker %q, want gantry-host-bot", got)
		}
		if len(r.GetOutputFiles()) != 1 || r.GetOutputFiles()[0].GetPath() != "out/x" {
			t.Fatalf("output files %v, want out/x", r.GetOutputFiles())
		}
		if got := testreapi.Read(t, ctx, conn, bg.Instance, r.GetOutputFiles()[0].GetDigest()); string(got) != "hi\n" {
			t.Errorf("out/x holds %q, want %q", got, "hi\n")
		}
		if got := testreapi.Read(t, ctx, conn, bg.Instance, r.GetStdoutDigest()); string(got) != "to-stdout\n" {
			t.Errorf("stdout %q", got)
		}
		if got := testreapi.Read(t, ctx, conn, bg.Instance, r.GetStderrDigest()); string(got) != "to-stderr\n" {
			t.Errorf("stderr %q", got)
		}
		if s := r.GetOutputSymlinks(); len(s) != 1 || s[0].GetPath() != "out/link" || s[0].GetTarget() != "x" {
			t.Errorf("output symlinks %v, want out/link -> x", s)
		}
		dirs := r.GetOutputDirectories()
		if len(dirs) != 1 || dirs[0].GetPath() != "out/d" {
			t.Fatalf("output directories %v, want out/d", dirs)
		}
		var tree repb.Tree
		if err := proto.Unmarshal(testreapi.Read(t, ctx, conn, bg.Instance, dirs[0].GetTreeDigest()), &tree); err != nil {
			t.Fatal(err)
		}
		if d := tree.GetRoot().GetDirectories(); len(d) != 1 || d[0].GetName() != "sub" || len(tree.GetChildren()) != 1 {
			t.Fatalf("tree of out/d: %v, want sub/", &tree)
		}
		copyNode := tree.GetChildren()[0].GetFiles()
		if len(copyNode) != 1 || copyNode[0].GetName() != "copy" {
			t.Fatalf("out/d/sub: %v, want copy", tree.GetChildren()[0])
		}
		if got := testreapi.Read(t, ctx, conn, bg.Instance, copyNode[0].GetDigest()); string(got) != "input\n" {
			t.Errorf("out/d/sub/copy holds %q, want the input", got)
		}
	})

	t.Run("FailingCommandsExitCode", func(t *testing.T) {
		blobs := testreapi.Blobs{}
		action := bgAction(t, blobs, map[string]string{}, []string{"/bin/sh", "-c", "echo failing >&2; exit 3"})
		_, wait := bgExecute(t, ctx, conn, bg, blobs, action)
		resp := wait()
		if resp.GetStatus().GetCode() != 0 {
			t.Fatalf("status %v, want OK: a failed command is a result", resp.GetStatus())
		}
		if got := resp.GetResult().GetExitCode(); got != 3 {
			t.Errorf("exit code %d, want 3", got)
		}
		if got := testreapi.Read(t, ctx, conn, bg.Instance, resp.GetResult().GetStderrDigest()); string(got) != "failing\n" {
			t.Errorf("stderr %q", got)
		}
	})

	t.Run("TimeoutKillsTheCommand", func(t *testing.T) {
		blobs := testreapi.Blobs{}
		cmd := &repb.Command{Arguments: []string{"/bin/sh", "-c", "echo started; exec sleep 600"}}
		action := blobs.AddMessage(t, &repb.Action{CommandDigest: blobs.AddMessage(t, cmd), InputRootDigest: blobs.Dir(t, map[string]string{}),
			DoNotCache: true, Timeout: durationpb.New(time.Second)})
		start := time.Now()
		_, wait := bgExecute(t, ctx, conn, bg, blobs, action)
		resp := wait()
		if code := codes.Code(resp.GetStatus().GetCode()); code != codes.DeadlineExceeded {
			t.Fatalf("status %v, want DEADLINE_EXCEEDED", resp.GetStatus())
		}
		if el := time.Since(start); el > 30*time.Second {
			t.Errorf("a 1s timeout ended the action after %s", el)
		}
		if got := testreapi.Read(t, ctx, conn, bg.Instance, resp.GetResult().GetStdoutDigest()); string(got) != "started\n" {
			t.Errorf("stdout of the timed-out action %q, want its partial output", got)
		}
	})

	t.Run("CancelKillsTheProcess", func(t *testing.T) {
		pidFile := filepath.Join(t.TempDir(), "pid")
		blobs := testreapi.Blobs{}
		action := bgAction(t, blobs, map[string]string{}, []string{"/bin/sh", "-c", "echo $$ > " + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile + " && exec sleep 600"})
		name, wait := bgExecute(t, ctx, conn, bg, blobs, action)
		pid := waitPidFile(t, pidFile)
		if _, err := longrunningpb.NewOperationsClient(conn).CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: name}); err != nil {
			t.Fatalf("CancelOperation %s: %v", name, err)
		}
		if code := codes.Code(wait().GetStatus().GetCode()); code != codes.Canceled {
			t.Errorf("cancelled operation: status %v, want CANCELLED", code)
		}
		proctest.EventuallyDescribed(t, fmt.Sprintf("the cancelled action's process %d to end", pid),
			func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) },
			func() string {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				out, _ := exec.Command("ps", "-ef", "--forest").CombinedOutput()
				return fmt.Sprintf("%s\n%s", st, out)
			})
	})

	// The worker stopped mid-action kills it and hands the lease back: BuildGrid
	// gives it to the next worker.
	t.Run("StoppedWorkerHandsTheLeaseBack", func(t *testing.T) {
		tmp := t.TempDir()
		pidFile, marker := filepath.Join(tmp, "pid"), filepath.Join(tmp, "marker")
		blobs := testreapi.Blobs{}
		action := bgAction(t, blobs, map[string]string{}, []string{"/bin/sh", "-c",
			"if [ -e " + marker + " ]; then echo second run; exit 0; fi; touch " + marker +
				"; echo $$ > " + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile + " && exec sleep 600"})
		_, wait := bgExecute(t, ctx, conn, bg, blobs, action)
		pid := waitPidFile(t, pidFile)
		stopHost() // SIGTERM: must exit 0 within 15s
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("the action's process %d outlived the stopped worker (kill -0: %v)", pid, err)
		}
		stopHost = startGantryWorker(t, bg, "gantry-host-bot-2", "--sandbox", "host").stop
		resp := wait()
		r := resp.GetResult()
		if resp.GetStatus().GetCode() != 0 || r.GetExitCode() != 0 {
			t.Fatalf("status %v, exit code %d; want the retry's OK and 0", resp.GetStatus(), r.GetExitCode())
		}
		if got := r.GetExecutionMetadata().GetWorker(); got != "gantry-host-bot-2" {
			t.Errorf("worker %q, want gantry-host-bot-2 (the retry)", got)
		}
		if got := testreapi.Read(t, ctx, conn, bg.Instance, r.GetStdoutDigest()); string(got) != "second run\n" {
			t.Errorf("stdout %q, want the retry's", got)
		}
	})

	// The host worker stops, a bwrap worker takes the next action.
	t.Run("BwrapInputRootIsSlash", func(t *testing.T) {
		requireSandboxTools(t)
		busybox, err := os.ReadFile("/bin/busybox")
		if err != nil {
			t.Fatal(err)
		}
		stopHost()
		startGantryWorker(t, bg, "gantry-bwrap-bot", "--sandbox", "bwrap")
		blobs := testreapi.Blobs{}
		cmd := &repb.Command{Arguments: []string{"/bin/sh", "-c", "/bin/busybox ls / > out/root && /bin/busybox cat input > out/copy"},
			WorkingDirectory: "build", OutputPaths: []string{"out/root", "out/copy"},
			EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/bin"}}}
		root := blobs.Dir(t, map[string]string{"bin/busybox*": string(busybox), "bin/sh": "->busybox", "build/input": "in\n",
			"dev/": "", "proc/": "", "tmp/": ""})
		action := blobs.AddMessage(t, &repb.Action{CommandDigest: blobs.AddMessage(t, cmd), InputRootDigest: root, DoNotCache: true})
		_, wait := bgExecute(t, ctx, conn, bg, blobs, action)
		resp := wait()
		r := resp.GetResult()
		if resp.GetStatus().GetCode() != 0 || r.GetExitCode() != 0 {
			t.Fatalf("status %v, exit code %d, stderr %q; want OK and 0", resp.GetStatus(), r.GetExitCode(),
				testreapi.Read(t, ctx, conn, bg.Instance, r.GetStderrDigest()))
		}
		if got := r.GetExecutionMetadata().GetWorker(); got != "gantry-bwrap-bot" {
			t.Errorf("worker %q, want gantry-bwrap-bot", got)
		}
		got := map[string]string{}
		for _, f := range r.GetOutputFiles() {
			got[f.GetPath()] = string(testreapi.Read(t, ctx, conn, bg.Instance, f.GetDigest()))
		}
		want := map[string]string{"out/root": "bin\nbuild\ndev\nproc\ntmp\n", "out/copy": "in\n"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("outputs %q, want %q: the input root as /", got, want)
		}
	})

	// Last: kill -9 of the worker; the action's process dies with it. BuildGrid
	// re-queues the lease once the bot session expires (its keepalive, 600 s
	// when unset: TestE2EBuildGridTwoWorkers/KilledWorker sets it short and sees
	// the re-queue), and meanwhile assigns new actions to the dead bot: nothing
	// runs after this.
	t.Run("KilledWorkerLeavesNothingRunning", func(t *testing.T) {
		stopHost() // the worker of the previous subtest, if it still runs
		w := startGantryWorker(t, bg, "gantry-host-bot-3", "--sandbox", "host")
		pidFile := filepath.Join(t.TempDir(), "pid")
		blobs := testreapi.Blobs{}
		action := bgAction(t, blobs, map[string]string{}, []string{"/bin/sh", "-c",
			"echo $$ > " + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile + " && exec sleep 600"})
		name, _ := bgExecute(t, ctx, conn, bg, blobs, action)
		defer func() { // not for the next worker
			_, _ = longrunningpb.NewOperationsClient(conn).CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: name})
		}()
		pid := waitPidFile(t, pidFile)
		w.kill()
		eventually(t, 10*time.Second, "the killed worker's action to die", func() bool {
			return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
		})
	})
}
