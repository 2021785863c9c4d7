package exec

import (
	"context"
	"errors"
	"net"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/internal/testreapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cacheOnly is a cache-only configuration on the fake: its action cache and
// CAS, instance "ci".
func cacheOnly(f *testreapi.Fake) Config {
	return Config{ActionCache: remote.Spec{URL: "grpc://" + f.Addr, Instance: "ci"}, Wrap: WrapBwrap}
}

func dialActionCache(t *testing.T, cfg Config) *Client {
	t.Helper()
	cl, err := DialActionCache(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// describe is the Action of testBuild in a new local cache under cfg.
func describe(t *testing.T, cfg Config) (*cache.Cache, Build, Described) {
	t.Helper()
	c := openTestCache(t)
	b := testBuild(t, c)
	d, err := Describe(c, cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	return c, b, d
}

// A miss, a record, and a hit from another cache: the outputs (an empty file
// and an empty directory, whose digests are the same, among them), stdout and
// the worker come back; what was uploaded is what a reader needs (the Action,
// its Command, the output tree, stdout) and not the input root; every call
// carries the element as its action id.
func TestActionCacheRecordThenHit(t *testing.T) {
	f := testreapi.StartFake(t, testreapi.FakeOptions{RequireMetadata: true, Instances: []string{"ci"}})
	cfg := cacheOnly(f)
	c, b, d := describe(t, cfg)
	cl := dialActionCache(t, cfg)
	ctx := context.Background()
	if _, ok, err := cl.CachedResult(ctx, c, b, d); ok || err != nil {
		t.Fatalf("a lookup in an empty action cache: hit %v, error %v; want a miss", ok, err)
	}
	install := storeTree(t, c, map[string]string{"usr/bin/hello": "ELF", "usr/share/empty": "", "var/empty/": ""})
	if err := cl.Record(ctx, c, b, d, install, []byte("built here\n"), "gantry on box"); err != nil {
		t.Fatal(err)
	}
	ar := f.ActionResult("ci", d.Action.Proto())
	if ar == nil {
		t.Fatal("the action cache holds no result for the action")
	}
	if od := ar.GetOutputDirectories(); len(od) != 1 || od[0].Path != "root/gantry/install" || cache.DigestFromProto(od[0].RootDirectoryDigest) != install {
		t.Errorf("output directories %v: want root/gantry/install (wrap) with the install root's digest", od)
	}
	for what, dg := range map[string]cache.Digest{"the Action": d.Action, "the Command": d.Command, "the install root": install} {
		if _, ok := f.Blob("ci", dg.Proto()); !ok {
			t.Errorf("%s is not in the CAS", what)
		}
	}
	if _, ok := f.Blob("ci", ar.GetOutputDirectories()[0].TreeDigest); !ok {
		t.Error("the output's Tree blob is not in the CAS")
	}
	if _, ok := f.Blob("ci", d.InputRoot.Proto()); ok {
		t.Error("the input root was uploaded: no reader of the result needs it")
	}
	for _, call := range f.Calls() {
		if call.Metadata.GetActionId() != "hello.toml" && call.Method != "FindMissingBlobs" && call.Method != "BatchUpdateBlobs" {
			t.Errorf("%s carried action id %q, want hello.toml", call.Method, call.Metadata.GetActionId())
		}
	}

	c2, b2, d2 := describe(t, cfg)
	if d2.Action != d.Action {
		t.Fatalf("the same build in another cache is action %s, want %s", d2.Action, d.Action)
	}
	res, ok, err := cl.CachedResult(ctx, c2, b2, d2)
	if !ok || err != nil {
		t.Fatalf("lookup after the record: hit %v, error %v; want a hit", ok, err)
	}
	if res.Install != install || string(res.Stdout) != "built here\n" || res.Worker != "gantry on box" || !res.Cached {
		t.Errorf("hit: install %s, stdout %q, worker %q, cached %v; want %s, the recorded output, gantry on box, true", res.Install, res.Stdout, res.Worker, res.Cached, install)
	}
	if err := c2.WalkTree(res.Install, func(cache.TreeEntry) error { return nil }); err != nil {
		t.Errorf("the hit's install root is not whole in the local CAS: %v", err)
	}
}

// A cache-only build's Action is the remote build's: a result it records is
// the remote build's action cache hit, and nothing executes.
func TestActionCacheRecordIsARemoteBuildsHit(t *testing.T) {
	f := testreapi.StartFake(t, testreapi.FakeOptions{RequireMetadata: true})
	only := cacheOnly(f)
	only.ActionCache.Instance = ""
	c, b, d := describe(t, only)
	install := storeTree(t, c, map[string]string{"usr/bin/hello": "ELF"})
	if err := dialActionCache(t, only).Record(context.Background(), c, b, d, install, nil, "gantry on box"); err != nil {
		t.Fatal(err)
	}
	full := only
	full.Execution, full.ActionCache = remote.Spec{URL: "grpc://" + f.Addr}, remote.Spec{}
	c2 := openTestCache(t)
	res, err := dial(t, full.Execution.URL, full).Run(context.Background(), c2, testBuild(t, c2))
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != d.Action || !res.Cached || res.Install != install || len(f.Executions()) != 0 {
		t.Errorf("remote build: action %s, cached %v, install %s, %d executions; want %s, true, %s, none", res.Action, res.Cached, res.Install, len(f.Executions()), d.Action, install)
	}
}

// A lookup that fails is an infrastructure error, not a miss nobody hears of;
// a failed build's result is a miss.
func TestActionCacheLookupFailures(t *testing.T) {
	f := testreapi.StartFake(t, testreapi.FakeOptions{})
	cfg := cacheOnly(f)
	c, b, d := describe(t, cfg)
	cl := dialActionCache(t, cfg)
	f.Faults(func(x *testreapi.Faults) { x.Unavailable = map[string]int{"GetActionResult": 1} })
	_, ok, err := cl.CachedResult(context.Background(), c, b, d)
	var infra *InfraError
	if ok || !errors.As(err, &infra) {
		t.Fatalf("lookup on an unavailable action cache: hit %v, error %v; want an *InfraError", ok, err)
	}
	want := "remote execution: looking action " + d.Action.String() + " up: Unavailable: the fake is unavailable for GetActionResult"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}

	conn := testreapi.Dial(t, f.Addr)
	_, err = repb.NewActionCacheClient(conn).UpdateActionResult(testreapi.WithMetadata(t, context.Background(), "x"),
		&repb.UpdateActionResultRequest{InstanceName: "ci", ActionDigest: d.Action.Proto(), ActionResult: &repb.ActionResult{ExitCode: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := cl.CachedResult(context.Background(), c, b, d); ok || err != nil {
		t.Errorf("lookup of a failed result: hit %v, error %v; want a miss", ok, err)
	}
}

// refusingAC is an action cache that refuses every update.
type refusingAC struct {
	repb.UnimplementedActionCacheServer
}

func (refusingAC) UpdateActionResult(context.Context, *repb.UpdateActionResultRequest) (*repb.ActionResult, error) {
	return nil, status.Error(codes.PermissionDenied, "read-only for this token")
}

// A server that does not take results (UNIMPLEMENTED, PERMISSION_DENIED) is an
// *UpdateRefusedError saying so; any other failure is an *InfraError.
func TestActionCacheRecordRefused(t *testing.T) {
	f := testreapi.StartFake(t, testreapi.FakeOptions{Unimplemented: []string{"UpdateActionResult"}})
	cfg := cacheOnly(f)
	c, b, d := describe(t, cfg)
	install := storeTree(t, c, map[string]string{"x": "x"})
	err := dialActionCache(t, cfg).Record(context.Background(), c, b, d, install, nil, "w")
	var refused *UpdateRefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("record on a server without UpdateActionResult: %v, want an *UpdateRefusedError", err)
	}
	want := "the action cache grpc://" + f.Addr + " does not record results from this client (Unimplemented: Method build.bazel.remote.execution.v2.ActionCache/UpdateActionResult is unimplemented): results are looked up there, not recorded"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	repb.RegisterActionCacheServer(g, refusingAC{})
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	cfg.Storage = cfg.ActionCache // the fake's CAS
	cfg.ActionCache = remote.Spec{URL: "grpc://" + lis.Addr().String()}
	err = dialActionCache(t, cfg).Record(context.Background(), c, b, d, install, nil, "w")
	want = "the action cache grpc://" + lis.Addr().String() + " does not record results from this client (PermissionDenied: read-only for this token): results are looked up there, not recorded"
	if !errors.As(err, &refused) || err.Error() != want {
		t.Errorf("record on a read-only server: %v, want %q", err, want)
	}

	f.Faults(func(x *testreapi.Faults) { x.Unavailable = map[string]int{"FindMissingBlobs": 1} })
	cfg.Storage.Instance = "" // a store of its own: no blob known present
	err = dialActionCache(t, cfg).Record(context.Background(), c, b, d, install, nil, "w")
	if errors.As(err, &refused) || err == nil {
		t.Errorf("record with the CAS unavailable: %v, want an error that is no refusal", err)
	}
}
