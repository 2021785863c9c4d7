package testreapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/bazelbuild/remote-apis/build/bazel/semver"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// FakeOptions configures StartFake.
type FakeOptions struct {
	// Instances are the instance names the fake serves; any other is refused
	// (INVALID_ARGUMENT). Empty: any name is served, each with a CAS, action cache
	// and operations of its own.
	Instances []string
	// BatchLimit is the batch size stated in Capabilities and enforced (default
	// 4 MiB).
	BatchLimit int64
	// RequireMetadata refuses calls without a RequestMetadata header, with the
	// Bazel worker's message.
	RequireMetadata bool
	// Worker is the worker name results carry in ExecutedActionMetadata (default
	// "testreapi-fake").
	Worker string
	// Unimplemented are methods (by short name) answered UNIMPLEMENTED, as a
	// server lacking them: the Bazel worker has no "BatchReadBlobs".
	Unimplemented []string
}

// Faults are the fake's fault hooks; change them with Fake.Faults, at any time.
type Faults struct {
	// BreakStreams Execute or WaitExecution streams end with UNAVAILABLE after
	// sending BreakAfter operations (0: before the first), as a dropped
	// connection; the operations go on.
	BreakStreams, BreakAfter int
	// ForgetOperations makes WaitExecution, GetOperation and CancelOperation
	// answer NOT_FOUND for every operation, as a server that restarted.
	ForgetOperations bool
	// Unavailable fails the next n calls of a method (by its short name:
	// "Execute", "GetActionResult", "FindMissingBlobs"...) with UNAVAILABLE.
	Unavailable map[string]int
	// Result, when set, answers executions instead of running the command: a
	// canned result, or a status ≠ OK. Returning nil runs the command.
	Result func(*repb.Action, *repb.Command) *repb.ExecuteResponse
	// Hold, when set, keeps executions in the EXECUTING stage until it is closed
	// or their operation is cancelled.
	Hold chan struct{}
}

// Call is a call the fake received.
type Call struct {
	Method   string                // short name: "Execute", "BatchUpdateBlobs"...
	Metadata *repb.RequestMetadata // nil when the call carried none
}

// Execution is an action the fake began to execute.
type Execution struct {
	Instance string
	Action   *repb.Action
	Command  *repb.Command
}

// Fake is an in-process REAPI v2.3 server (Capabilities, CAS, ByteStream,
// ActionCache, Execution, Operations) on 127.0.0.1, for unit tests of protocol
// paths the Bazel worker (v2.0) cannot show: output_paths, root_directory_digest
// and DIRECTORY_ONLY, operation stages, instance names, platform properties, and
// injected faults. It runs commands in a plain temporary directory (the input
// root is not /), or answers them from Faults.Result. It is a fake: the
// end-to-end tests run against the Bazel worker and BuildGrid.
type Fake struct {
	// Addr is host:port on 127.0.0.1.
	Addr string

	opts    FakeOptions
	tmp     string
	ctx     context.Context // cancelled when the test ends
	running sync.WaitGroup

	mu         sync.Mutex
	faults     Faults
	blobs      map[string][]byte // by instance + "\x00" + digest key
	ac         map[string]*repb.ActionResult
	ops        map[string]*operation
	calls      []Call
	executions []Execution
	nextOp     int
}

type operation struct {
	name      string
	action    *repb.Digest
	executing chan struct{} // closed when it leaves QUEUED
	done      chan struct{} // closed when resp is set
	resp      *repb.ExecuteResponse
	cancel    context.CancelFunc
}

// stage is the stage op is in.
func (op *operation) stage() repb.ExecutionStage_Value {
	select {
	case <-op.done:
		return repb.ExecutionStage_COMPLETED
	default:
	}
	select {
	case <-op.executing:
		return repb.ExecutionStage_EXECUTING
	default:
		return repb.ExecutionStage_QUEUED
	}
}

// StartFake starts a Fake on 127.0.0.1; it stops when the test ends.
func StartFake(t testing.TB, opts FakeOptions) *Fake {
	t.Helper()
	if opts.BatchLimit == 0 {
		opts.BatchLimit = 4 << 20
	}
	if opts.Worker == "" {
		opts.Worker = "testreapi-fake"
	}
	f := &Fake{opts: opts, tmp: t.TempDir(), blobs: map[string][]byte{}, ac: map[string]*repb.ActionResult{}, ops: map[string]*operation{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.Addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	f.ctx = ctx
	g := grpc.NewServer(grpc.UnaryInterceptor(f.unary), grpc.StreamInterceptor(f.stream))
	repb.RegisterCapabilitiesServer(g, fakeCapabilities{f: f})
	repb.RegisterContentAddressableStorageServer(g, fakeCAS{f: f})
	repb.RegisterActionCacheServer(g, fakeAC{f: f})
	repb.RegisterExecutionServer(g, fakeExecution{f: f})
	bspb.RegisterByteStreamServer(g, &fakeByteStream{f: f})
	longrunningpb.RegisterOperationsServer(g, fakeOperations{f: f})
	go g.Serve(lis)
	t.Cleanup(func() {
		g.Stop()
		cancel()
		f.running.Wait()
	})
	return f
}

// Faults changes the fault hooks.
func (f *Fake) Faults(change func(*Faults)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.faults)
}

// Calls are the calls received so far, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Executions are the actions begun so far, in order (not those answered from the
// action cache).
func (f *Fake) Executions() []Execution {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Execution(nil), f.executions...)
}

// Blob is a blob of the instance's CAS.
func (f *Fake) Blob(instance string, d *repb.Digest) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, ok := f.blobs[instance+"\x00"+key(d)]
	return data, ok
}

// PutBlob stores data in the instance's CAS and returns its digest.
func (f *Fake) PutBlob(instance string, data []byte) *repb.Digest {
	d := DigestOf(data)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blobs[instance+"\x00"+key(d)] = data
	return d
}

// ActionResult is the instance's action cache entry for action, nil when none.
func (f *Fake) ActionResult(instance string, action *repb.Digest) *repb.ActionResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ac[instance+"\x00"+key(action)]
}

// --- interceptors: call log, RequestMetadata, UNAVAILABLE faults ---

func (f *Fake) admit(ctx context.Context, fullMethod string) error {
	method := fullMethod[strings.LastIndex(fullMethod, "/")+1:]
	var md *repb.RequestMetadata
	if in, ok := metadata.FromIncomingContext(ctx); ok {
		if v := in.Get(metadataKey); len(v) > 0 {
			md = &repb.RequestMetadata{}
			if err := proto.Unmarshal([]byte(v[0]), md); err != nil {
				return status.Errorf(codes.InvalidArgument, "bad RequestMetadata: %v", err)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, Call{Method: method, Metadata: md})
	if contains(f.opts.Unimplemented, method) {
		return status.Errorf(codes.Unimplemented, "Method %s is unimplemented", strings.TrimPrefix(fullMethod, "/"))
	}
	if md == nil && f.opts.RequireMetadata {
		return status.Errorf(codes.InvalidArgument, "RequestMetadata not received from the client for %s", strings.TrimPrefix(fullMethod, "/"))
	}
	if f.faults.Unavailable[method] > 0 {
		f.faults.Unavailable[method]--
		return status.Errorf(codes.Unavailable, "the fake is unavailable for %s", method)
	}
	return nil
}

func (f *Fake) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := f.admit(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (f *Fake) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := f.admit(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// instance checks that the fake serves name.
func (f *Fake) instance(name string) error {
	if len(f.opts.Instances) == 0 {
		return nil
	}
	for _, n := range f.opts.Instances {
		if n == name {
			return nil
		}
	}
	return status.Errorf(codes.InvalidArgument, "unknown instance name %q (the fake serves %q)", name, f.opts.Instances)
}

// message reads and parses a blob of the instance's CAS, or answers the
// FAILED_PRECONDITION with a MISSING violation the spec asks for.
func (f *Fake) message(instance string, d *repb.Digest, m proto.Message) *status.Status {
	data, ok := f.Blob(instance, d)
	if !ok {
		st, _ := status.New(codes.FailedPrecondition, "missing blob "+d.GetHash()).WithDetails(&errdetails.PreconditionFailure{
			Violations: []*errdetails.PreconditionFailure_Violation{{Type: "MISSING", Subject: fmt.Sprintf("blobs/%s/%d", d.GetHash(), d.GetSizeBytes())}},
		})
		return st
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return status.Newf(codes.InvalidArgument, "blob %s is not a %T: %v", d.GetHash(), m, err)
	}
	return nil
}

// --- Capabilities ---

type fakeCapabilities struct {
	repb.UnimplementedCapabilitiesServer
	f *Fake
}

func (s fakeCapabilities) GetCapabilities(ctx context.Context, req *repb.GetCapabilitiesRequest) (*repb.ServerCapabilities, error) {
	if err := s.f.instance(req.InstanceName); err != nil {
		return nil, err
	}
	sha := []repb.DigestFunction_Value{repb.DigestFunction_SHA256}
	return &repb.ServerCapabilities{
		CacheCapabilities: &repb.CacheCapabilities{
			DigestFunctions:               sha,
			MaxBatchTotalSizeBytes:        s.f.opts.BatchLimit,
			ActionCacheUpdateCapabilities: &repb.ActionCacheUpdateCapabilities{UpdateEnabled: true},
			SymlinkAbsolutePathStrategy:   repb.SymlinkAbsolutePathStrategy_ALLOWED,
		},
		ExecutionCapabilities: &repb.ExecutionCapabilities{DigestFunction: repb.DigestFunction_SHA256, DigestFunctions: sha, ExecEnabled: true},
		LowApiVersion:         &semver.SemVer{Major: 2},
		HighApiVersion:        &semver.SemVer{Major: 2, Minor: 3},
	}, nil
}

// --- CAS ---

type fakeCAS struct {
	repb.UnimplementedContentAddressableStorageServer
	f *Fake
}

func (s fakeCAS) FindMissingBlobs(ctx context.Context, req *repb.FindMissingBlobsRequest) (*repb.FindMissingBlobsResponse, error) {
	if err := s.f.instance(req.InstanceName); err != nil {
		return nil, err
	}
	resp := &repb.FindMissingBlobsResponse{}
	for _, d := range req.BlobDigests {
		if _, ok := s.f.Blob(req.InstanceName, d); !ok {
			resp.MissingBlobDigests = append(resp.MissingBlobDigests, d)
		}
	}
	return resp, nil
}

func (s fakeCAS) overLimit(sizes int64) error {
	if sizes > s.f.opts.BatchLimit {
		return status.Errorf(codes.InvalidArgument, "batch of %d bytes over the limit of %d", sizes, s.f.opts.BatchLimit)
	}
	return nil
}

func (s fakeCAS) BatchUpdateBlobs(ctx context.Context, req *repb.BatchUpdateBlobsRequest) (*repb.BatchUpdateBlobsResponse, error) {
	if err := s.f.instance(req.InstanceName); err != nil {
		return nil, err
	}
	var total int64
	resp := &repb.BatchUpdateBlobsResponse{}
	for _, r := range req.Requests {
		total += int64(len(r.Data))
		st := status.New(codes.OK, "")
		if key(DigestOf(r.Data)) != key(r.Digest) {
			st = status.Newf(codes.InvalidArgument, "data does not match digest %s", r.Digest.GetHash())
		} else {
			s.f.PutBlob(req.InstanceName, r.Data)
		}
		resp.Responses = append(resp.Responses, &repb.BatchUpdateBlobsResponse_Response{Digest: r.Digest, Status: st.Proto()})
	}
	return resp, s.overLimit(total)
}

func (s fakeCAS) BatchReadBlobs(ctx context.Context, req *repb.BatchReadBlobsRequest) (*repb.BatchReadBlobsResponse, error) {
	if err := s.f.instance(req.InstanceName); err != nil {
		return nil, err
	}
	var total int64
	resp := &repb.BatchReadBlobsResponse{}
	for _, d := range req.Digests {
		total += d.GetSizeBytes()
		r := &repb.BatchReadBlobsResponse_Response{Digest: d, Status: status.New(codes.OK, "").Proto()}
		if data, ok := s.f.Blob(req.InstanceName, d); ok {
			r.Data = data
		} else {
			r.Status = status.New(codes.NotFound, "no blob "+d.GetHash()).Proto()
		}
		resp.Responses = append(resp.Responses, r)
	}
	if err := s.overLimit(total); err != nil {
		return nil, err
	}
	return resp, nil
}

func (s fakeCAS) GetTree(req *repb.GetTreeRequest, stream repb.ContentAddressableStorage_GetTreeServer) error {
	if err := s.f.instance(req.InstanceName); err != nil {
		return err
	}
	resp := &repb.GetTreeResponse{}
	queue := []*repb.Digest{req.RootDigest}
	for len(queue) > 0 {
		dir := &repb.Directory{}
		if st := s.f.message(req.InstanceName, queue[0], dir); st != nil {
			return status.Errorf(codes.NotFound, "%s", st.Message())
		}
		queue = queue[1:]
		resp.Directories = append(resp.Directories, dir)
		for _, sub := range dir.Directories {
			queue = append(queue, sub.Digest)
		}
	}
	return stream.Send(resp)
}

// --- ByteStream ---

type fakeByteStream struct {
	bspb.UnimplementedByteStreamServer
	f *Fake
}

// parseResource splits "{instance}/blobs/{hash}/{size}" and
// "{instance}/uploads/{uuid}/blobs/{hash}/{size}".
func parseResource(name string) (string, *repb.Digest, error) {
	parts := strings.Split(name, "/")
	for i := len(parts) - 3; i >= 0; i-- {
		if parts[i] != "blobs" || i+3 != len(parts) {
			continue
		}
		size, err := strconv.ParseInt(parts[i+2], 10, 64)
		if err != nil {
			break
		}
		inst := parts[:i]
		if len(inst) >= 2 && inst[len(inst)-2] == "uploads" {
			inst = inst[:len(inst)-2]
		}
		return strings.Join(inst, "/"), &repb.Digest{Hash: parts[i+1], SizeBytes: size}, nil
	}
	return "", nil, status.Errorf(codes.InvalidArgument, "bad resource name %q", name)
}

func (s fakeByteStream) Read(req *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error {
	instance, d, err := parseResource(req.ResourceName)
	if err != nil {
		return err
	}
	if err := s.f.instance(instance); err != nil {
		return err
	}
	data, ok := s.f.Blob(instance, d)
	if !ok {
		return status.Errorf(codes.NotFound, "no blob %s", d.Hash)
	}
	data = data[min(req.ReadOffset, int64(len(data))):]
	for len(data) > 0 {
		n := min(len(data), 64<<10)
		if err := stream.Send(&bspb.ReadResponse{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func (s fakeByteStream) Write(stream bspb.ByteStream_WriteServer) error {
	var name string
	var data []byte
	for {
		req, err := stream.Recv()
		if err != nil {
			return err // the client went away: nothing is stored
		}
		if name == "" {
			name = req.ResourceName
		}
		if req.WriteOffset != int64(len(data)) {
			return status.Errorf(codes.InvalidArgument, "write at offset %d, have %d bytes", req.WriteOffset, len(data))
		}
		data = append(data, req.Data...)
		if req.FinishWrite {
			break
		}
	}
	instance, d, err := parseResource(name)
	if err != nil {
		return err
	}
	if err := s.f.instance(instance); err != nil {
		return err
	}
	if key(DigestOf(data)) != key(d) {
		return status.Errorf(codes.InvalidArgument, "data does not match digest %s", d.Hash)
	}
	s.f.PutBlob(instance, data)
	return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: int64(len(data))})
}

// --- ActionCache ---

type fakeAC struct {
	repb.UnimplementedActionCacheServer
	f *Fake
}

func (s fakeAC) GetActionResult(ctx context.Context, req *repb.GetActionResultRequest) (*repb.ActionResult, error) {
	if err := s.f.instance(req.InstanceName); err != nil {
		return nil, err
	}
	if r := s.f.ActionResult(req.InstanceName, req.ActionDigest); r != nil {
		return r, nil
	}
	return nil, status.Errorf(codes.NotFound, "no action result for %s", req.ActionDigest.GetHash())
}

func (s fakeAC) UpdateActionResult(ctx context.Context, req *repb.UpdateActionResultRequest) (*repb.ActionResult, error) {
	if err := s.f.instance(req.InstanceName); err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.ac[req.InstanceName+"\x00"+key(req.ActionDigest)] = req.ActionResult
	return req.ActionResult, nil
}

// --- Execution ---

type fakeExecution struct {
	repb.UnimplementedExecutionServer
	f *Fake
}

func (s fakeExecution) Execute(req *repb.ExecuteRequest, stream repb.Execution_ExecuteServer) error {
	f := s.f
	if err := f.instance(req.InstanceName); err != nil {
		return err
	}
	if req.ActionDigest == nil {
		return status.Error(codes.InvalidArgument, "no action digest")
	}
	f.mu.Lock()
	f.nextOp++
	name := fmt.Sprintf("operations/%d", f.nextOp)
	if req.InstanceName != "" {
		name = req.InstanceName + "/" + name
	}
	op := &operation{name: name, action: req.ActionDigest, executing: make(chan struct{}), done: make(chan struct{})}
	f.mu.Unlock()
	if !req.SkipCacheLookup {
		if r := f.ActionResult(req.InstanceName, req.ActionDigest); r != nil {
			op.resp = &repb.ExecuteResponse{Result: r, CachedResult: true}
			close(op.executing)
			close(op.done)
			return f.follow(op, stream, repb.ExecutionStage_COMPLETED)
		}
	}
	ctx, cancel := context.WithCancel(f.ctx)
	op.cancel = cancel
	f.mu.Lock()
	f.ops[name] = op
	f.mu.Unlock()
	f.running.Add(1)
	go func() {
		defer f.running.Done()
		defer cancel()
		resp := f.execute(ctx, req.InstanceName, op)
		f.mu.Lock()
		op.resp = resp
		f.mu.Unlock()
		close(op.done)
	}()
	return f.follow(op, stream, repb.ExecutionStage_QUEUED)
}

func (s fakeExecution) WaitExecution(req *repb.WaitExecutionRequest, stream repb.Execution_WaitExecutionServer) error {
	op, err := s.f.operation(req.Name)
	if err != nil {
		return err
	}
	return s.f.follow(op, stream, op.stage())
}

// operation is the operation named name, NOT_FOUND when unknown or forgotten.
func (f *Fake) operation(name string) (*operation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	op := f.ops[name]
	if op == nil || f.faults.ForgetOperations {
		return nil, status.Errorf(codes.NotFound, "Operation not found: %s", name)
	}
	return op, nil
}

// follow sends op's stages from stage on, each as an Operation with
// ExecuteOperationMetadata, the last one done with the ExecuteResponse; or
// breaks the stream as Faults say.
func (f *Fake) follow(op *operation, stream grpc.ServerStream, stage repb.ExecutionStage_Value) error {
	breakAfter := -1
	f.mu.Lock()
	if f.faults.BreakStreams > 0 {
		f.faults.BreakStreams--
		breakAfter = f.faults.BreakAfter
	}
	f.mu.Unlock()
	sent := 0
	broken := status.Error(codes.Unavailable, "the fake broke the stream")
	if breakAfter == 0 {
		return broken
	}
	send := func(stage repb.ExecutionStage_Value) error {
		if err := stream.SendMsg(f.operationMessage(op, stage)); err != nil {
			return err
		}
		if sent++; sent == breakAfter {
			return broken
		}
		return nil
	}
	wait := func(c chan struct{}) error {
		select {
		case <-c:
			return nil
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
	if stage == repb.ExecutionStage_QUEUED {
		if err := send(stage); err != nil {
			return err
		}
		if err := wait(op.executing); err != nil {
			return err
		}
		stage = repb.ExecutionStage_EXECUTING
	}
	if stage == repb.ExecutionStage_EXECUTING {
		if err := send(stage); err != nil {
			return err
		}
		if err := wait(op.done); err != nil {
			return err
		}
	}
	return send(repb.ExecutionStage_COMPLETED)
}

func (f *Fake) operationMessage(op *operation, stage repb.ExecutionStage_Value) *longrunningpb.Operation {
	meta, _ := anypb.New(&repb.ExecuteOperationMetadata{Stage: stage, ActionDigest: op.action})
	msg := &longrunningpb.Operation{Name: op.name, Metadata: meta}
	if stage == repb.ExecutionStage_COMPLETED {
		f.mu.Lock()
		resp, _ := anypb.New(op.resp)
		f.mu.Unlock()
		msg.Done = true
		msg.Result = &longrunningpb.Operation_Response{Response: resp}
	}
	return msg
}

// execute runs op's action and returns its response.
func (f *Fake) execute(ctx context.Context, instance string, op *operation) *repb.ExecuteResponse {
	action, cmd := &repb.Action{}, &repb.Command{}
	if st := f.message(instance, op.action, action); st != nil {
		close(op.executing)
		return &repb.ExecuteResponse{Status: st.Proto()}
	}
	if st := f.message(instance, action.CommandDigest, cmd); st != nil {
		close(op.executing)
		return &repb.ExecuteResponse{Status: st.Proto()}
	}
	f.mu.Lock()
	f.executions = append(f.executions, Execution{Instance: instance, Action: action, Command: cmd})
	hold, result := f.faults.Hold, f.faults.Result
	f.mu.Unlock()
	close(op.executing)
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
		}
	}
	if ctx.Err() != nil {
		return &repb.ExecuteResponse{Status: status.New(codes.Canceled, "the operation was cancelled").Proto()}
	}
	var resp *repb.ExecuteResponse
	if result != nil {
		resp = result(action, cmd)
	}
	if resp == nil {
		resp = f.run(ctx, instance, action, cmd)
	}
	if resp.Status.GetCode() == 0 && resp.Result != nil && resp.Result.ExitCode == 0 && !action.DoNotCache {
		f.mu.Lock()
		f.ac[instance+"\x00"+key(op.action)] = resp.Result
		f.mu.Unlock()
	}
	return resp
}

// run runs cmd in a temporary directory holding the input root, and collects its
// outputs into the instance's CAS.
func (f *Fake) run(ctx context.Context, instance string, action *repb.Action, cmd *repb.Command) *repb.ExecuteResponse {
	fail := func(c codes.Code, format string, args ...any) *repb.ExecuteResponse {
		return &repb.ExecuteResponse{Status: status.Newf(c, format, args...).Proto()}
	}
	root, err := os.MkdirTemp(f.tmp, "exec-")
	if err != nil {
		return fail(codes.Internal, "%v", err)
	}
	defer os.RemoveAll(root)
	if st := f.materialize(instance, action.InputRootDigest, root); st != nil {
		return &repb.ExecuteResponse{Status: st.Proto()}
	}
	workdir := filepath.Join(root, cmd.WorkingDirectory)
	paths, legacy := cmd.OutputPaths, len(cmd.OutputPaths) == 0
	if legacy {
		paths = append(append([]string(nil), cmd.OutputFiles...), cmd.OutputDirectories...)
	}
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(workdir, p)), 0o755); err != nil {
			return fail(codes.Internal, "creating the parent of output %s: %v", p, err)
		}
	}
	if len(cmd.Arguments) == 0 {
		return fail(codes.InvalidArgument, "the command has no arguments")
	}
	if action.Timeout != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, action.Timeout.AsDuration())
		defer cancel()
	}
	c := exec.CommandContext(ctx, cmd.Arguments[0], cmd.Arguments[1:]...)
	c.Dir = workdir
	c.Env = []string{}
	for _, e := range cmd.EnvironmentVariables {
		c.Env = append(c.Env, e.Name+"="+e.Value)
	}
	var stdout, stderr LockedBuffer
	c.Stdout, c.Stderr = &stdout, &stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	err = c.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return fail(codes.DeadlineExceeded, "the action timed out after %v", action.Timeout.AsDuration())
	}
	if ctx.Err() != nil {
		return fail(codes.Canceled, "the operation was cancelled")
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return fail(codes.InvalidArgument, "running the command: %v", err)
	}
	result := &repb.ActionResult{
		ExitCode:          int32(c.ProcessState.ExitCode()),
		StdoutDigest:      f.PutBlob(instance, []byte(stdout.String())),
		StderrDigest:      f.PutBlob(instance, []byte(stderr.String())),
		ExecutionMetadata: &repb.ExecutedActionMetadata{Worker: f.opts.Worker},
	}
	for _, p := range paths {
		if st := f.collect(instance, cmd, result, workdir, p, legacy); st != nil {
			return &repb.ExecuteResponse{Status: st.Proto()}
		}
	}
	return &repb.ExecuteResponse{Result: result}
}

// materialize writes the Directory tree d into dir.
func (f *Fake) materialize(instance string, d *repb.Digest, dir string) *status.Status {
	tree := &repb.Directory{}
	if st := f.message(instance, d, tree); st != nil {
		return st
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return status.New(codes.Internal, err.Error())
	}
	for _, file := range tree.Files {
		data, ok := f.Blob(instance, file.Digest)
		if !ok {
			return f.message(instance, file.Digest, &repb.Directory{})
		}
		mode := os.FileMode(0o644)
		if file.IsExecutable {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, file.Name), data, mode); err != nil {
			return status.New(codes.Internal, err.Error())
		}
	}
	for _, link := range tree.Symlinks {
		if err := os.Symlink(link.Target, filepath.Join(dir, link.Name)); err != nil {
			return status.New(codes.Internal, err.Error())
		}
	}
	for _, sub := range tree.Directories {
		if st := f.materialize(instance, sub.Digest, filepath.Join(dir, sub.Name)); st != nil {
			return st
		}
	}
	return nil
}

// collect adds output path p to result, if it exists.
func (f *Fake) collect(instance string, cmd *repb.Command, result *repb.ActionResult, workdir, p string, legacy bool) *status.Status {
	full := filepath.Join(workdir, p)
	info, err := os.Lstat(full)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return status.New(codes.Internal, err.Error())
	}
	switch {
	case info.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(full)
		if err != nil {
			return status.New(codes.Internal, err.Error())
		}
		link := &repb.OutputSymlink{Path: p, Target: target}
		switch {
		case !legacy:
			result.OutputSymlinks = append(result.OutputSymlinks, link)
		case contains(cmd.OutputDirectories, p):
			result.OutputDirectorySymlinks = append(result.OutputDirectorySymlinks, link)
		default:
			result.OutputFileSymlinks = append(result.OutputFileSymlinks, link)
		}
	case info.IsDir():
		root, children, err := f.directory(instance, full)
		if err != nil {
			return status.New(codes.Internal, err.Error())
		}
		out := &repb.OutputDirectory{Path: p}
		format := cmd.OutputDirectoryFormat
		if format == repb.Command_DIRECTORY_ONLY || format == repb.Command_TREE_AND_DIRECTORY {
			data, _ := proto.MarshalOptions{Deterministic: true}.Marshal(root)
			out.RootDirectoryDigest = f.PutBlob(instance, data)
		}
		if format != repb.Command_DIRECTORY_ONLY {
			data, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&repb.Tree{Root: root, Children: children})
			out.TreeDigest = f.PutBlob(instance, data)
		}
		result.OutputDirectories = append(result.OutputDirectories, out)
	default:
		data, err := os.ReadFile(full)
		if err != nil {
			return status.New(codes.Internal, err.Error())
		}
		result.OutputFiles = append(result.OutputFiles, &repb.OutputFile{Path: p, Digest: f.PutBlob(instance, data), IsExecutable: info.Mode()&0o100 != 0})
	}
	return nil
}

// directory stores the files and Directory messages under dir in the instance's
// CAS and returns dir's Directory and every one below it.
func (f *Fake) directory(instance, dir string) (*repb.Directory, []*repb.Directory, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	out := &repb.Directory{}
	var all []*repb.Directory
	for _, e := range entries { // ReadDir sorts by name, as the spec asks
		full := filepath.Join(dir, e.Name())
		info, err := os.Lstat(full)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return nil, nil, err
			}
			out.Symlinks = append(out.Symlinks, &repb.SymlinkNode{Name: e.Name(), Target: target})
		case info.IsDir():
			sub, below, err := f.directory(instance, full)
			if err != nil {
				return nil, nil, err
			}
			data, _ := proto.MarshalOptions{Deterministic: true}.Marshal(sub)
			out.Directories = append(out.Directories, &repb.DirectoryNode{Name: e.Name(), Digest: f.PutBlob(instance, data)})
			all = append(append(all, sub), below...)
		default:
			data, err := os.ReadFile(full)
			if err != nil {
				return nil, nil, err
			}
			out.Files = append(out.Files, &repb.FileNode{Name: e.Name(), Digest: f.PutBlob(instance, data), IsExecutable: info.Mode()&0o100 != 0})
		}
	}
	return out, all, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// --- Operations ---

type fakeOperations struct {
	longrunningpb.UnimplementedOperationsServer
	f *Fake
}

func (s fakeOperations) GetOperation(ctx context.Context, req *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	op, err := s.f.operation(req.Name)
	if err != nil {
		return nil, err
	}
	return s.f.operationMessage(op, op.stage()), nil
}

func (s fakeOperations) CancelOperation(ctx context.Context, req *longrunningpb.CancelOperationRequest) (*emptypb.Empty, error) {
	op, err := s.f.operation(req.Name)
	if err != nil {
		return nil, err
	}
	op.cancel()
	return &emptypb.Empty{}, nil
}
