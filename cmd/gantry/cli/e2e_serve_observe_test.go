package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gantry-build/gantry/cache"
)

// TestServeObservability: `gantry cache serve --log-format json` writes one
// JSON line per request (the client by name, never its token), answers a gRPC
// health client and GET /healthz and /readyz without credentials (/status
// still wants them), and its /metrics passes `promtool check metrics`; the
// default log is log/slog's text; a log format it does not know is refused
// naming the flag.
func TestServeObservability(t *testing.T) {
	s := startServe(t, "--log-format", "json")
	blob, hash := randomBlob(t, 2000)
	if code, _ := s.request("PUT", "/cas/"+hash, blob, true); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/status": 401} {
		if code, body := s.request("GET", path, nil, false); code != want {
			t.Errorf("GET %s without credentials: %d %s, want %d", path, code, body, want)
		}
	}
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("grpc.health.v1.Health/Check = %v, %v; want SERVING", resp, err)
	}

	_, metrics := s.request("GET", "/metrics", nil, true)
	promtool, err := exec.LookPath("promtool")
	switch {
	case err == nil:
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(string(metrics))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	case os.Getenv("CI") == "true":
		t.Fatalf("promtool is not installed (Debian package prometheus): %v", err)
	default:
		t.Log("promtool is not installed (Debian package prometheus): not checking /metrics with it")
	}
	if !strings.Contains(string(metrics), `gantry_serve_requests_total{method="PUT",protocol="http",status="200"} 1`) {
		t.Errorf("/metrics does not count the PUT:\n%s", metrics)
	}
	if n := s.metric("gantry_serve_store_size_bytes"); n < 2000 {
		t.Errorf("gantry_serve_store_size_bytes = %d without a quota, want the 2000 bytes stored and more", n)
	}
	s.stop()

	var put, check map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.log()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		switch {
		case l["msg"] == "request" && l["method"] == "PUT":
			put = l
		case l["msg"] == "request" && l["method"] == "/grpc.health.v1.Health/Check":
			check = l
		}
	}
	for what, c := range map[string]struct {
		line map[string]any
		want map[string]any
	}{
		"the PUT":          {put, map[string]any{"protocol": "http", "client": "ci", "path": "/cas/" + hash, "status": "200", "bytes_in": 2000.0}},
		"the health check": {check, map[string]any{"protocol": "grpc", "client": "anonymous", "status": "OK"}},
	} {
		if c.line == nil {
			t.Errorf("no log line for %s in:\n%s", what, s.log())
			continue
		}
		for k, v := range c.want {
			if c.line[k] != v {
				t.Errorf("%s: %s = %v, want %v (%v)", what, k, c.line[k], v, c.line)
			}
		}
	}
	if strings.Contains(s.log(), s.token) {
		t.Errorf("the token appears in the log:\n%s", s.log())
	}

	text := startServe(t)
	text.request("HEAD", "/cas/"+cache.DigestOf(blob).Hash, nil, true)
	text.stop()
	if want := "level=INFO msg=request protocol=http client=ci method=HEAD path=/cas/" + hash + " status=404"; !strings.Contains(text.log(), want) {
		t.Errorf("the default log has no line %q:\n%s", want, text.log())
	}

	bad := exec.Command(gantryBinary(t), "cache", "serve", "--dir", t.TempDir(), "--http", "127.0.0.1:0", "--token-file", s.tokens, "--log-format", "xml")
	out, _ := bad.CombinedOutput()
	want := `gantry: cache serve: --log-format "xml": not a log format: use text or json (bad configuration)` + "\n"
	if code := bad.ProcessState.ExitCode(); code != 2 || !strings.HasPrefix(string(out), want) {
		t.Errorf("--log-format xml: exit %d, %q; want 2 and %q", code, out, want)
	}
}
