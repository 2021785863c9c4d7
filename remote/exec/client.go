// Package exec is gantry's REAPI v2 execution client (DESIGN.md §12): what a
// remote build is (an Action whose input root is merged from the CAS trees of
// the dependencies and the sources, whose Command is the element's commands as
// one labelled `sh -e -c` script) and running it on an execution service:
// Capabilities, GetActionResult, the upload of missing blobs (through
// cache/remote's CAS code), Execute → WaitExecution → Execute again,
// CancelOperation, and the import of the outputs into the local CAS.
// Importers name it rexec.
package exec

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// RequestMetadataKey is the gRPC header carrying REAPI's RequestMetadata.
const RequestMetadataKey = "build.bazel.remote.execution.v2.requestmetadata-bin"

// Client is a connection to an execution service and its CAS and action
// cache. It is safe for concurrent use: one Client serves a session.
type Client struct {
	cfg        Config
	name       string // the execution service's URL without userinfo
	instance   string // of the execution service
	acInstance string // of the action cache
	invocation string // RequestMetadata's tool_invocation_id: the session's

	conns []*grpc.ClientConn
	exec  repb.ExecutionClient
	ops   longrunningpb.OperationsClient
	ac    repb.ActionCacheClient
	cas   remote.Store

	// BatchLimit is the largest batch the CAS takes, from Capabilities (0:
	// none stated).
	BatchLimit int64

	retryBase time.Duration // the first backoff wait; doubled per attempt
	attempts  int           // how many times an action is sent before its infrastructure failure is final

	watch  connWatch // its connections, made and ended
	dialed int32     // how many connections Dial made
	closed atomic.Bool
}

// toolName and toolVersion are RequestMetadata's tool_details.
const toolName = "gantry"

func toolVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}

// DialSession connects to the services of cfg and asks the execution service's
// Capabilities: SHA-256 digests and execution enabled, or a clear error. Its calls
// all carry the session's invocation id (RequestMetadata's tool_invocation_id): one
// per gantry invocation, as REAPI intends, however many clients its job workers
// dial. It connects every connection before it returns (the execution service's,
// the action cache's, the CAS's), from the calling goroutine: a worker keeps the
// client for its later builds (job.Reporter.Keep), and what a connection starts is
// then the worker's.
func DialSession(ctx context.Context, cfg Config, invocation string) (*Client, error) {
	if cfg.Execution.URL == "" {
		return nil, errors.New("remote execution: no execution-service url")
	}
	if cfg.Wrap != "" && cfg.Wrap != WrapBwrap {
		return nil, fmt.Errorf("remote execution: wrap = %q: the only wrapper is %q", cfg.Wrap, WrapBwrap)
	}
	cl := &Client{cfg: cfg, name: remote.RedactURL(cfg.Execution.URL), instance: cfg.Execution.Instance,
		invocation: invocation, retryBase: time.Second, attempts: 4}
	// No idle mode: a channel leaving it would start its resolver from the
	// goroutine of a call, a build job's.
	opts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(cl.unaryMetadata), grpc.WithChainStreamInterceptor(cl.streamMetadata),
		grpc.WithStatsHandler(&cl.watch), grpc.WithIdleTimeout(0)}
	conn, err := remote.DialGRPC(cfg.Execution, opts...)
	if err != nil {
		return nil, fmt.Errorf("remote execution: %w", err)
	}
	cl.conns = append(cl.conns, conn)
	cl.exec, cl.ops, cl.ac = repb.NewExecutionClient(conn), longrunningpb.NewOperationsClient(conn), repb.NewActionCacheClient(conn)
	cl.acInstance = cl.instance
	if cfg.ActionCache.URL != "" {
		acConn, err := remote.DialGRPC(cfg.ActionCache, opts...)
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("remote execution: action-cache-service: %w", err)
		}
		cl.conns = append(cl.conns, acConn)
		cl.ac, cl.acInstance = repb.NewActionCacheClient(acConn), cfg.ActionCache.Instance
		if err := connect(ctx, acConn); err != nil {
			cl.Close()
			return nil, &InfraError{Op: "connecting to the action-cache-service " + remote.RedactURL(cfg.ActionCache.URL), Err: err}
		}
	}
	spec := cfg.StorageService()
	spec.DialOptions = opts
	if cl.cas, err = remote.Open(spec); err != nil {
		cl.Close()
		return nil, fmt.Errorf("remote execution: storage-service: %w", err)
	}
	if err := cl.capabilities(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	// The CAS's connection is the store's: a call makes it (the empty blob,
	// which every CAS has).
	if _, err := cl.cas.FindMissing(ctx, []cache.Digest{cache.DigestOf(nil)}); err != nil {
		cl.Close()
		return nil, &InfraError{Op: "connecting to the storage-service " + cl.cas.Name(), Err: err}
	}
	cl.dialed = cl.watch.begun.Load()
	return cl, nil
}

// connect makes conn connect, and waits until it has.
func connect(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		switch s := conn.GetState(); s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("the connection is %s", s)
		default:
			if !conn.WaitForStateChange(ctx, s) {
				return context.Cause(ctx)
			}
		}
	}
}

// Broken says whether the client can serve no further build: closed, or a
// connection of its dial ended, or another was made since (gRPC reconnects
// from the goroutine of a call). A job worker keeping the client then dials
// another (job.Resident).
func (cl *Client) Broken() bool {
	return cl.closed.Load() || cl.watch.ended.Load() > 0 || cl.watch.begun.Load() != cl.dialed
}

// connWatch counts a client's connections as gRPC makes and ends them.
type connWatch struct{ begun, ended atomic.Int32 }

func (w *connWatch) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (w *connWatch) HandleRPC(context.Context, stats.RPCStats)                         {}
func (w *connWatch) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w *connWatch) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		w.begun.Add(1)
	case *stats.ConnEnd:
		w.ended.Add(1)
	}
}

// Close releases the connections.
func (cl *Client) Close() error {
	cl.closed.Store(true)
	var errs []error
	if cl.cas != nil {
		errs = append(errs, cl.cas.Close())
	}
	for _, c := range cl.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Name is the execution service's URL, without userinfo.
func (cl *Client) Name() string { return cl.name }

// capabilities asks the execution service what it offers.
func (cl *Client) capabilities(ctx context.Context) error {
	caps, err := repb.NewCapabilitiesClient(cl.conns[0]).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: cl.instance})
	if err != nil {
		switch status.Code(err) {
		case codes.Unimplemented:
			return fmt.Errorf("remote execution service %s: it has no Capabilities service: is it a REAPI v2 server? (%v)", cl.name, statusText(err))
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			return &InfraError{Op: "asking the execution service " + cl.name + " its capabilities", Err: errors.New(statusText(err))}
		}
		return fmt.Errorf("remote execution service %s: asking its capabilities: %s", cl.name, statusText(err))
	}
	ec := caps.GetExecutionCapabilities()
	if !ec.GetExecEnabled() {
		return fmt.Errorf("remote execution service %s: it does not execute actions (exec_enabled is false): is it a cache only? set execution-service to an execution server", cl.name)
	}
	fns := ec.GetDigestFunctions()
	if ec.GetDigestFunction() != repb.DigestFunction_UNKNOWN {
		fns = append(fns, ec.GetDigestFunction())
	}
	if len(fns) > 0 && !slices.Contains(fns, repb.DigestFunction_SHA256) {
		return fmt.Errorf("remote execution service %s: it does not execute with SHA-256 digests (it offers %v); gantry's CAS is SHA-256", cl.name, fns)
	}
	cl.BatchLimit = caps.GetCacheCapabilities().GetMaxBatchTotalSizeBytes()
	return nil
}

// statusText is a gRPC error as "Code: message".
func statusText(err error) string {
	st := status.Convert(err)
	return st.Code().String() + ": " + st.Message()
}

// actionContext is ctx carrying the RequestMetadata of a call made for the
// build of element.
func (cl *Client) actionContext(ctx context.Context, element string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, RequestMetadataKey, string(cl.requestMetadata(element)))
}

func (cl *Client) requestMetadata(element string) []byte {
	md := &repb.RequestMetadata{
		ToolDetails:      &repb.ToolDetails{ToolName: toolName, ToolVersion: toolVersion()},
		ToolInvocationId: cl.invocation,
		ActionId:         element,
		ActionMnemonic:   "build",
		TargetId:         element,
	}
	b, _ := proto.Marshal(md)
	return b
}

// withMetadata gives a call the session's RequestMetadata when its context
// carries none (the CAS's batch calls, made for several builds at once).
func (cl *Client) withMetadata(ctx context.Context) context.Context {
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(RequestMetadataKey)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, RequestMetadataKey, string(cl.requestMetadata("")))
}

func (cl *Client) unaryMetadata(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(cl.withMetadata(ctx), method, req, reply, cc, opts...)
}

func (cl *Client) streamMetadata(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(cl.withMetadata(ctx), desc, cc, method, opts...)
}
