package serve

import (
	"errors"
	"fmt"
	"net/http"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Health, for probes and load balancers, without credentials (docs/serve.md,
// "Health"): over HTTP, GET /healthz (alive: 200 while the process serves) and
// GET /readyz (ready: 200 when the store is writable and under its quota, 503
// with the reason otherwise, and while the server stops); over gRPC, gRPC's own
// health service (grpc.health.v1.Health), SERVING while the server serves and
// NOT_SERVING once it stops. Neither says more than that: no sizes, no paths.

// healthService is the gRPC health service's name; its calls need no credentials.
const healthService = "/grpc.health.v1.Health/"

// healthWatch is the health service's streaming method.
const healthWatch = healthService + "Watch"

// registerHealth adds gRPC's health service to g, every service SERVING.
func (s *Server) registerHealth(g *grpc.Server) {
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(g, s.health)
}

// healthServing marks the server and each of its services SERVING (the
// service "" is the server as a whole).
func (s *Server) healthServing(g *grpc.Server) {
	for name := range g.GetServiceInfo() {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
}

// healthHTTP answers GET /healthz and /readyz before next, which needs credentials.
func (s *Server) healthHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Write([]byte("ok\n"))
		case "/readyz":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if err := s.ready(); err != nil {
				http.Error(w, "not ready: "+s.redact(err.Error()), http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ready\n"))
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// ready reports why the server should not be sent requests, or nil.
func (s *Server) ready() error {
	if s.stopping.Err() != nil {
		return errors.New("the server is stopping")
	}
	probe := s.c.TempName("readyz")
	if err := os.WriteFile(probe, []byte("ready\n"), 0o600); err != nil {
		return fmt.Errorf("the store is not writable: %w", err)
	}
	if err := os.Remove(probe); err != nil {
		return fmt.Errorf("the store is not writable: %w", err)
	}
	if s.evictor.over.Load() > 0 {
		return errors.New("the store is over its quota after eviction (GET /status tells its size)")
	}
	return nil
}
