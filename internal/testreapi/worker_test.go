package testreapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/internal/proctest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// action is an Action of cmd over the input root files (see Blobs.Dir), its
// blobs added to b.
func action(t *testing.T, b Blobs, cmd *repb.Command, files map[string]string) *repb.Digest {
	t.Helper()
	return b.AddMessage(t, &repb.Action{
		CommandDigest:   b.AddMessage(t, cmd),
		InputRootDigest: b.Dir(t, files),
		Timeout:         durationpb.New(time.Minute),
	})
}

// shell is a Command running script with /bin/sh.
func shell(script string) *repb.Command {
	return &repb.Command{Arguments: []string{"/bin/sh", "-c", script},
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/usr/bin:/bin"}}}
}

// execute uploads b, executes the action and returns the operations the stream
// sent, the last one's response, and the stream's error.
func execute(t *testing.T, ctx context.Context, conn *grpc.ClientConn, instance string, b Blobs, act *repb.Digest) ([]*longrunningpb.Operation, *repb.ExecuteResponse, error) {
	t.Helper()
	b.Upload(t, ctx, conn, instance)
	stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{InstanceName: instance, ActionDigest: act})
	if err != nil {
		return nil, nil, err
	}
	var ops []*longrunningpb.Operation
	for {
		op, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return ops, nil, err
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 || !ops[len(ops)-1].Done {
		t.Fatalf("the stream ended without a finished operation: %v", ops)
	}
	resp := &repb.ExecuteResponse{}
	if err := ops[len(ops)-1].GetResponse().UnmarshalTo(resp); err != nil {
		t.Fatal(err)
	}
	return ops, resp, nil
}

// runOn executes cmd over the input root files on conn's default instance.
func runOn(t *testing.T, ctx context.Context, conn *grpc.ClientConn, cmd *repb.Command, files map[string]string) *repb.ExecuteResponse {
	t.Helper()
	b := Blobs{}
	_, resp, err := execute(t, ctx, conn, "", b, action(t, b, cmd, files))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// toOutX is a shell command declaring out/x in the legacy output_files.
func toOutX(script string) *repb.Command {
	cmd := shell(script)
	cmd.OutputFiles = []string{"out/x"}
	return cmd
}

// TestBazelWorker runs the Bazel remote worker and checks the quirks gantry's
// remote execution must live with, each found here: if one goes away with a newer
// worker, the documentation of it in docs/remote-execution.md goes too.
func TestBazelWorker(t *testing.T) {
	w := StartBazelWorker(t, WorkerOptions{})
	conn := Dial(t, w.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("RunsACommandWithLegacyOutputFields", func(t *testing.T) {
		// out/ is not in the input root: the worker creates the outputs' parents.
		ctx := WithMetadata(t, ctx, "legacy")
		resp := runOn(t, ctx, conn, toOutX("echo hi > out/x"), nil)
		r := resp.Result
		if resp.Status.GetCode() != 0 || r.ExitCode != 0 || len(r.OutputFiles) != 1 || r.OutputFiles[0].Path != "out/x" {
			t.Fatalf("response %v", resp)
		}
		if got := string(Read(t, ctx, conn, "", r.OutputFiles[0].Digest)); got != "hi\n" {
			t.Errorf("out/x = %q, want %q", got, "hi\n")
		}
	})

	t.Run("HasNoBatchReadBlobs", func(t *testing.T) {
		_, err := repb.NewContentAddressableStorageClient(conn).BatchReadBlobs(WithMetadata(t, ctx, "batch-read"), &repb.BatchReadBlobsRequest{})
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("BatchReadBlobs: %v, want UNIMPLEMENTED", err)
		}
	})

	t.Run("RefusesCallsWithoutRequestMetadata", func(t *testing.T) {
		_, err := repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{})
		want := "rpc error: code = InvalidArgument desc = RequestMetadata not received from the client for build.bazel.remote.execution.v2.Capabilities/GetCapabilities"
		if err == nil || err.Error() != want {
			t.Errorf("Capabilities without metadata: %v, want %s", err, want)
		}
		b := Blobs{}
		cmd := shell("true")
		act := action(t, b, cmd, nil)
		b.Upload(t, WithMetadata(t, ctx, "upload"), conn, "")
		stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: act})
		if err == nil {
			_, err = stream.Recv()
		}
		want = "rpc error: code = InvalidArgument desc = RequestMetadata not received from the client for build.bazel.remote.execution.v2.Execution/Execute"
		if err == nil || err.Error() != want {
			t.Errorf("Execute without metadata: %v, want %s", err, want)
		}
	})

	t.Run("IgnoresOutputPaths", func(t *testing.T) {
		cmd := shell("echo hi > out/x")
		cmd.OutputPaths = []string{"out/x"}
		resp := runOn(t, WithMetadata(t, ctx, "output-paths"), conn, cmd, map[string]string{"out/": ""})
		if resp.Status.GetCode() != 0 || resp.Result.GetExitCode() != 0 || len(resp.Result.GetOutputFiles()) != 0 || len(resp.Result.GetOutputSymlinks()) != 0 {
			t.Fatalf("response %v", resp)
		}
	})

	t.Run("DropsInputSymlinks", func(t *testing.T) {
		ctx := WithMetadata(t, ctx, "symlinks")
		cmd := toOutX("if [ -L link ]; then echo link; elif [ -e link ]; then echo other; else echo absent; fi > out/x")
		resp := runOn(t, ctx, conn, cmd, map[string]string{"target": "t", "link": "->target"})
		if got := string(Read(t, ctx, conn, "", resp.Result.OutputFiles[0].Digest)); got != "absent\n" {
			t.Errorf("the input symlink is %q, want %q", got, "absent\n")
		}
	})

	t.Run("RejectsOutputsInTheInputRoot", func(t *testing.T) {
		resp := runOn(t, WithMetadata(t, ctx, "existing-output"), conn, toOutX("echo hi > out/x"), map[string]string{"out/x": "old"})
		if resp.Status.GetCode() != int32(codes.Internal) || !strings.HasPrefix(resp.Status.GetMessage(), "Output file already exists: "+w.WorkPath+"/build-") {
			t.Fatalf("response %v, want INTERNAL: Output file already exists: %s/build-…/out/x", resp, w.WorkPath)
		}
	})

	t.Run("ExecuteDoesNotConsultTheActionCache", func(t *testing.T) {
		ctx := WithMetadata(t, ctx, "action-cache")
		b := Blobs{}
		act := action(t, b, toOutX("echo ran > out/x"), nil)
		b.Upload(t, ctx, conn, "")
		canned := &repb.ActionResult{ExitCode: 42}
		if _, err := repb.NewActionCacheClient(conn).UpdateActionResult(ctx, &repb.UpdateActionResultRequest{ActionDigest: act, ActionResult: canned}); err != nil {
			t.Fatal(err)
		}
		_, resp, err := execute(t, ctx, conn, "", b, act)
		if err != nil {
			t.Fatal(err)
		}
		if resp.CachedResult || resp.Result.GetExitCode() != 0 {
			t.Fatalf("Execute answered from the action cache: %v", resp)
		}
	})

	t.Run("RecordsOnlySuccessesInTheActionCache", func(t *testing.T) {
		ctx := WithMetadata(t, ctx, "records")
		ac := repb.NewActionCacheClient(conn)
		for _, c := range []struct {
			script string
			want   codes.Code
		}{{"echo ok > out/x", codes.OK}, {"echo failed > out/x; exit 1", codes.NotFound}} {
			b := Blobs{}
			act := action(t, b, toOutX(c.script), nil)
			if _, _, err := execute(t, ctx, conn, "", b, act); err != nil {
				t.Fatal(err)
			}
			if _, err := ac.GetActionResult(ctx, &repb.GetActionResultRequest{ActionDigest: act}); status.Code(err) != c.want {
				t.Errorf("GetActionResult after %q: %v, want %v", c.script, err, c.want)
			}
		}
	})

	t.Run("KeepsTheOutputsOfAFailedCommand", func(t *testing.T) {
		ctx := WithMetadata(t, ctx, "failed")
		r := runOn(t, ctx, conn, toOutX("echo partial > out/x; exit 3"), nil).Result
		if r.GetExitCode() != 3 || len(r.GetOutputFiles()) != 1 || string(Read(t, ctx, conn, "", r.OutputFiles[0].Digest)) != "partial\n" {
			t.Fatalf("result %v, want exit code 3 and out/x", r)
		}
	})

	t.Run("FollowsAbsoluteSymlinksInOutputDirectories", func(t *testing.T) {
		ctx := WithMetadata(t, ctx, "output-symlinks")
		host := filepath.Join(t.TempDir(), "on-the-host")
		if err := os.WriteFile(host, []byte("host file\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := shell("mkdir -p out/d/s && echo f > out/d/f && ln -s f out/d/rel && ln -s s out/d/reldir && ln -s " + host + " out/d/abs")
		cmd.OutputDirectories = []string{"out/d"}
		r := runOn(t, ctx, conn, cmd, nil).Result
		if len(r.GetOutputDirectories()) != 1 {
			t.Fatalf("result %v", r)
		}
		tree := &repb.Tree{}
		if err := proto.Unmarshal(Read(t, ctx, conn, "", r.OutputDirectories[0].TreeDigest), tree); err != nil {
			t.Fatal(err)
		}
		var links, files []string
		for _, l := range tree.Root.Symlinks {
			links = append(links, l.Name+"->"+l.Target)
		}
		for _, f := range tree.Root.Files {
			files = append(files, f.Name+"="+string(Read(t, ctx, conn, "", f.Digest)))
		}
		if got, want := fmt.Sprint(links), "[rel->f reldir->s]"; got != want {
			t.Errorf("symlinks %s, want %s", got, want)
		}
		if got, want := fmt.Sprint(files), "[abs=host file\n f=f\n]"; got != want {
			t.Errorf("files %q, want %q (the absolute symlink followed on the worker's host)", got, want)
		}
	})

	t.Run("ReportsATimeoutWhenTheCommandEnds", func(t *testing.T) {
		ctx := WithMetadata(t, ctx, "timeout")
		b := Blobs{}
		slow := b.AddMessage(t, &repb.Action{CommandDigest: b.AddMessage(t, shell("exec sleep 2")), InputRootDigest: b.Dir(t, nil), Timeout: durationpb.New(time.Second)})
		start := time.Now()
		_, resp, err := execute(t, ctx, conn, "", b, slow)
		if err != nil {
			t.Fatal(err)
		}
		want := "Command:\n[/bin/sh, -c, exec sleep 2]\nexceeded deadline of 1.000000 seconds."
		if resp.Status.GetCode() != int32(codes.DeadlineExceeded) || resp.Status.GetMessage() != want || resp.Result.GetExitCode() != -1 {
			t.Errorf("response %v, want DEADLINE_EXCEEDED: %s and exit code -1", resp, want)
		}
		t.Logf("a 1 s timeout of a 2 s command answered after %v", time.Since(start).Round(10*time.Millisecond))
	})

	t.Run("RunsUnderBwrapWithTheInputRootAsSlash", func(t *testing.T) {
		ctx := WithMetadata(t, ctx, "bwrap")
		busybox := requireBwrap(t)
		cmd := &repb.Command{
			Arguments: []string{"bwrap", "--unshare-all", "--die-with-parent", "--bind", ".", "/",
				"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--chdir", "/build", "--",
				"/bin/busybox", "sh", "-e", "-c", "/bin/busybox mkdir /install && /bin/busybox ls / > /install/root && /bin/busybox cat input > /install/copy"},
			EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/usr/bin:/bin"}},
			OutputDirectories:    []string{"install"},
		}
		r := runOn(t, ctx, conn, cmd, map[string]string{"bin/busybox*": busybox, "build/input": "in\n", "dev/": "", "proc/": "", "tmp/": ""}).Result
		if r.GetExitCode() != 0 || len(r.OutputDirectories) != 1 {
			t.Fatalf("result %v (stderr %q)", r, Read(t, ctx, conn, "", r.GetStderrDigest()))
		}
		tree := &repb.Tree{}
		if err := proto.Unmarshal(Read(t, ctx, conn, "", r.OutputDirectories[0].TreeDigest), tree); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, f := range tree.Root.Files {
			got[f.Name] = string(Read(t, ctx, conn, "", f.Digest))
		}
		if want := "bin\nbuild\ndev\ninstall\nproc\ntmp\n"; got["root"] != want || got["copy"] != "in\n" {
			t.Errorf("/ under bwrap lists %q and the copy is %q, want %q and %q", got["root"], got["copy"], want, "in\n")
		}
	})

	t.Run("ForgetsFinishedOperations", func(t *testing.T) {
		ctx := WithMetadata(t, ctx, "wait")
		b := Blobs{}
		ops, _, err := execute(t, ctx, conn, "", b, action(t, b, shell("true"), nil))
		if err != nil {
			t.Fatal(err)
		}
		if ops[0].Metadata != nil {
			t.Errorf("the first operation has metadata %v, want none", ops[0].Metadata)
		}
		stream, err := repb.NewExecutionClient(conn).WaitExecution(ctx, &repb.WaitExecutionRequest{Name: ops[0].Name})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.NotFound {
			t.Fatalf("WaitExecution of a finished operation: %v, want NOT_FOUND", err)
		}
	})

	t.Run("BindsAllInterfaces", func(t *testing.T) {
		if !listensOnAll(t, w.Port) {
			t.Fatalf("the worker does not listen on every interface on port %d", w.Port)
		}
	})

	t.Run("KillMidAction", func(t *testing.T) {
		ctx := WithMetadata(t, ctx, "killed")
		// The command says its PID in a file of the host, then sleeps.
		pidFile := filepath.Join(t.TempDir(), "pid")
		b := Blobs{}
		act := action(t, b, shell("echo $$ > "+pidFile+".tmp && mv "+pidFile+".tmp "+pidFile+" && exec sleep 60"), nil)
		b.Upload(t, ctx, conn, "")
		stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: act})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil { // the operation's name
			t.Fatal(err)
		}
		var data []byte
		proctest.Eventually(t, "the command to start", func() bool {
			data, err = os.ReadFile(pidFile)
			return err == nil
		})
		sleeper, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		pid := w.cmd.Process.Pid
		w.Kill()
		if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("the Execute stream of a killed worker: %v, want UNAVAILABLE", err)
		}
		if err := syscall.Kill(-pid, 0); err != syscall.ESRCH {
			t.Errorf("the worker's process group is still there after Kill (%v)", err)
		}
		if err := syscall.Kill(sleeper, 0); err != syscall.ESRCH {
			t.Errorf("the command the worker ran (pid %d) outlived it (%v)", sleeper, err)
		}
		_, err = repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("Capabilities of a killed worker: %v, want UNAVAILABLE", err)
		}
	})
}

// listensOnAll reports whether a socket listens on port on every interface
// (0.0.0.0 or ::), from /proc/net/tcp and tcp6.
func listensOnAll(t *testing.T, port int) bool {
	hexPort := strings.ToUpper(strconv.FormatInt(int64(port), 16))
	for len(hexPort) < 4 {
		hexPort = "0" + hexPort
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "0A" { // LISTEN
				continue
			}
			addr, p, ok := strings.Cut(fields[1], ":")
			if ok && p == hexPort && strings.Trim(addr, "0") == "" {
				return true
			}
		}
	}
	return false
}

func TestCompileWorkerMissingSources(t *testing.T) {
	if _, err := exec.LookPath("javac"); err != nil {
		t.Skip("no JDK: the sources are not looked at")
	}
	missing := filepath.Join(t.TempDir(), "no-sources")
	_, err := compileWorkerFrom(missing, workerJar)
	want := "the Bazel remote worker needs " + missing + ", which does not exist"
	var m missingError
	if err == nil || err.Error() != want || !errors.As(err, &m) {
		t.Errorf("compiling from missing sources: %v, want %s (a missingError, so the test skips outside CI)", err, want)
	}
}

// TestCompileWorkerIsCached compiles the worker into an empty user cache, then
// finds it there without compiling again.
func TestCompileWorkerIsCached(t *testing.T) {
	if _, err := compileWorker(); err != nil { // skips or fails as StartBazelWorker does
		StartBazelWorker(t, WorkerOptions{})
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := compileWorkerFrom(workerSources, workerJar)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dir, os.Getenv("XDG_CACHE_HOME")+"/gantry-tests/bazel-worker-") {
		t.Errorf("compiled into %s, want under $XDG_CACHE_HOME/gantry-tests", dir)
	}
	done := filepath.Join(dir, "done")
	before, err := os.Stat(done)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "com/google/devtools/build/remote/worker/RemoteWorker.class")); err != nil {
		t.Error(err)
	}
	again, err := compileWorkerFrom(workerSources, workerJar)
	if err != nil || again != dir {
		t.Fatalf("second compile: %s %v, want %s", again, err, dir)
	}
	if after, err := os.Stat(done); err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Error("the second compile did not reuse the cached classes")
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 1 {
		t.Errorf("the cache holds %d entries, want the compiled directory only", len(entries))
	}
}

// requireBwrap returns a static busybox's content when bwrap works here; it skips
// the test otherwise, or fails it under CI=true.
func requireBwrap(t *testing.T) string {
	t.Helper()
	missing := func(why string) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap with a static busybox is needed: %s", why)
		}
		t.Skipf("bwrap with a static busybox is needed: %s; install bubblewrap and busybox-static to run this test, CI=true makes this a failure", why)
	}
	if out, err := exec.Command("bwrap", "--dev-bind", "/", "/", "true").CombinedOutput(); err != nil {
		missing(fmt.Sprintf("%v: %s", err, out))
	}
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		missing(err.Error())
	}
	return string(data)
}
