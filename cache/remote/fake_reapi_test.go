package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/testpki"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// testREAPI is a small in-process REAPI server (CAS, ByteStream, ActionCache,
// Capabilities) for the tests of the grpc store: bazel-remote could not be
// installed here, and bst-artifact-server has no ActionCache. Its knobs inject
// the faults the tests need.
type testREAPI struct {
	repb.UnimplementedContentAddressableStorageServer
	repb.UnimplementedActionCacheServer
	repb.UnimplementedCapabilitiesServer
	bspb.UnimplementedByteStreamServer

	batchLimit    int64 // stated in Capabilities and enforced
	updateEnabled bool  // stated in Capabilities and enforced
	noActionCache bool  // register no ActionCache service
	// trusting stores uploads without checking them against their digests, as
	// a server that does not hash what it receives.
	trusting bool

	// tamper, when set, changes the bytes served for a blob.
	tamper func(data []byte) []byte
	// stall makes ByteStream.Read send one message and then nothing,
	// ByteStream.Write read nothing, and FindMissingBlobs answer nothing, until
	// the call is canceled.
	stall bool
	// findStalled, when set, receives one value per FindMissingBlobs call
	// that stalls, once it has begun to wait.
	findStalled chan struct{}
	// pace, when set, is the pause between the messages of ByteStream.Read.
	pace time.Duration
	// breakReads is how many ByteStream.Read calls fail with UNAVAILABLE
	// after their first message, like a connection reset.
	breakReads int
	// anonymousWrites answers BatchUpdateBlobs without the digests, in the
	// order asked, as Bazel's remote worker does.
	anonymousWrites bool
	// noBatchReads answers BatchReadBlobs UNIMPLEMENTED, as Bazel's remote
	// worker does.
	noBatchReads bool
	// readGate, when set, holds every BatchReadBlobs call until it is closed;
	// readArrived receives one value per call held.
	readGate    chan struct{}
	readArrived chan struct{}

	mu          sync.Mutex
	blobs       map[cache.Digest][]byte
	ac          map[string]*repb.ActionResult
	batchReads  []int   // blobs per BatchReadBlobs call, in order
	readOffsets []int64 // read_offset of each ByteStream.Read, in order
	findCalls   []int   // digests per FindMissingBlobs call, in order
	earlyWrites int     // ByteStream writes ended early: the blob was there
}

func newTestREAPI() *testREAPI {
	return &testREAPI{batchLimit: 1 << 20, updateEnabled: true, blobs: map[cache.Digest][]byte{}, ac: map[string]*repb.ActionResult{}}
}

// start serves srv on 127.0.0.1 until the test ends and returns its address.
func (srv *testREAPI) start(t testing.TB, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	repb.RegisterContentAddressableStorageServer(g, srv)
	repb.RegisterCapabilitiesServer(g, srv)
	bspb.RegisterByteStreamServer(g, srv)
	if !srv.noActionCache {
		repb.RegisterActionCacheServer(g, srv)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// locked runs f with the server's lock held: tests set knobs and read
// counters through it.
func (srv *testREAPI) locked(f func()) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	f()
}

func (srv *testREAPI) blob(d cache.Digest) ([]byte, bool) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	data, ok := srv.blobs[d]
	if ok && srv.tamper != nil {
		data = srv.tamper(data)
	}
	return data, ok
}

func (srv *testREAPI) put(d cache.Digest, data []byte) error {
	var trusting bool
	srv.locked(func() { trusting = srv.trusting })
	if !trusting && cache.DigestOf(data) != d {
		return status.Errorf(codes.InvalidArgument, "data does not match digest %s", d)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.blobs[d] = data
	return nil
}

func (srv *testREAPI) GetCapabilities(context.Context, *repb.GetCapabilitiesRequest) (*repb.ServerCapabilities, error) {
	return &repb.ServerCapabilities{CacheCapabilities: &repb.CacheCapabilities{
		DigestFunctions:               []repb.DigestFunction_Value{repb.DigestFunction_SHA256},
		MaxBatchTotalSizeBytes:        srv.batchLimit,
		ActionCacheUpdateCapabilities: &repb.ActionCacheUpdateCapabilities{UpdateEnabled: srv.updateEnabled},
	}}, nil
}

func (srv *testREAPI) FindMissingBlobs(ctx context.Context, req *repb.FindMissingBlobsRequest) (*repb.FindMissingBlobsResponse, error) {
	srv.mu.Lock()
	srv.findCalls = append(srv.findCalls, len(req.BlobDigests))
	stall, stalled := srv.stall, srv.findStalled
	srv.mu.Unlock()
	if stall {
		if stalled != nil {
			stalled <- struct{}{}
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	resp := &repb.FindMissingBlobsResponse{}
	for _, p := range req.BlobDigests {
		if _, ok := srv.blob(cache.DigestFromProto(p)); !ok {
			resp.MissingBlobDigests = append(resp.MissingBlobDigests, p)
		}
	}
	return resp, nil
}

func (srv *testREAPI) BatchReadBlobs(ctx context.Context, req *repb.BatchReadBlobsRequest) (*repb.BatchReadBlobsResponse, error) {
	srv.mu.Lock()
	srv.batchReads = append(srv.batchReads, len(req.Digests))
	gate, arrived, refuse := srv.readGate, srv.readArrived, srv.noBatchReads
	srv.mu.Unlock()
	if refuse {
		return nil, status.Error(codes.Unimplemented, "BatchReadBlobs is not implemented")
	}
	if gate != nil {
		arrived <- struct{}{}
		<-gate
	}
	var total int64
	resp := &repb.BatchReadBlobsResponse{}
	for _, p := range req.Digests {
		total += p.SizeBytes
		r := &repb.BatchReadBlobsResponse_Response{Digest: p, Status: status.New(codes.OK, "").Proto()}
		if data, ok := srv.blob(cache.DigestFromProto(p)); ok {
			r.Data = data
		} else {
			r.Status = status.New(codes.NotFound, "no such blob").Proto()
		}
		resp.Responses = append(resp.Responses, r)
	}
	if total > srv.batchLimit {
		return nil, status.Errorf(codes.InvalidArgument, "batch of %d bytes over the limit of %d", total, srv.batchLimit)
	}
	return resp, nil
}

func (srv *testREAPI) BatchUpdateBlobs(ctx context.Context, req *repb.BatchUpdateBlobsRequest) (*repb.BatchUpdateBlobsResponse, error) {
	var total int64
	resp := &repb.BatchUpdateBlobsResponse{}
	for _, r := range req.Requests {
		total += int64(len(r.Data))
		st := status.New(codes.OK, "")
		if err := srv.put(cache.DigestFromProto(r.Digest), r.Data); err != nil {
			st = status.Convert(err)
		}
		d := r.Digest
		if srv.anonymousWrites {
			d = nil
		}
		resp.Responses = append(resp.Responses, &repb.BatchUpdateBlobsResponse_Response{Digest: d, Status: st.Proto()})
	}
	if total > srv.batchLimit {
		return nil, status.Errorf(codes.InvalidArgument, "batch of %d bytes over the limit of %d", total, srv.batchLimit)
	}
	return resp, nil
}

// resourceDigest parses the digest at the end of a ByteStream resource name.
func resourceDigest(name string) (cache.Digest, error) {
	parts := strings.Split(name, "/")
	if len(parts) < 3 || parts[len(parts)-3] != "blobs" {
		return cache.Digest{}, status.Errorf(codes.InvalidArgument, "bad resource name %q", name)
	}
	size, err := strconv.ParseInt(parts[len(parts)-1], 10, 64)
	if err != nil {
		return cache.Digest{}, status.Errorf(codes.InvalidArgument, "bad resource name %q", name)
	}
	return cache.Digest{Hash: parts[len(parts)-2], Size: size}, nil
}

func (srv *testREAPI) Read(req *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error {
	d, err := resourceDigest(req.ResourceName)
	if err != nil {
		return err
	}
	data, ok := srv.blob(d)
	if !ok {
		return status.Errorf(codes.NotFound, "no blob %s", d)
	}
	srv.mu.Lock()
	srv.readOffsets = append(srv.readOffsets, req.ReadOffset)
	breakThis, pace, stall := srv.breakReads > 0, srv.pace, srv.stall
	srv.breakReads--
	srv.mu.Unlock()
	data = data[min(req.ReadOffset, int64(len(data))):]
	for len(data) > 0 {
		n := min(len(data), 64<<10)
		if err := stream.Send(&bspb.ReadResponse{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
		if breakThis {
			return status.Error(codes.Unavailable, "connection reset")
		}
		time.Sleep(pace) // a slow but steady server
		if stall {
			<-stream.Context().Done()
			return stream.Context().Err()
		}
	}
	return nil
}

func (srv *testREAPI) Write(stream bspb.ByteStream_WriteServer) error {
	var stall bool
	srv.locked(func() { stall = srv.stall })
	if stall {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	var d cache.Digest
	var data []byte
	for {
		req, err := stream.Recv()
		if err != nil {
			return err // the client went away: nothing is stored
		}
		if req.ResourceName != "" && d.IsZero() {
			if d, err = resourceDigest(req.ResourceName); err != nil {
				return err
			}
			if _, ok := srv.blob(d); ok {
				srv.mu.Lock()
				srv.earlyWrites++
				srv.mu.Unlock()
				return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: d.Size})
			}
		}
		if req.WriteOffset != int64(len(data)) {
			return status.Errorf(codes.InvalidArgument, "write at offset %d, have %d bytes", req.WriteOffset, len(data))
		}
		data = append(data, req.Data...)
		if req.FinishWrite {
			if err := srv.put(d, data); err != nil {
				return err
			}
			return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: int64(len(data))})
		}
	}
}

func (srv *testREAPI) GetActionResult(ctx context.Context, req *repb.GetActionResultRequest) (*repb.ActionResult, error) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if ar, ok := srv.ac[req.ActionDigest.GetHash()]; ok {
		return ar, nil
	}
	return nil, status.Error(codes.NotFound, "no such action result")
}

func (srv *testREAPI) UpdateActionResult(ctx context.Context, req *repb.UpdateActionResultRequest) (*repb.ActionResult, error) {
	if !srv.updateEnabled {
		return nil, status.Error(codes.PermissionDenied, "read-only")
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.ac[req.ActionDigest.GetHash()] = req.ActionResult
	return req.ActionResult, nil
}

// requireAuthorization is a server option refusing calls whose authorization
// header is not want.
func requireAuthorization(want string) []grpc.ServerOption {
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if got := md.Get("authorization"); len(got) != 1 || got[0] != want {
			return status.Error(codes.Unauthenticated, "bad or missing credentials")
		}
		return nil
	}
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// testServerTLS is the server option of p's server certificate, requiring a
// client certificate signed by p's CA when mutual is set (as `gantry cache
// serve --client-ca` does).
func testServerTLS(t testing.TB, p *testpki.PKI, mutual bool) grpc.ServerOption {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if mutual {
		pem, err := os.ReadFile(p.CA)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		cfg.ClientCAs.AppendCertsFromPEM(pem)
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return grpc.Creds(credentials.NewTLS(cfg))
}
