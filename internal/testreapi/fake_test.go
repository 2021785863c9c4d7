package testreapi

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return WithMetadata(t, ctx, "fake-test")
}

// stages are the ExecuteOperationMetadata stages of ops.
func stages(t *testing.T, ops []*longrunningpb.Operation) []repb.ExecutionStage_Value {
	t.Helper()
	var out []repb.ExecutionStage_Value
	for _, op := range ops {
		meta := &repb.ExecuteOperationMetadata{}
		if err := op.Metadata.UnmarshalTo(meta); err != nil {
			t.Fatal(err)
		}
		out = append(out, meta.Stage)
	}
	return out
}

func TestFakeExecutesWithOutputPathsAndStages(t *testing.T) {
	f := StartFake(t, FakeOptions{Worker: "fake-1"})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	b := Blobs{}
	cmd := shell("mkdir -p out/d/e && echo f > out/f && echo g > out/d/e/g && ln -s f out/l && cat in && echo err >&2")
	cmd.OutputPaths = []string{"out/f", "out/d", "out/l", "out/none"}
	act := action(t, b, cmd, map[string]string{"in": "input\n"})
	ops, resp, err := execute(t, ctx, conn, "", b, act)
	if err != nil {
		t.Fatal(err)
	}
	want := []repb.ExecutionStage_Value{repb.ExecutionStage_QUEUED, repb.ExecutionStage_EXECUTING, repb.ExecutionStage_COMPLETED}
	if got := stages(t, ops); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stages %v, want %v", got, want)
	}
	r := resp.Result
	if resp.Status.GetCode() != 0 || r.ExitCode != 0 || resp.CachedResult {
		t.Fatalf("response %v", resp)
	}
	if got := string(Read(t, ctx, conn, "", r.StdoutDigest)); got != "input\n" {
		t.Errorf("stdout %q", got)
	}
	if got := string(Read(t, ctx, conn, "", r.StderrDigest)); got != "err\n" {
		t.Errorf("stderr %q", got)
	}
	if r.ExecutionMetadata.GetWorker() != "fake-1" {
		t.Errorf("worker %q, want fake-1", r.ExecutionMetadata.GetWorker())
	}
	if len(r.OutputFiles) != 1 || r.OutputFiles[0].Path != "out/f" || string(Read(t, ctx, conn, "", r.OutputFiles[0].Digest)) != "f\n" {
		t.Errorf("output files %v", r.OutputFiles)
	}
	if len(r.OutputSymlinks) != 1 || r.OutputSymlinks[0].Path != "out/l" || r.OutputSymlinks[0].Target != "f" {
		t.Errorf("output symlinks %v", r.OutputSymlinks)
	}
	if len(r.OutputFileSymlinks)+len(r.OutputDirectorySymlinks) != 0 {
		t.Errorf("legacy symlink fields set for output_paths: %v", r)
	}
	if len(r.OutputDirectories) != 1 || r.OutputDirectories[0].TreeDigest == nil || r.OutputDirectories[0].RootDirectoryDigest != nil {
		t.Fatalf("output directories %v, want a tree only (TREE_ONLY is the default)", r.OutputDirectories)
	}
	tree := &repb.Tree{}
	if err := proto.Unmarshal(Read(t, ctx, conn, "", r.OutputDirectories[0].TreeDigest), tree); err != nil {
		t.Fatal(err)
	}
	if len(tree.Root.Directories) != 1 || tree.Root.Directories[0].Name != "e" || len(tree.Children) != 1 || tree.Children[0].Files[0].Name != "g" {
		t.Errorf("tree %v", tree)
	}

	// The result is in the action cache, and a second Execute answers from it.
	if f.ActionResult("", act) == nil {
		t.Fatal("the result is not in the action cache")
	}
	ops, resp, err = execute(t, ctx, conn, "", b, act)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.CachedResult || len(ops) != 1 || len(f.Executions()) != 1 {
		t.Errorf("second Execute: %d operations, cached %v, %d executions; want 1, true, 1", len(ops), resp.CachedResult, len(f.Executions()))
	}
}

func TestFakeLegacyOutputFields(t *testing.T) {
	f := StartFake(t, FakeOptions{})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	b := Blobs{}
	cmd := shell("mkdir out/d && echo f > out/f && ln -s d out/ld")
	cmd.OutputFiles = []string{"out/f"}
	cmd.OutputDirectories = []string{"out/d", "out/ld"}
	_, resp, err := execute(t, ctx, conn, "", b, action(t, b, cmd, nil))
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Result
	if len(r.OutputFiles) != 1 || len(r.OutputDirectories) != 1 || len(r.OutputDirectorySymlinks) != 1 || len(r.OutputSymlinks) != 0 {
		t.Errorf("result %v, want out/f, out/d and out/ld in the legacy fields", r)
	}
}

func TestFakeDirectoryOnly(t *testing.T) {
	f := StartFake(t, FakeOptions{})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	b := Blobs{}
	cmd := shell("mkdir -p out/a/b && echo x > out/a/b/x")
	cmd.OutputPaths = []string{"out"}
	cmd.OutputDirectoryFormat = repb.Command_DIRECTORY_ONLY
	_, resp, err := execute(t, ctx, conn, "", b, action(t, b, cmd, nil))
	if err != nil {
		t.Fatal(err)
	}
	dirs := resp.Result.OutputDirectories
	if len(dirs) != 1 || dirs[0].TreeDigest != nil || dirs[0].RootDirectoryDigest == nil {
		t.Fatalf("output directories %v, want a root directory digest only", dirs)
	}
	stream, err := repb.NewContentAddressableStorageClient(conn).GetTree(ctx, &repb.GetTreeRequest{RootDigest: dirs[0].RootDirectoryDigest})
	if err != nil {
		t.Fatal(err)
	}
	page, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Directories) != 3 || page.Directories[2].Files[0].Name != "x" {
		t.Errorf("GetTree %v, want out, out/a, out/a/b", page.Directories)
	}
}

func TestFakeInstanceNames(t *testing.T) {
	f := StartFake(t, FakeOptions{Instances: []string{"main/ci"}})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	b := Blobs{}
	cmd := shell("echo hi > x")
	cmd.OutputPaths = []string{"x"}
	cmd.Platform = &repb.Platform{Properties: []*repb.Platform_Property{{Name: "OSFamily", Value: "linux"}}}
	ops, resp, err := execute(t, ctx, conn, "main/ci", b, action(t, b, cmd, nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := "main/ci/operations/1"; ops[0].Name != want {
		t.Errorf("operation %q, want %q", ops[0].Name, want)
	}
	if got := string(Read(t, ctx, conn, "main/ci", resp.Result.OutputFiles[0].Digest)); got != "hi\n" {
		t.Errorf("x = %q", got)
	}
	if e := f.Executions(); len(e) != 1 || e[0].Instance != "main/ci" || e[0].Command.Platform.Properties[0].Value != "linux" {
		t.Errorf("executions %v", e)
	}
	_, err = repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: "other"})
	want := `rpc error: code = InvalidArgument desc = unknown instance name "other" (the fake serves ["main/ci"])`
	if err == nil || err.Error() != want {
		t.Errorf("unknown instance: %v, want %s", err, want)
	}
}

func TestFakeCAS(t *testing.T) {
	f := StartFake(t, FakeOptions{Instances: []string{"i"}, BatchLimit: 100})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	data := make([]byte, 200<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	d := DigestOf(data)
	w, err := bspb.NewByteStreamClient(conn).Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("i/uploads/u-1/blobs/%s/%d", d.Hash, d.SizeBytes)
	for off := 0; off < len(data); off += 64 << 10 {
		end := min(off+64<<10, len(data))
		if err := w.Send(&bspb.WriteRequest{ResourceName: name, WriteOffset: int64(off), Data: data[off:end], FinishWrite: end == len(data)}); err != nil {
			t.Fatal(err)
		}
	}
	if resp, err := w.CloseAndRecv(); err != nil || resp.CommittedSize != d.SizeBytes {
		t.Fatalf("write: %v %v", resp, err)
	}
	if got := Read(t, ctx, conn, "i", d); string(got) != string(data) {
		t.Error("read back other bytes than written")
	}
	cas := repb.NewContentAddressableStorageClient(conn)
	small := DigestOf([]byte("small"))
	missing, err := cas.FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{InstanceName: "i", BlobDigests: []*repb.Digest{d, small}})
	if err != nil || len(missing.MissingBlobDigests) != 1 || missing.MissingBlobDigests[0].Hash != small.Hash {
		t.Errorf("FindMissingBlobs: %v %v, want only the small blob", missing, err)
	}
	_, err = cas.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{InstanceName: "i", Digests: []*repb.Digest{d}})
	want := fmt.Sprintf("rpc error: code = InvalidArgument desc = batch of %d bytes over the limit of 100", len(data))
	if err == nil || err.Error() != want {
		t.Errorf("a batch over the limit: %v, want %s", err, want)
	}
}

func TestFakeUnimplemented(t *testing.T) {
	f := StartFake(t, FakeOptions{Unimplemented: []string{"BatchReadBlobs"}})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	_, err := repb.NewContentAddressableStorageClient(conn).BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{})
	want := "rpc error: code = Unimplemented desc = Method build.bazel.remote.execution.v2.ContentAddressableStorage/BatchReadBlobs is unimplemented"
	if err == nil || err.Error() != want {
		t.Errorf("BatchReadBlobs: %v, want %s", err, want)
	}
	d := f.PutBlob("", []byte("via ByteStream"))
	if got := Read(t, ctx, conn, "", d); string(got) != "via ByteStream" {
		t.Errorf("ByteStream read %q", got)
	}
}

// startHeld executes a shell action with Faults.Hold set, returning the stream
// once it said EXECUTING, with the operation's name, and the channel releasing it.
func startHeld(t *testing.T, f *Fake, conn *grpc.ClientConn, ctx context.Context) (repb.Execution_ExecuteClient, string, chan struct{}) {
	t.Helper()
	hold := make(chan struct{})
	f.Faults(func(fl *Faults) { fl.Hold = hold })
	b := Blobs{}
	act := action(t, b, shell("echo done"), nil)
	b.Upload(t, ctx, conn, "")
	stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: act})
	if err != nil {
		t.Fatal(err)
	}
	for {
		op, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if s := stages(t, []*longrunningpb.Operation{op}); s[0] == repb.ExecutionStage_EXECUTING {
			return stream, op.Name, hold
		}
	}
}

// finish reads a stream to its end and returns the last operation's response.
func finish(t *testing.T, stream grpc.ClientStream) (*repb.ExecuteResponse, error) {
	t.Helper()
	var last *longrunningpb.Operation
	for {
		op := &longrunningpb.Operation{}
		err := stream.RecvMsg(op)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		last = op
	}
	resp := &repb.ExecuteResponse{}
	if last == nil || !last.Done {
		t.Fatalf("the stream ended without a finished operation")
	}
	if err := last.GetResponse().UnmarshalTo(resp); err != nil {
		t.Fatal(err)
	}
	return resp, nil
}

func TestFakeBrokenStreamThenWaitExecution(t *testing.T) {
	f := StartFake(t, FakeOptions{})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	f.Faults(func(fl *Faults) { fl.BreakStreams, fl.BreakAfter = 1, 2 })
	stream, name, hold := startHeld(t, f, conn, ctx)
	_, err := finish(t, stream)
	if want := "rpc error: code = Unavailable desc = the fake broke the stream"; err == nil || err.Error() != want {
		t.Fatalf("the broken stream: %v, want %s", err, want)
	}
	wait, err := repb.NewExecutionClient(conn).WaitExecution(ctx, &repb.WaitExecutionRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	first, err := wait.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if s := stages(t, []*longrunningpb.Operation{first}); s[0] != repb.ExecutionStage_EXECUTING {
		t.Errorf("WaitExecution began with %v, want EXECUTING", s)
	}
	close(hold)
	resp, err := finish(t, wait)
	if err != nil || resp.Result.GetExitCode() != 0 {
		t.Fatalf("WaitExecution: %v %v", resp, err)
	}
	// A finished operation is kept: WaitExecution answers its result at once.
	wait, err = repb.NewExecutionClient(conn).WaitExecution(ctx, &repb.WaitExecutionRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := finish(t, wait); err != nil || resp.Result == nil {
		t.Fatalf("WaitExecution of a finished operation: %v %v", resp, err)
	}
}

func TestFakeForgetsOperations(t *testing.T) {
	f := StartFake(t, FakeOptions{})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	_, name, hold := startHeld(t, f, conn, ctx)
	defer close(hold)
	f.Faults(func(fl *Faults) { fl.ForgetOperations = true })
	wait, err := repb.NewExecutionClient(conn).WaitExecution(ctx, &repb.WaitExecutionRequest{Name: name})
	if err == nil {
		_, err = wait.Recv()
	}
	if want := "rpc error: code = NotFound desc = Operation not found: operations/1"; err == nil || err.Error() != want {
		t.Errorf("WaitExecution of a forgotten operation: %v, want %s", err, want)
	}
}

func TestFakeCancelOperation(t *testing.T) {
	f := StartFake(t, FakeOptions{})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	stream, name, hold := startHeld(t, f, conn, ctx)
	defer close(hold)
	if _, err := longrunningpb.NewOperationsClient(conn).CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	resp, err := finish(t, stream)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status.GetCode() != int32(codes.Canceled) || resp.Status.GetMessage() != "the operation was cancelled" {
		t.Errorf("a cancelled operation's response %v, want CANCELLED", resp)
	}
}

func TestFakeUnavailable(t *testing.T) {
	f := StartFake(t, FakeOptions{})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	f.Faults(func(fl *Faults) { fl.Unavailable = map[string]int{"Execute": 2} })
	b := Blobs{}
	act := action(t, b, shell("true"), nil)
	for i := range 2 {
		_, _, err := execute(t, ctx, conn, "", b, act)
		if want := "rpc error: code = Unavailable desc = the fake is unavailable for Execute"; err == nil || err.Error() != want {
			t.Fatalf("Execute %d: %v, want %s", i, err, want)
		}
	}
	if _, resp, err := execute(t, ctx, conn, "", b, act); err != nil || resp.Result.GetExitCode() != 0 {
		t.Fatalf("the third Execute: %v %v", resp, err)
	}
}

func TestFakeCannedResultAndStatus(t *testing.T) {
	f := StartFake(t, FakeOptions{})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	f.Faults(func(fl *Faults) {
		fl.Result = func(*repb.Action, *repb.Command) *repb.ExecuteResponse {
			return &repb.ExecuteResponse{Status: status.New(codes.ResourceExhausted, "no bots").Proto()}
		}
	})
	b := Blobs{}
	act := action(t, b, shell("exit 3"), nil)
	_, resp, err := execute(t, ctx, conn, "", b, act)
	if err != nil || resp.Status.GetCode() != int32(codes.ResourceExhausted) || resp.Status.GetMessage() != "no bots" {
		t.Fatalf("response %v %v, want RESOURCE_EXHAUSTED: no bots", resp, err)
	}
	if f.ActionResult("", act) != nil {
		t.Error("a status ≠ OK was cached")
	}
	f.Faults(func(fl *Faults) { fl.Result = nil })
	if _, resp, err = execute(t, ctx, conn, "", b, act); err != nil || resp.Result.GetExitCode() != 3 {
		t.Fatalf("response %v %v, want exit code 3", resp, err)
	}
	if f.ActionResult("", act) != nil {
		t.Error("a failed command was cached")
	}
}

func TestFakeMissingInputsAndTimeout(t *testing.T) {
	f := StartFake(t, FakeOptions{})
	conn, ctx := Dial(t, f.Addr), testContext(t)
	b := Blobs{}
	act := action(t, b, shell("true"), map[string]string{"in": "never uploaded"})
	delete(b, key(DigestOf([]byte("never uploaded"))))
	_, resp, err := execute(t, ctx, conn, "", b, act)
	if err != nil || resp.Status.GetCode() != int32(codes.FailedPrecondition) {
		t.Fatalf("response %v %v, want FAILED_PRECONDITION", resp, err)
	}
	pf := &errdetails.PreconditionFailure{}
	missing := DigestOf([]byte("never uploaded"))
	if len(resp.Status.Details) != 1 || resp.Status.Details[0].UnmarshalTo(pf) != nil ||
		pf.Violations[0].Type != "MISSING" || pf.Violations[0].Subject != fmt.Sprintf("blobs/%s/%d", missing.Hash, missing.SizeBytes) {
		t.Errorf("details %v, want a MISSING violation for the input", resp.Status.Details)
	}

	b = Blobs{}
	slow := b.AddMessage(t, &repb.Action{CommandDigest: b.AddMessage(t, shell("exec sleep 60")), InputRootDigest: b.Dir(t, nil), Timeout: durationpb.New(100 * time.Millisecond)})
	_, resp, err = execute(t, ctx, conn, "", b, slow)
	if err != nil || resp.Status.GetCode() != int32(codes.DeadlineExceeded) || resp.Status.GetMessage() != "the action timed out after 100ms" {
		t.Fatalf("response %v %v, want DEADLINE_EXCEEDED", resp, err)
	}
}

func TestFakeRequestMetadata(t *testing.T) {
	f := StartFake(t, FakeOptions{RequireMetadata: true})
	conn := Dial(t, f.Addr)
	_, err := repb.NewCapabilitiesClient(conn).GetCapabilities(context.Background(), &repb.GetCapabilitiesRequest{})
	want := "rpc error: code = InvalidArgument desc = RequestMetadata not received from the client for build.bazel.remote.execution.v2.Capabilities/GetCapabilities"
	if err == nil || err.Error() != want {
		t.Errorf("without metadata: %v, want %s", err, want)
	}
	caps, err := repb.NewCapabilitiesClient(conn).GetCapabilities(testContext(t), &repb.GetCapabilitiesRequest{})
	if err != nil || caps.HighApiVersion.GetMinor() != 3 || !caps.ExecutionCapabilities.GetExecEnabled() {
		t.Fatalf("capabilities %v %v", caps, err)
	}
	calls := f.Calls()
	if len(calls) != 2 || calls[0].Metadata != nil || calls[1].Method != "GetCapabilities" || calls[1].Metadata.GetActionId() != "fake-test" {
		t.Errorf("calls %v", calls)
	}
}
