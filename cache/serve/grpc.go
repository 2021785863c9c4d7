package serve

import (
	"context"
	"crypto/x509"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	smpb "github.com/bazelbuild/remote-apis/build/bazel/semver"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/internal/bstpb"
	"github.com/gantry-build/gantry/cache/internal/leasepb"
	"github.com/gantry-build/gantry/cache/remote"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// REAPI v2 on the server's store: Capabilities, ContentAddressableStorage,
// ByteStream (with resumable writes) and ActionCache.

// batchLimit is the batch size stated in Capabilities and enforced.
const batchLimit = 4 << 20

// The server's keep-alive: a connection silent for keepalivePing is pinged, and
// dropped if the ping is not answered within keepaliveAck. gantry's client pings
// every 30 s while a call is open (remote's keepalive), Bazel's every
// --grpc_keepalive_time; a client pinging more often than keepaliveMinClientPing
// is abuse (GOAWAY).
const (
	keepalivePing          = time.Minute
	keepaliveAck           = 20 * time.Second
	keepaliveMinClientPing = 10 * time.Second
)

type grpcService struct {
	repb.UnimplementedContentAddressableStorageServer
	repb.UnimplementedActionCacheServer
	repb.UnimplementedCapabilitiesServer
	bspb.UnimplementedByteStreamServer
	s *Server
}

type clientKey struct{}

// grpcIdentity is the client an interceptor identified.
func grpcIdentity(ctx context.Context) identity {
	id, _ := ctx.Value(clientKey{}).(identity)
	return id
}

// grpcClient is the name of the client an interceptor identified.
func grpcClient(ctx context.Context) string { return grpcIdentity(ctx).name }

// grpcWrites are the methods that change the store.
var grpcWrites = map[string]bool{
	"/build.bazel.remote.execution.v2.ContentAddressableStorage/BatchUpdateBlobs": true,
	"/build.bazel.remote.execution.v2.ActionCache/UpdateActionResult":             true,
	"/google.bytestream.ByteStream/Write":                                         true,
	"/google.bytestream.ByteStream/QueryWriteStatus":                              true,
	"/gantry.lease.v1.Leases/Acquire":                                             true,
	"/gantry.lease.v1.Leases/Release":                                             true,
	"/buildstream.v2.ReferenceStorage/UpdateReference":                            true,
}

func (s *Server) grpcAuthorize(ctx context.Context, method string) (context.Context, error) {
	if strings.HasPrefix(method, healthService) {
		return ctx, nil // probes need no credentials
	}
	var authz string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authz = v[0]
		}
	}
	var certs []*x509.Certificate
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			certs = ti.State.PeerCertificates
		}
	}
	var addr string
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	id := s.auth.identify(authz, addr, certs)
	setClient(ctx, id.name)
	if d := s.authorize(id, grpcWrites[method]); d != nil {
		return nil, status.Error(d.grpc, d.msg)
	}
	return context.WithValue(ctx, clientKey{}, id), nil
}

type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w wrappedStream) Context() context.Context { return w.ctx }

func (s *Server) newGRPCServer() *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(batchLimit + 1<<20),
		grpc.MaxConcurrentStreams(uint32(4 * s.opts.MaxStreams)),
		grpc.StatsHandler(grpcObserver{s}),
		newServerCodec(), // grpccodec.go: ByteStream reads without copies
		grpc.UnknownServiceHandler(s.grpcUnknown),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx, err := s.grpcAuthorize(ctx, info.FullMethod)
			if err != nil {
				return nil, err
			}
			resp, err := h(ctx, req)
			return s.grpcReply(info.FullMethod, resp, err)
		}),
		grpc.ChainStreamInterceptor(s.grpcObserveStream, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx, err := s.grpcAuthorize(ss.Context(), info.FullMethod)
			if err != nil {
				return err
			}
			return s.grpcRedact(info.FullMethod, h(srv, wrappedStream{ss, ctx}))
		}),
		grpc.ConnectionTimeout(s.opts.HeaderTimeout),
		grpc.InitialWindowSize(remote.GRPCStreamWindow), grpc.InitialConnWindowSize(remote.GRPCConnWindow),
		grpc.ReadBufferSize(remote.GRPCBufferSize), grpc.WriteBufferSize(remote.GRPCBufferSize), grpc.SharedWriteBuffer(true),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.opts.IdleTimeout, Time: keepalivePing, Timeout: keepaliveAck}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinClientPing, PermitWithoutStream: true}),
	}
	if s.tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tlsConf)))
	}
	g := grpc.NewServer(opts...)
	svc := &grpcService{s: s}
	repb.RegisterCapabilitiesServer(g, svc)
	repb.RegisterContentAddressableStorageServer(g, svc)
	repb.RegisterActionCacheServer(g, svc)
	bspb.RegisterByteStreamServer(g, svc)
	leasepb.RegisterLeasesServer(g, &leaseService{s: s})
	bstpb.RegisterReferenceStorageServer(g, &refStorage{s: s}) // BuildStream 1.x: refstorage.go
	s.registerHealth(g)
	s.registerAsset(g)
	return g
}

// grpcError maps a store error to a status.
func grpcError(err error) error {
	switch {
	case errors.Is(err, cache.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, cache.ErrDigestMismatch), errors.Is(err, cache.ErrCorrupt):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, errFenced):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func checkDigestFunction(f repb.DigestFunction_Value) error {
	if f != repb.DigestFunction_UNKNOWN && f != repb.DigestFunction_SHA256 {
		return status.Errorf(codes.InvalidArgument, "digest function %s: this server stores SHA-256 only", f)
	}
	return nil
}

func (g *grpcService) GetCapabilities(ctx context.Context, _ *repb.GetCapabilitiesRequest) (*repb.ServerCapabilities, error) {
	return &repb.ServerCapabilities{
		CacheCapabilities: &repb.CacheCapabilities{
			DigestFunctions:                 []repb.DigestFunction_Value{repb.DigestFunction_SHA256},
			ActionCacheUpdateCapabilities:   &repb.ActionCacheUpdateCapabilities{UpdateEnabled: true},
			MaxBatchTotalSizeBytes:          batchLimit,
			SymlinkAbsolutePathStrategy:     repb.SymlinkAbsolutePathStrategy_ALLOWED,
			SupportedCompressors:            nil,
			SupportedBatchUpdateCompressors: nil,
		},
		LowApiVersion:  &smpb.SemVer{Major: 2},
		HighApiVersion: &smpb.SemVer{Major: 2, Minor: 3},
	}, nil
}

func (g *grpcService) FindMissingBlobs(ctx context.Context, req *repb.FindMissingBlobsRequest) (*repb.FindMissingBlobsResponse, error) {
	if err := checkDigestFunction(req.DigestFunction); err != nil {
		return nil, err
	}
	resp := &repb.FindMissingBlobsResponse{}
	for _, p := range req.BlobDigests {
		d := cache.DigestFromProto(p)
		if d.Validate() != nil {
			return nil, status.Errorf(codes.InvalidArgument, "bad digest %s/%d", p.Hash, p.SizeBytes)
		}
		if d.Size == 0 {
			continue // the empty blob is always present
		}
		if g.s.c.HasBlob(d) {
			g.s.c.TouchBlob(d)
			g.s.metrics.lookup(true)
		} else {
			g.s.metrics.lookup(false)
			resp.MissingBlobDigests = append(resp.MissingBlobDigests, p)
		}
	}
	return resp, nil
}

func (g *grpcService) BatchUpdateBlobs(ctx context.Context, req *repb.BatchUpdateBlobsRequest) (*repb.BatchUpdateBlobsResponse, error) {
	if err := checkDigestFunction(req.DigestFunction); err != nil {
		return nil, err
	}
	client := grpcClient(ctx)
	var total int64
	for _, r := range req.Requests {
		total += int64(len(r.Data))
	}
	release, err := g.s.admit.acquire(ctx, client, total)
	if err != nil {
		return nil, grpcError(err)
	}
	defer release(total)
	resp := &repb.BatchUpdateBlobsResponse{}
	for _, r := range req.Requests {
		st := status.New(codes.OK, "")
		if r.Compressor != repb.Compressor_IDENTITY {
			st = status.New(codes.InvalidArgument, "compressed uploads are not supported")
		} else if _, err := g.s.c.ImportBlob(cache.DigestFromProto(r.Digest), strings.NewReader(string(r.Data))); err != nil {
			st, _ = status.FromError(grpcError(err))
		} else {
			g.s.evictor.wrote(int64(len(r.Data)))
		}
		resp.Responses = append(resp.Responses, &repb.BatchUpdateBlobsResponse_Response{Digest: r.Digest, Status: st.Proto()})
	}
	return resp, nil
}

func (g *grpcService) BatchReadBlobs(ctx context.Context, req *repb.BatchReadBlobsRequest) (*repb.BatchReadBlobsResponse, error) {
	if err := checkDigestFunction(req.DigestFunction); err != nil {
		return nil, err
	}
	var want int64
	for _, p := range req.Digests {
		// A negative size is refused for its blob below; neither it nor a
		// huge one may take the sum under the limit.
		want += min(max(p.SizeBytes, 0), batchLimit+1)
	}
	if want > batchLimit {
		return nil, status.Errorf(codes.InvalidArgument, "batch of %s is over the limit of %s: use ByteStream", limitText(want), limitText(batchLimit))
	}
	client := grpcClient(ctx)
	release, err := g.s.admit.acquire(ctx, client, want)
	if err != nil {
		return nil, grpcError(err)
	}
	var sent int64
	defer func() { release(sent) }()
	resp := &repb.BatchReadBlobsResponse{}
	for _, p := range req.Digests {
		d := cache.DigestFromProto(p)
		data, err := g.s.readBatched(d)
		g.s.metrics.lookup(err == nil)
		st := status.New(codes.OK, "")
		if servedCorrupt(err) {
			st = status.New(codes.DataLoss, corruptStatus(d))
			data = nil
		} else if err != nil {
			st, _ = status.FromError(grpcError(err))
			data = nil
		} else {
			g.s.touchRead(d)
		}
		sent += int64(len(data))
		resp.Responses = append(resp.Responses, &repb.BatchReadBlobsResponse_Response{Digest: p, Data: data, Status: st.Proto()})
	}
	return resp, nil
}

func (g *grpcService) GetTree(req *repb.GetTreeRequest, stream repb.ContentAddressableStorage_GetTreeServer) error {
	if err := checkDigestFunction(req.DigestFunction); err != nil {
		return err
	}
	queue := []*repb.Digest{req.RootDigest}
	seen := map[cache.Digest]bool{}
	resp := &repb.GetTreeResponse{}
	size := 0
	for len(queue) > 0 {
		d := cache.DigestFromProto(queue[0])
		queue = queue[1:]
		if seen[d] {
			continue
		}
		seen[d] = true
		data, err := g.s.readBatched(d)
		if servedCorrupt(err) {
			return status.Error(codes.DataLoss, corruptStatus(d))
		}
		if err != nil {
			return grpcError(err)
		}
		dir := &repb.Directory{}
		if err := proto.Unmarshal(data, dir); err != nil {
			return status.Errorf(codes.Internal, "directory %s: %v", d, err)
		}
		for _, sub := range dir.Directories {
			queue = append(queue, sub.Digest)
		}
		if size+len(data) > batchLimit && len(resp.Directories) > 0 {
			if err := stream.Send(resp); err != nil {
				return err
			}
			resp, size = &repb.GetTreeResponse{}, 0
		}
		resp.Directories = append(resp.Directories, dir)
		size += len(data)
	}
	return stream.Send(resp)
}

// parseResource reads the digest out of a ByteStream resource name:
// "[INSTANCE/]blobs/HASH/SIZE" (reads) or "[INSTANCE/]uploads/UUID/blobs/HASH/SIZE[/…]" (writes).
func parseResource(name string, write bool) (cache.Digest, error) {
	parts := strings.Split(name, "/")
	for i := 0; i+2 < len(parts); i++ {
		if parts[i] == "compressed-blobs" {
			return cache.Digest{}, status.Errorf(codes.Unimplemented, "resource %s: compressed blobs are not supported", name)
		}
		if parts[i] != "blobs" || (write && (i < 2 || parts[i-2] != "uploads")) {
			continue
		}
		size, err := strconv.ParseInt(parts[i+2], 10, 64)
		d := cache.Digest{Hash: parts[i+1], Size: size}
		if err == nil {
			err = d.Validate()
		}
		if err != nil {
			return cache.Digest{}, status.Errorf(codes.InvalidArgument, "resource %s: %v", name, err)
		}
		return d, nil
	}
	return cache.Digest{}, status.Errorf(codes.InvalidArgument, "resource %s: not a blob resource name", name)
}

// readChunk is the most data one ByteStream ReadResponse carries: a message
// of 1 MiB once encoded (the data's tag and length take 4 bytes), the largest
// gRPC's buffer pool keeps. A message of 1 MiB of data is one byte over it:
// each was a new buffer, cleared and collected, on the server (the encoded
// message) and on the client (the received one). Larger messages would be
// the same, and over the 4 MiB a client takes by default.
const readChunk = 1<<20 - 16

func (g *grpcService) Read(req *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error {
	d, err := parseResource(req.ResourceName, false)
	if err != nil {
		return err
	}
	client := grpcClient(stream.Context())
	f, err := g.s.c.OpenBlob(d)
	g.s.metrics.lookup(err == nil)
	if err != nil {
		return grpcError(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil {
		g.s.touchBlob(d, fi.ModTime())
	} else {
		g.s.c.TouchBlob(d)
	}
	if req.ReadOffset < 0 || req.ReadOffset > d.Size {
		return status.Errorf(codes.OutOfRange, "read offset %d of blob %s", req.ReadOffset, d)
	}
	n := d.Size - req.ReadOffset
	if req.ReadLimit > 0 {
		n = min(n, req.ReadLimit)
	}
	release, err := g.s.admit.acquire(stream.Context(), client, n)
	if err != nil {
		return grpcError(err)
	}
	var sent int64
	defer func() { release(sent) }()
	sent, err = sendBlob(f, d, req.ReadOffset, n, readChunk, streamSink{stream})
	if servedCorrupt(err) {
		g.s.quarantine(f, d, err)
		return status.Error(codes.DataLoss, corruptStatus(d))
	}
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return err // from Send
		}
		return grpcError(err)
	}
	return nil
}

func (g *grpcService) Write(stream bspb.ByteStream_WriteServer) error {
	ctx := stream.Context()
	client := grpcClient(ctx)
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	name := first.ResourceName
	d, err := parseResource(name, true)
	if err != nil {
		return err
	}
	if g.s.opts.MaxBlobSize > 0 && d.Size > g.s.opts.MaxBlobSize {
		g.s.metrics.rejected.Inc()
		return status.Errorf(codes.InvalidArgument, "blob %s is over the server's limit of %s", d, limitText(g.s.opts.MaxBlobSize))
	}
	if g.s.c.HasBlob(d) {
		// Already stored: answer at once, as REAPI allows.
		g.s.c.TouchBlob(d)
		return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: d.Size})
	}
	p, ok, err := g.s.uploads.take(name, func() (*cache.BlobImport, error) { return g.s.c.StartBlobImport(d) })
	if err != nil {
		return grpcError(err)
	}
	if !ok {
		return status.Errorf(codes.Aborted, "resource %s: another stream is writing it", name)
	}
	release, err := g.s.admit.acquire(ctx, client, d.Size-p.u.Received())
	if err != nil {
		g.s.uploads.park(p)
		return grpcError(err)
	}
	start := p.u.Received()
	defer func() {
		release(p.u.Received() - start)
	}()
	msg := first
	for {
		if msg.WriteOffset != p.u.Received() {
			g.s.uploads.park(p)
			return status.Errorf(codes.InvalidArgument, "resource %s: write at offset %d, but %d bytes are committed", name, msg.WriteOffset, p.u.Received())
		}
		if _, err := p.u.Write(msg.Data); err != nil {
			g.s.uploads.done(name)
			p.u.Abort()
			return grpcError(err)
		}
		if msg.FinishWrite {
			break
		}
		if msg, err = stream.Recv(); err != nil {
			// Broken off: keep what arrived for QueryWriteStatus and a resumed write.
			g.s.uploads.park(p)
			return err
		}
	}
	g.s.uploads.done(name)
	if err := p.u.Commit(); err != nil {
		g.s.metrics.rejected.Inc()
		return grpcError(err)
	}
	g.s.evictor.wrote(d.Size)
	return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: d.Size})
}

func (g *grpcService) QueryWriteStatus(ctx context.Context, req *bspb.QueryWriteStatusRequest) (*bspb.QueryWriteStatusResponse, error) {
	d, err := parseResource(req.ResourceName, true)
	if err != nil {
		return nil, err
	}
	if g.s.c.HasBlob(d) {
		return &bspb.QueryWriteStatusResponse{CommittedSize: d.Size, Complete: true}, nil
	}
	if n := g.s.uploads.committed(req.ResourceName); n >= 0 {
		return &bspb.QueryWriteStatusResponse{CommittedSize: n}, nil
	}
	return nil, status.Errorf(codes.NotFound, "resource %s: no write in progress", req.ResourceName)
}

func (g *grpcService) GetActionResult(ctx context.Context, req *repb.GetActionResultRequest) (*repb.ActionResult, error) {
	key := cache.DigestFromProto(req.ActionDigest)
	if err := key.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "action digest: %v", err)
	}
	ar, _, err := g.s.lookupAC(key)
	g.s.metrics.lookup(err == nil)
	if err != nil {
		return nil, grpcError(err)
	}
	return ar, nil
}

func (g *grpcService) UpdateActionResult(ctx context.Context, req *repb.UpdateActionResultRequest) (*repb.ActionResult, error) {
	key := cache.DigestFromProto(req.ActionDigest)
	if err := key.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "action digest: %v", err)
	}
	var token uint64
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(remote.FencingMetadata); len(v) > 0 {
			t, err := strconv.ParseUint(v[0], 10, 64)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "%s: %v", remote.FencingMetadata, err)
			}
			token = t
		}
	}
	data, err := proto.Marshal(req.ActionResult)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "action result: %v", err)
	}
	if _, err := g.s.updateAC(key, data, token); err != nil {
		g.s.metrics.rejected.Inc()
		return nil, grpcError(err)
	}
	return req.ActionResult, nil
}
