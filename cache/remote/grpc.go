package remote

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/internal/bstpb"
	"github.com/gantry-build/gantry/cache/internal/leasepb"
	"github.com/gantry-build/gantry/internal/netx"
	"github.com/gantry-build/gantry/internal/version"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A grpc(s):// remote (DESIGN.md §7): REAPI v2's CAS, ByteStream and
// ActionCache; or, on a server without an ActionCache, BuildStream 1.x's
// ReferenceStorage (bst-artifact-server), where an artifact is a reference to
// a Directory (grpc_refs.go). Blob transfers are in grpc_blobs.go.

const (
	// grpcDefaultBatch is the batch limit when the server states none; it is
	// also the most we ask for, gRPC's default message size limit.
	grpcDefaultBatch = 4 << 20
)

// entryAPI is how a server keeps artifact entries.
type entryAPI int

const (
	apiActionCache entryAPI = iota + 1 // REAPI GetActionResult / UpdateActionResult
	apiReferences                      // buildstream.v2.ReferenceStorage
)

func (a entryAPI) String() string {
	switch a {
	case apiActionCache:
		return "action cache"
	case apiReferences:
		return "BuildStream reference storage"
	}
	return "unknown"
}

// grpcStore is the Store of a grpc(s):// remote. It is safe for
// concurrent use.
type grpcStore struct {
	name     string // URL without userinfo
	instance string
	idle     time.Duration // bounds each unary call and the wait for each stream message (Spec.IdleTimeout): a stalled server fails the call instead of hanging the job

	conn   *grpc.ClientConn
	caps   repb.CapabilitiesClient
	cas    repb.ContentAddressableStorageClient
	ac     repb.ActionCacheClient
	bs     bspb.ByteStreamClient
	refs   bstpb.ReferenceStorageClient
	leases leasepb.LeasesClient

	// ctx is the store's lifetime, for batch calls made on behalf of several
	// callers; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	// certAsked is set when a TLS server asked for a client certificate and
	// none is configured: its refusals then read as connection failures.
	certAsked atomic.Bool

	mu   sync.Mutex
	info *grpcInfo // what the server said of itself; nil until asked successfully
}

// grpcInfo is what a server offers, asked once (Capabilities, then which
// entry API answers).
type grpcInfo struct {
	batchLimit int64    // largest Batch*Blobs request or response, in bytes
	api        entryAPI // where artifact entries live
	canUpdate  bool     // the entry API accepts updates from us
	reads      *batcher // small-blob reads, packed into BatchReadBlobs
	// noBatchReads is set once BatchReadBlobs answered UNIMPLEMENTED: reads go
	// over ByteStream.
	noBatchReads atomic.Bool
	writes       *batcher // small-blob writes, packed into BatchUpdateBlobs
}

// The client's keep-alive: a call that hears nothing for keepalivePing pings the
// server, and a peer that does not answer within keepaliveAck is gone: the
// connection drops and the next call dials again. Servers refuse pings more
// often than they allow (cache serve: every 10 s).
const (
	keepalivePing = 30 * time.Second
	keepaliveAck  = 20 * time.Second
)

// newGRPCStore returns the Store of a grpc(s):// remote. It does not
// connect: the first call does.
func newGRPCStore(spec Spec, u *url.URL) (Store, error) {
	s := &grpcStore{name: spec.Display(), instance: spec.Instance, idle: spec.idleTimeout()}
	conn, err := dialGRPC(spec, u, &s.certAsked)
	if err != nil {
		return nil, err
	}
	s.conn = conn
	s.caps, s.cas, s.ac = repb.NewCapabilitiesClient(conn), repb.NewContentAddressableStorageClient(conn), repb.NewActionCacheClient(conn)
	s.bs, s.refs = bspb.NewByteStreamClient(conn), bstpb.NewReferenceStorageClient(conn)
	s.leases = leasepb.NewLeasesClient(conn)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// DialGRPC returns a connection to the grpc(s):// remote of spec, secured and
// authenticated as a grpc remote's (server-ca, client-cert/key, token-file or
// the URL's user:password), with opts added (interceptors). It does not
// connect: the first call does. For clients of other REAPI services on the
// same servers (remote execution).
func DialGRPC(spec Spec, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	u, err := url.Parse(spec.URL)
	if err != nil {
		return nil, fmt.Errorf("remote %s: invalid url: %w", RedactURL(spec.URL), err)
	}
	if u.Scheme != "grpc" && u.Scheme != "grpcs" {
		return nil, fmt.Errorf("remote %s: unsupported scheme %q: use grpc:// or grpcs://", spec.Display(), u.Scheme)
	}
	return dialGRPC(spec, u, new(atomic.Bool), opts...)
}

// dialGRPC is DialGRPC of a parsed URL; certAsked is set when a TLS server
// asks for a client certificate and none is configured. spec.DialOptions
// come before opts.
func dialGRPC(spec Spec, u *url.URL, certAsked *atomic.Bool, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	name := spec.Display()
	if u.Port() == "" {
		return nil, fmt.Errorf("remote %s: no port: write %s://HOST:PORT", name, u.Scheme)
	}
	if strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return nil, fmt.Errorf("remote %s: a %s:// url is HOST:PORT only; set the REAPI instance name with the remote's instance key", name, u.Scheme)
	}
	creds, err := transport(spec, u, certAsked)
	if err != nil {
		return nil, err
	}
	auth, err := grpcAuthorization(spec, u)
	if err != nil {
		return nil, err
	}
	all := []grpc.DialOption{
		grpc.WithTransportCredentials(creds), grpc.WithUserAgent(version.UserAgent()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepalivePing, Timeout: keepaliveAck}),
	}
	if auth != "" {
		all = append(all, grpc.WithPerRPCCredentials(auth))
	}
	all = append(all, grpc.WithInitialWindowSize(GRPCStreamWindow), grpc.WithInitialConnWindowSize(GRPCConnWindow),
		grpc.WithReadBufferSize(GRPCBufferSize), grpc.WithWriteBufferSize(GRPCBufferSize), grpc.WithSharedWriteBuffer(true))
	all = append(append(all, spec.DialOptions...), opts...)
	conn, err := grpc.NewClient(u.Host, all...)
	if err != nil {
		return nil, fmt.Errorf("remote %s: %w", name, err)
	}
	return conn, nil
}

// transport returns the connection security of the remote: TLS for grpcs://
// (with its server-ca and client certificate, else the system's roots),
// plaintext for grpc://.
func transport(spec Spec, u *url.URL, certAsked *atomic.Bool) (credentials.TransportCredentials, error) {
	if u.Scheme != "grpcs" {
		if spec.ServerCA != "" || spec.ClientCert != "" || spec.ClientKey != "" {
			return nil, fmt.Errorf("remote %s: server-ca, client-cert and client-key need TLS: use grpcs://", spec.Display())
		}
		return insecure.NewCredentials(), nil
	}
	cfg, err := tlsConfig(spec)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12} // the system's roots
	}
	if len(cfg.Certificates) == 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			certAsked.Store(true)
			return &tls.Certificate{}, nil // none: the server may still accept us
		}
	}
	return credentials.NewTLS(cfg), nil
}

// grpcAuthorization is the authorization header every call carries: a bearer
// token from token-file, or basic auth from the URL's userinfo ("" for none).
func grpcAuthorization(spec Spec, u *url.URL) (grpcAuth, error) {
	token, err := readToken(spec)
	if err != nil {
		return "", err
	}
	switch {
	case token != "" && u.User != nil:
		from := "token-file"
		if spec.TokenEnv != "" {
			from = spec.TokenEnv
		}
		return "", fmt.Errorf("remote %s: both %s and a user:password in the url: keep one", spec.Display(), from)
	case token != "":
		return grpcAuth("Bearer " + token), nil
	case u.User != nil:
		pass, _ := u.User.Password()
		return grpcAuth("Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass))), nil
	}
	return "", nil
}

// grpcAuth is an authorization header value sent with every call. It is sent
// over plaintext grpc:// too when the user configured it so.
type grpcAuth string

func (a grpcAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(a)}, nil
}

func (a grpcAuth) RequireTransportSecurity() bool { return false }

func (s *grpcStore) Name() string { return s.name }

func (s *grpcStore) Close() error {
	s.cancel()
	return s.conn.Close()
}

// server returns what the server offers, asking it on the first call. A
// failure is not remembered: the next call asks again.
func (s *grpcStore) server(ctx context.Context) (*grpcInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info != nil {
		return s.info, nil
	}
	info, err := s.askServer(ctx)
	if err != nil {
		return nil, err
	}
	info.reads = newBatcher(info.batchLimit, len(s.instance), s.sendReads)
	info.writes = newBatcher(info.batchLimit, len(s.instance), s.sendWrites)
	s.info = info
	return info, nil
}

// askServer asks Capabilities for the batch limit and digest function, then
// finds where entries live: an ActionCache answers a lookup with NOT_FOUND; a
// server without one answers UNIMPLEMENTED, and then ReferenceStorage's Status
// must answer.
func (s *grpcStore) askServer(ctx context.Context) (*grpcInfo, error) {
	info := &grpcInfo{batchLimit: grpcDefaultBatch, canUpdate: true}
	var caps *repb.ServerCapabilities
	err := s.call(ctx, "asking its capabilities", func(ctx context.Context) (err error) {
		caps, err = s.caps.GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: s.instance})
		return err
	})
	switch {
	case err == nil:
		cc := caps.GetCacheCapabilities()
		if l := cc.GetMaxBatchTotalSizeBytes(); l > 0 && l < info.batchLimit {
			info.batchLimit = l
		}
		if fns := cc.GetDigestFunctions(); len(fns) > 0 && !slices.Contains(fns, repb.DigestFunction_SHA256) {
			return nil, &Error{Remote: s.name, Op: "asking its capabilities", Kind: Refused,
				Err: fmt.Errorf("the server does not offer SHA-256 digests (it offers %v)", fns)}
		}
		info.canUpdate = cc.GetActionCacheUpdateCapabilities().GetUpdateEnabled()
	case status.Code(err) != codes.Unimplemented: // an old server may lack Capabilities: defaults
		return nil, err
	}

	probe := &repb.GetActionResultRequest{InstanceName: s.instance, ActionDigest: Key("").Proto()}
	err = s.call(ctx, "looking for an action cache", func(ctx context.Context) error {
		_, err := s.ac.GetActionResult(ctx, probe)
		return err
	})
	if err == nil || errors.Is(err, cache.ErrNotFound) {
		info.api = apiActionCache
		return info, nil
	}
	if status.Code(err) != codes.Unimplemented {
		return nil, err
	}
	var st *bstpb.StatusResponse
	err = s.call(ctx, "looking for BuildStream's reference storage", func(ctx context.Context) (err error) {
		st, err = s.refs.Status(ctx, &bstpb.StatusRequest{InstanceName: s.instance})
		return err
	})
	if status.Code(err) == codes.Unimplemented {
		return nil, &Error{Remote: s.name, Op: "looking for an artifact index", Kind: Refused,
			Err: errors.New("the server offers neither a REAPI action cache nor BuildStream's reference storage: is it an artifact cache?")}
	}
	if err != nil {
		return nil, err
	}
	info.api = apiReferences
	info.canUpdate = st.GetAllowUpdates()
	return info, nil
}

// GetEntry reads the artifact entry of key from the action cache or the
// reference storage.
func (s *grpcStore) GetEntry(ctx context.Context, key string) (*Entry, error) {
	info, err := s.server(ctx)
	if err != nil {
		return nil, err
	}
	op := "reading the artifact entry of key " + key
	if info.api == apiReferences {
		return s.getReference(ctx, op, key)
	}
	var ar *repb.ActionResult
	err = s.call(ctx, op, func(ctx context.Context) (err error) {
		ar, err = s.ac.GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: s.instance, ActionDigest: Key(key).Proto()})
		return err
	})
	if err != nil {
		return nil, err
	}
	e, err := actionResultEntry(ar)
	if err != nil {
		return nil, &Error{Remote: s.name, Op: op, Kind: Corrupt, Err: err}
	}
	return e, nil
}

// UpdateEntry writes the artifact entry of key.
func (s *grpcStore) UpdateEntry(ctx context.Context, key string, e *Entry) error {
	info, err := s.server(ctx)
	if err != nil {
		return err
	}
	op := "updating the artifact entry of key " + key
	if !info.canUpdate {
		return &Error{Remote: s.name, Op: op, Kind: Refused,
			Err: fmt.Errorf("the server's %s does not accept updates (is it read-only? bst-artifact-server needs --enable-push)", info.api)}
	}
	if info.api == apiReferences {
		return s.updateReference(ctx, op, key, e)
	}
	req := &repb.UpdateActionResultRequest{InstanceName: s.instance, ActionDigest: Key(key).Proto(), ActionResult: entryActionResult(e)}
	if t := fencingToken(ctx); t != 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, FencingMetadata, strconv.FormatUint(t, 10))
	}
	return s.call(ctx, op, func(ctx context.Context) error {
		_, err := s.ac.UpdateActionResult(ctx, req)
		return err
	})
}

// call runs one unary call under the idle deadline and describes its failure.
func (s *grpcStore) call(ctx context.Context, op string, f func(ctx context.Context) error) error {
	ctx, _, stop := s.watch(ctx)
	defer stop()
	return s.fail(ctx, op, f(ctx))
}

// stallError is the cause of a call canceled because nothing was received or
// sent for the idle timeout.
type stallError struct{ idle time.Duration }

func (e *stallError) Error() string {
	return fmt.Sprintf("stalled: nothing received or sent for %v", e.idle)
}

// watch returns a context that is canceled when kick is not called for s.idle,
// with a stallError as its cause; stop releases it.
func (s *grpcStore) watch(ctx context.Context) (_ context.Context, kick, stop func()) {
	ctx, w := netx.WithWatchdog(ctx, s.idle, &stallError{s.idle})
	return ctx, w.Kick, w.Stop
}

// fail describes the failure err of a call made under ctx: a *Error
// classified by its gRPC code, or, for NOT_FOUND, an error wrapping
// ErrNotFound. A call canceled by ctx (a stall, or the caller giving up) is
// Unavailable with the cancellation's cause.
func (s *grpcStore) fail(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return &Error{Remote: s.name, Op: op, Kind: Unavailable, Err: context.Cause(ctx)}
	}
	st, ok := status.FromError(err)
	if !ok {
		return &Error{Remote: s.name, Op: op, Kind: Unavailable, Err: err}
	}
	err = statusError{st}
	kind := Refused
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("remote %s: %s: %w (%w)", s.name, op, cache.ErrNotFound, err)
	case codes.Unauthenticated, codes.PermissionDenied:
		kind = Auth
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.Internal, codes.Unknown, codes.Canceled:
		kind = Unavailable
		if k, ok := tlsFailure(st.Message()); ok {
			kind = k
		} else if prefaceRefused(st.Message()) && strings.HasPrefix(s.name, "grpc://") {
			// The server hung up on the plaintext HTTP/2 preface (closed or reset
			// the connection, depending on timing): a TLS server refusing what is
			// not a TLS handshake. Retrying cannot mend it.
			kind = Refused
			err = fmt.Errorf("the server closed the connection at once, refusing a connection without TLS: if it serves TLS, use grpcs:// (%w)", err)
		} else if s.certAsked.Load() {
			kind = Auth
			err = fmt.Errorf("%w (the server asked for a client certificate and none is set)", err)
		}
	case codes.DataLoss:
		kind = Corrupt
	}
	return &Error{Remote: s.name, Op: op, Kind: kind, Err: err}
}

// tlsFailure classifies a connection failure that retrying cannot mend: the
// server's certificate is not trusted (Refused), or the server refused
// ours (Auth).
func tlsFailure(msg string) (ErrorKind, bool) {
	switch {
	case strings.Contains(msg, "x509:"):
		return Refused, true
	case strings.Contains(msg, "tls: certificate required"), strings.Contains(msg, "tls: bad certificate"),
		strings.Contains(msg, "tls: unknown certificate authority"):
		return Auth, true
	}
	return 0, false
}

// statusError shows a gRPC status as "Code: message" and keeps it for
// status.FromError and status.Code.
type statusError struct{ st *status.Status }

func (e statusError) Error() string              { return e.st.Code().String() + ": " + e.st.Message() }
func (e statusError) GRPCStatus() *status.Status { return e.st }

// prefaceRefused says whether a gRPC error message says the server ended the
// connection before its HTTP/2 preface: closed (EOF) or reset, as a TLS server
// answers a plaintext client.
func prefaceRefused(msg string) bool {
	return strings.Contains(msg, "error reading server preface: EOF") ||
		strings.Contains(msg, "error reading server preface: read tcp") && strings.Contains(msg, "connection reset by peer") ||
		strings.Contains(msg, "error reading server preface: connection reset by peer")
}
