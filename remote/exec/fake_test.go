package exec

import (
	"context"
	"maps"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// fakeREAPI is a small in-process REAPI execution server (Capabilities, CAS,
// ActionCache, Execution, Operations) for the protocol paths of the client.
// It runs nothing: work, set by the test, gives each action's result, and
// its knobs inject the faults the tests need.
type fakeREAPI struct {
	repb.UnimplementedContentAddressableStorageServer
	repb.UnimplementedActionCacheServer
	repb.UnimplementedCapabilitiesServer
	repb.UnimplementedExecutionServer
	longrunningpb.UnimplementedOperationsServer

	execDisabled bool
	digestFn     repb.DigestFunction_Value

	// work gives the result of an action, whose Command and input root the
	// server read from its CAS.
	work func(srv *fakeREAPI, cmd *repb.Command, root *repb.Directory) *repb.ActionResult
	// unavailable is how many Execute calls fail UNAVAILABLE at once.
	unavailable int
	// busy is how many FindMissingBlobs calls fail RESOURCE_EXHAUSTED at once, as
	// BuildGrid over its limit of concurrent calls.
	busy int
	// breakStreams is how many Execute calls send their operation's name and
	// then break, like a dropped connection.
	breakStreams int
	// waitNotFound is how many WaitExecution calls answer NOT_FOUND, as a
	// server that forgot the operation.
	waitNotFound int
	// badStatus, when set, is the status of every ExecuteResponse.
	badStatus *status.Status
	// hold makes Execute say EXECUTING and wait for its call to end.
	hold bool

	mu        sync.Mutex
	blobs     map[cache.Digest][]byte
	ac        map[cache.Digest]*repb.ActionResult
	ops       map[string]*longrunningpb.Operation
	calls     []call // every call, in order
	uploaded  []cache.Digest
	cancelled []string
	commands  []*repb.Command
	actions   []*repb.Action
	// execInstances is the instance name of each Execute call.
	execInstances []string
	// skipLookups is the skip_cache_lookup of each Execute call.
	skipLookups []bool
}

// call is one call the server received and the RequestMetadata it carried.
type call struct {
	method   string
	md       *repb.RequestMetadata // nil: none
	auth     string                // the authorization header
	instance string                // the request's instance name (unary calls and Execute)
}

func newFakeREAPI() *fakeREAPI {
	return &fakeREAPI{digestFn: repb.DigestFunction_SHA256, blobs: map[cache.Digest][]byte{},
		ac: map[cache.Digest]*repb.ActionResult{}, ops: map[string]*longrunningpb.Operation{}}
}

// start serves srv on 127.0.0.1 until the test ends and returns its grpc:// URL.
func (srv *fakeREAPI) start(t testing.TB, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(opts, grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		srv.record(ctx, info.FullMethod, req)
		return h(ctx, req)
	}), grpc.ChainStreamInterceptor(func(s any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		srv.record(ss.Context(), info.FullMethod, nil)
		return h(s, ss)
	}))...)
	repb.RegisterContentAddressableStorageServer(gs, srv)
	repb.RegisterActionCacheServer(gs, srv)
	repb.RegisterCapabilitiesServer(gs, srv)
	repb.RegisterExecutionServer(gs, srv)
	longrunningpb.RegisterOperationsServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return "grpc://" + lis.Addr().String()
}

func (srv *fakeREAPI) record(ctx context.Context, method string, req any) {
	c := call{method: path.Base(method)}
	if r, ok := req.(*repb.GetActionResultRequest); ok && cache.DigestFromProto(r.ActionDigest) == remote.Key("") {
		c.method += "(probe)" // cache/remote's look for an action cache
	}
	if r, ok := req.(interface{ GetInstanceName() string }); ok {
		c.instance = r.GetInstanceName()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			c.auth = v[0]
		}
		if v := md.Get(RequestMetadataKey); len(v) > 0 {
			c.md = &repb.RequestMetadata{}
			if proto.Unmarshal([]byte(v[0]), c.md) != nil {
				c.md = nil
			}
		}
	}
	srv.mu.Lock()
	srv.calls = append(srv.calls, c)
	srv.mu.Unlock()
}

// count is how many calls of method the server received.
func (srv *fakeREAPI) count(method string) int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	n := 0
	for _, c := range srv.calls {
		if c.method == method {
			n++
		}
	}
	return n
}

// methods is the calls' methods, in order, without the CAS's.
func (srv *fakeREAPI) methods() []string {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var ms []string
	for _, c := range srv.calls {
		switch c.method {
		case "FindMissingBlobs", "BatchUpdateBlobs", "BatchReadBlobs", "GetCapabilities", "GetActionResult(probe)":
			continue
		}
		ms = append(ms, c.method)
	}
	return ms
}

func (srv *fakeREAPI) put(data []byte) cache.Digest {
	d := cache.DigestOf(data)
	srv.mu.Lock()
	srv.blobs[d] = data
	srv.mu.Unlock()
	return d
}

func (srv *fakeREAPI) get(d *repb.Digest) ([]byte, bool) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	b, ok := srv.blobs[cache.DigestFromProto(d)]
	return b, ok
}

// putTree stores a tree of files (path → content; content "->target" is a
// symlink) and returns its Tree's digest and its root's.
func (srv *fakeREAPI) putTree(files map[string]string) (tree, root cache.Digest) {
	type dnode struct {
		dirs  map[string]*dnode
		files map[string]string
	}
	top := &dnode{dirs: map[string]*dnode{}, files: map[string]string{}}
	for p, content := range files {
		n := top
		names := strings.Split(p, "/")
		for _, name := range names[:len(names)-1] {
			if n.dirs[name] == nil {
				n.dirs[name] = &dnode{dirs: map[string]*dnode{}, files: map[string]string{}}
			}
			n = n.dirs[name]
		}
		n.files[names[len(names)-1]] = content
	}
	t := &repb.Tree{}
	var build func(n *dnode) (*repb.Directory, cache.Digest)
	build = func(n *dnode) (*repb.Directory, cache.Digest) {
		dir := &repb.Directory{}
		for _, name := range slices.Sorted(maps.Keys(n.dirs)) {
			sub, d := build(n.dirs[name])
			t.Children = append(t.Children, sub)
			dir.Directories = append(dir.Directories, &repb.DirectoryNode{Name: name, Digest: d.Proto()})
		}
		for _, name := range slices.Sorted(maps.Keys(n.files)) {
			content := n.files[name]
			if target, ok := strings.CutPrefix(content, "->"); ok {
				dir.Symlinks = append(dir.Symlinks, &repb.SymlinkNode{Name: name, Target: target})
				continue
			}
			d := srv.put([]byte(content))
			dir.Files = append(dir.Files, &repb.FileNode{Name: name, Digest: d.Proto()})
		}
		b, _ := cache.MarshalDirectory(dir)
		return dir, srv.put(b)
	}
	rootDir, rootDigest := build(top)
	t.Root = rootDir
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(t)
	return srv.put(b), rootDigest
}

func (srv *fakeREAPI) GetCapabilities(context.Context, *repb.GetCapabilitiesRequest) (*repb.ServerCapabilities, error) {
	return &repb.ServerCapabilities{
		CacheCapabilities: &repb.CacheCapabilities{DigestFunctions: []repb.DigestFunction_Value{repb.DigestFunction_SHA256},
			MaxBatchTotalSizeBytes: 4 << 20, ActionCacheUpdateCapabilities: &repb.ActionCacheUpdateCapabilities{UpdateEnabled: true}},
		ExecutionCapabilities: &repb.ExecutionCapabilities{DigestFunction: srv.digestFn, ExecEnabled: !srv.execDisabled},
	}, nil
}

func (srv *fakeREAPI) FindMissingBlobs(_ context.Context, req *repb.FindMissingBlobsRequest) (*repb.FindMissingBlobsResponse, error) {
	srv.mu.Lock()
	busy := srv.busy > 0
	if busy {
		srv.busy--
	}
	srv.mu.Unlock()
	if busy {
		return nil, status.Error(codes.ResourceExhausted, "Concurrent RPC limit exceeded!")
	}
	resp := &repb.FindMissingBlobsResponse{}
	for _, d := range req.BlobDigests {
		if _, ok := srv.get(d); !ok {
			resp.MissingBlobDigests = append(resp.MissingBlobDigests, d)
		}
	}
	return resp, nil
}

func (srv *fakeREAPI) BatchUpdateBlobs(_ context.Context, req *repb.BatchUpdateBlobsRequest) (*repb.BatchUpdateBlobsResponse, error) {
	resp := &repb.BatchUpdateBlobsResponse{}
	for _, r := range req.Requests {
		st := status.New(codes.OK, "")
		if d := cache.DigestOf(r.Data); d != cache.DigestFromProto(r.Digest) {
			st = status.New(codes.InvalidArgument, "digest mismatch")
		} else {
			srv.put(r.Data)
			srv.mu.Lock()
			srv.uploaded = append(srv.uploaded, d)
			srv.mu.Unlock()
		}
		resp.Responses = append(resp.Responses, &repb.BatchUpdateBlobsResponse_Response{Digest: r.Digest, Status: st.Proto()})
	}
	return resp, nil
}

func (srv *fakeREAPI) BatchReadBlobs(_ context.Context, req *repb.BatchReadBlobsRequest) (*repb.BatchReadBlobsResponse, error) {
	resp := &repb.BatchReadBlobsResponse{}
	for _, d := range req.Digests {
		data, ok := srv.get(d)
		st := status.New(codes.OK, "")
		if !ok {
			st = status.New(codes.NotFound, "no such blob")
		}
		resp.Responses = append(resp.Responses, &repb.BatchReadBlobsResponse_Response{Digest: d, Data: data, Status: st.Proto()})
	}
	return resp, nil
}

func (srv *fakeREAPI) GetActionResult(_ context.Context, req *repb.GetActionResultRequest) (*repb.ActionResult, error) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if ar, ok := srv.ac[cache.DigestFromProto(req.ActionDigest)]; ok {
		return ar, nil
	}
	return nil, status.Error(codes.NotFound, "not in the action cache")
}

// Execute runs the action (work), after its faults.
func (srv *fakeREAPI) Execute(req *repb.ExecuteRequest, stream repb.Execution_ExecuteServer) error {
	srv.mu.Lock()
	srv.execInstances = append(srv.execInstances, req.InstanceName)
	srv.skipLookups = append(srv.skipLookups, req.SkipCacheLookup)
	n := len(srv.ops) + 1
	if srv.unavailable > 0 {
		srv.unavailable--
		srv.mu.Unlock()
		return status.Error(codes.Unavailable, "the scheduler is restarting")
	}
	broken := srv.breakStreams > 0
	if broken {
		srv.breakStreams--
	}
	srv.mu.Unlock()
	name := "operations/" + strings.Repeat("x", n)
	queued, _ := anypb.New(&repb.ExecuteOperationMetadata{Stage: repb.ExecutionStage_QUEUED, ActionDigest: req.ActionDigest})
	if err := stream.Send(&longrunningpb.Operation{Name: name, Metadata: queued}); err != nil {
		return err
	}
	op, err := srv.run(req.ActionDigest, name)
	if err != nil {
		return err
	}
	if broken {
		return status.Error(codes.Unavailable, "connection reset")
	}
	if srv.hold {
		executing, _ := anypb.New(&repb.ExecuteOperationMetadata{Stage: repb.ExecutionStage_EXECUTING, ActionDigest: req.ActionDigest})
		if err := stream.Send(&longrunningpb.Operation{Name: name, Metadata: executing}); err != nil {
			return err
		}
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	return stream.Send(op)
}

// run reads the action, its command and input root from the CAS, asks work
// for its result and keeps the finished operation as name.
func (srv *fakeREAPI) run(ad *repb.Digest, name string) (*longrunningpb.Operation, error) {
	actBlob, ok := srv.get(ad)
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "the action is not in the CAS")
	}
	act := &repb.Action{}
	if err := proto.Unmarshal(actBlob, act); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	cmdBlob, ok1 := srv.get(act.CommandDigest)
	rootBlob, ok2 := srv.get(act.InputRootDigest)
	if !ok1 || !ok2 {
		return nil, status.Error(codes.FailedPrecondition, "the command or input root is not in the CAS")
	}
	cmd, root := &repb.Command{}, &repb.Directory{}
	proto.Unmarshal(cmdBlob, cmd)
	proto.Unmarshal(rootBlob, root)
	srv.mu.Lock()
	srv.commands = append(srv.commands, cmd)
	srv.actions = append(srv.actions, act)
	srv.mu.Unlock()
	resp := &repb.ExecuteResponse{Status: status.New(codes.OK, "").Proto(), Message: "details: http://fake/" + name}
	if srv.badStatus != nil {
		resp.Status = srv.badStatus.Proto()
	} else {
		resp.Result = srv.work(srv, cmd, root)
		if resp.Result.ExitCode == 0 {
			srv.mu.Lock()
			srv.ac[cache.DigestFromProto(ad)] = resp.Result
			srv.mu.Unlock()
		}
	}
	r, _ := anypb.New(resp)
	op := &longrunningpb.Operation{Name: name, Done: true, Result: &longrunningpb.Operation_Response{Response: r}}
	srv.mu.Lock()
	srv.ops[name] = op
	srv.mu.Unlock()
	return op, nil
}

func (srv *fakeREAPI) WaitExecution(req *repb.WaitExecutionRequest, stream repb.Execution_WaitExecutionServer) error {
	srv.mu.Lock()
	op, ok := srv.ops[req.Name]
	if srv.waitNotFound > 0 {
		srv.waitNotFound--
		ok = false
	}
	srv.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "no operation %s", req.Name)
	}
	return stream.Send(op)
}

func (srv *fakeREAPI) CancelOperation(_ context.Context, req *longrunningpb.CancelOperationRequest) (*emptypb.Empty, error) {
	srv.mu.Lock()
	srv.cancelled = append(srv.cancelled, req.Name)
	srv.mu.Unlock()
	return &emptypb.Empty{}, nil
}
