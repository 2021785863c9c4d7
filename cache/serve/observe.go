package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// What the server tells its operator (docs/serve.md, "Logs, metrics and
// health"): every request is counted (serverMetrics) and logged once it is
// answered (accesslog.go), by an HTTP middleware (observeHTTP) and a gRPC stats
// handler and interceptor (grpcObserver), so that every service on the server
// is covered without doing anything itself. A handler only tells who the
// client is (setClient), once it has checked the credentials.

// Log formats of Options.LogFormat.
const (
	LogText = "text"
	LogJSON = "json"
)

// newLogger makes the server's logger writing to w in format ("" = text).
func newLogger(w io.Writer, format string) (*slog.Logger, error) {
	switch format {
	case "", LogText:
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case LogJSON:
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("--log-format %q: not a log format: use %s or %s", format, LogText, LogJSON)
}

// callInfo is what the access log and the metrics learn of one request while
// it is served.
type callInfo struct {
	protocol string // "http" or "grpc"
	method   string // the HTTP method, or the RPC's full name
	path     string // HTTP: the URL's path (never its query)
	start    time.Time

	mu     sync.Mutex
	client string

	in, out atomic.Int64 // body or message bytes received and sent
}

type callKey struct{}

// callFrom returns the request's callInfo, nil outside an observed request.
func callFrom(ctx context.Context) *callInfo {
	ci, _ := ctx.Value(callKey{}).(*callInfo)
	return ci
}

// setClient names the client of the request of ctx, once its credentials are
// checked: a token's name, a user, a certificate's subject or "anonymous".
func setClient(ctx context.Context, name string) {
	callFrom(ctx).setClient(name)
}

func (ci *callInfo) setClient(name string) {
	if ci != nil {
		ci.mu.Lock()
		ci.client = name
		ci.mu.Unlock()
	}
}

func (ci *callInfo) clientName() string {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	return ci.client
}

// finish counts and logs a request answered with status; metricMethod is the
// method's label (bounded: unknown methods share one).
func (s *Server) finish(ci *callInfo, metricMethod, status string, errAttr ...slog.Attr) {
	d := time.Since(ci.start)
	client := ci.clientName()
	in, out := ci.in.Load(), ci.out.Load()
	s.metrics.request(ci.protocol, metricMethod, status, client, d.Seconds(), in, out)
	s.accessLog(ci, client, status, in, out, d, errAttr)
}

// grpcObserver is the gRPC server's stats handler: it gives each call its
// callInfo, counts the message bytes, and finishes the call when it ends.
type grpcObserver struct{ s *Server }

func (o grpcObserver) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, callKey{}, &callInfo{protocol: "grpc", method: info.FullMethodName, start: time.Now(), client: "anonymous"})
}

func (o grpcObserver) HandleRPC(ctx context.Context, st stats.RPCStats) {
	ci := callFrom(ctx)
	if ci == nil {
		return
	}
	switch st := st.(type) {
	case *stats.InPayload:
		ci.in.Add(int64(st.Length))
	case *stats.OutPayload:
		ci.out.Add(int64(st.Length))
	case *stats.End:
		code := status.Code(st.Error)
		var attrs []slog.Attr
		if st.Error != nil {
			attrs = append(attrs, slog.String("error", status.Convert(st.Error).Message()))
		}
		o.s.finish(ci, o.s.grpcMethodLabel(ci.method), code.String(), attrs...)
	}
}

func (o grpcObserver) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (o grpcObserver) HandleConn(context.Context, stats.ConnStats) {}

// grpcMethodLabel is method's label in the metrics: its full name without the
// leading slash for a method the server serves, "unknown" for any other (a
// stranger could make up names without end).
func (s *Server) grpcMethodLabel(method string) string {
	if s.grpcMethods()[method] {
		return method[1:]
	}
	return "unknown"
}

// grpcMethods returns the full names of the methods the gRPC server serves,
// once it is built with all its services.
func (s *Server) grpcMethods() map[string]bool {
	s.knownOnce.Do(func() {
		s.known = map[string]bool{}
		for svc, info := range s.grpcSrv.GetServiceInfo() {
			for _, m := range info.Methods {
				s.known["/"+svc+"/"+m.Name] = true
			}
		}
	})
	return s.known
}

// grpcUnknown answers a call of a service or method the server does not
// serve, as gRPC itself would, but through the interceptors and the stats
// handler, so that it is counted and logged: a client that expects a service
// the server lacks shows in the log.
func (s *Server) grpcUnknown(_ any, stream grpc.ServerStream) error {
	m, _ := grpc.MethodFromServerStream(stream)
	svc, method, _ := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	for known := range s.grpcMethods() {
		if strings.HasPrefix(known, "/"+svc+"/") {
			return status.Errorf(codes.Unimplemented, "unknown method %s for service %s", method, svc)
		}
	}
	return status.Errorf(codes.Unimplemented, "unknown service %s", svc)
}

// grpcObserveStream refuses calls of methods the server does not serve before
// any credential is asked for (Unimplemented tells a client more than
// Unauthenticated), and ends the health service's watches once they have
// sent NOT_SERVING as the server stops, so that they do not hold its graceful
// stop.
func (s *Server) grpcObserveStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !s.grpcMethods()[info.FullMethod] {
		return s.grpcUnknown(srv, ss)
	}
	if info.FullMethod == healthWatch {
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		return h(srv, healthWatchStream{wrappedStream{ss, ctx}, s.stopping, cancel})
	}
	return h(srv, ss)
}

// healthWatchStream ends a health watch once it has sent NOT_SERVING while the
// server stops.
type healthWatchStream struct {
	wrappedStream
	stopping context.Context
	cancel   context.CancelFunc
}

func (w healthWatchStream) SendMsg(m any) error {
	err := w.wrappedStream.SendMsg(m)
	if r, ok := m.(*healthpb.HealthCheckResponse); ok && w.stopping.Err() != nil && r.Status == healthpb.HealthCheckResponse_NOT_SERVING {
		w.cancel()
	}
	return err
}
