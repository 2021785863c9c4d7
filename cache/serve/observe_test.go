package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/proctest"
	"github.com/gantry-build/gantry/internal/testreapi"
)

// discardLog is a logger for parts tested without a server.
var discardLog = slog.New(slog.DiscardHandler)

// obsToken is the token of client "ci" on the servers of these tests.
const obsToken = "obs-s3cret-token"

// observed is a server of these tests, serving on 127.0.0.1 until the test ends.
type observed struct {
	t          *testing.T
	srv        *Server
	http, grpc string
	tokens     string // the token file
	logMu      sync.Mutex
	logBuf     bytes.Buffer
	cancel     context.CancelFunc
	done       chan error
	stopOnce   sync.Once
}

func (o *observed) Write(p []byte) (int, error) {
	o.logMu.Lock()
	defer o.logMu.Unlock()
	return o.logBuf.Write(p)
}

func (o *observed) log() string {
	o.logMu.Lock()
	defer o.logMu.Unlock()
	return o.logBuf.String()
}

// startObserved serves a store (dir, or a new one) with opts, the log in JSON.
func startObserved(t *testing.T, dir string, opts Options) *observed {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(obsToken+" ci\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &observed{t: t, tokens: tokens, done: make(chan error, 1)}
	opts.Dir, opts.HTTPAddr, opts.GRPCAddr, opts.TokenFile = dir, "127.0.0.1:0", "127.0.0.1:0", tokens
	opts.Log, opts.LogFormat, opts.ShutdownGrace = o, LogJSON, 5*time.Second
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	o.srv = srv
	o.http, o.grpc = srv.Addrs()
	ctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go func() { o.done <- srv.Serve(ctx) }()
	t.Cleanup(o.stop)
	return o
}

// stop stops the server and waits for Serve to return.
func (o *observed) stop() {
	o.stopOnce.Do(func() {
		o.cancel()
		if err := <-o.done; err != nil {
			o.t.Errorf("Serve: %v", err)
		}
	})
}

// request sends an HTTP request, with the token when auth, and returns the
// status and body.
func (o *observed) request(method, path string, body []byte, auth bool) (int, string) {
	o.t.Helper()
	req, err := http.NewRequest(method, "http://"+o.http+path, bytes.NewReader(body))
	if err != nil {
		o.t.Fatal(err)
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+obsToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// dial connects to the gRPC port without credentials; authCtx adds the token.
func (o *observed) dial() *grpc.ClientConn {
	o.t.Helper()
	conn, err := grpc.NewClient(o.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		o.t.Fatal(err)
	}
	o.t.Cleanup(func() { conn.Close() })
	return conn
}

func authCtx() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+obsToken)
}

// scrape returns GET /metrics, parsed.
func (o *observed) scrape() (string, map[string]*dto.MetricFamily) {
	o.t.Helper()
	code, text := o.request("GET", "/metrics", nil, true)
	if code != http.StatusOK {
		o.t.Fatalf("GET /metrics: %d %s", code, text)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		o.t.Fatalf("parsing /metrics: %v\n%s", err, text)
	}
	return text, fams
}

// series finds the series of family name with exactly labels, or nil.
func series(fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		if len(m.Label) != len(labels) {
			continue
		}
		for _, l := range m.Label {
			if labels[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a counter's or gauge's value, -1 when the series is absent.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m := series(fams, name, labels)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

// logLines parses the JSON log, failing on a line that is not JSON.
func (o *observed) logLines() []map[string]any {
	o.t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(o.log()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			o.t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// TestServeMetricsPromtool: GET /metrics passes Prometheus's own `promtool
// check metrics`, and its series move with what the server does: a request
// counted by protocol, method and status, its latency observed, its bytes
// counted, lookups, an eviction, leases, an unknown gRPC method under one label;
// the process and Go collectors are there; no token appears.
func TestServeMetricsPromtool(t *testing.T) {
	o := startObserved(t, "", Options{Quota: 3000})
	blobs := make([][]byte, 4)
	for i := range blobs {
		blobs[i] = bytes.Repeat([]byte{byte('a' + i)}, 1000)
		if code, body := o.request("PUT", "/cas/"+cache.DigestOf(blobs[i]).Hash, blobs[i], true); code != http.StatusOK {
			t.Fatalf("PUT: %d %s", code, body)
		}
	}
	last := cache.DigestOf(blobs[3]).Hash
	if code, body := o.request("GET", "/cas/"+last, nil, true); code != http.StatusOK || body != string(blobs[3]) {
		t.Fatalf("GET: %d", code)
	}
	missing := cache.DigestOf([]byte("missing")).Hash
	if code, _ := o.request("GET", "/cas/"+missing, nil, true); code != http.StatusNotFound {
		t.Fatalf("GET of a missing blob: %d, want 404", code)
	}
	if code, _ := o.request("PUT", "/cas/"+missing, []byte("x"), false); code != http.StatusUnauthorized {
		t.Fatalf("PUT without a token: %d, want 401", code)
	}
	key := cache.DigestOf([]byte("an action")).Hash
	o.request("POST", "/lease/"+key, nil, true)
	o.request("POST", "/lease/"+key, nil, true) // the holder without its token waits

	conn := o.dial()
	cas := repb.NewContentAddressableStorageClient(conn)
	if _, err := cas.FindMissingBlobs(authCtx(), &repb.FindMissingBlobsRequest{BlobDigests: []*repb.Digest{{Hash: missing, SizeBytes: 7}}}); err != nil {
		t.Fatal(err)
	}
	err := conn.Invoke(context.Background(), "/made.up.Service/Method", &repb.Digest{}, &repb.Digest{})
	if status.Code(err) != codes.Unimplemented || status.Convert(err).Message() != "unknown service made.up.Service" {
		t.Errorf("a made-up method: %v, want Unimplemented: unknown service made.up.Service", err)
	}
	proctest.Eventually(t, "an eviction", func() bool {
		_, fams := o.scrape()
		return value(fams, "gantry_serve_evictions_total", nil) > 0
	})

	text, fams := o.scrape()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is not installed (Debian package prometheus): %v", err)
		}
		t.Log("promtool is not installed (Debian package prometheus): not checking the exposition with it")
	} else {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
	if strings.Contains(text, obsToken) {
		t.Errorf("the token appears in /metrics")
	}
	put := map[string]string{"protocol": "http", "method": "PUT", "status": "200"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gantry_serve_requests_total", put, 4},
		{"gantry_serve_requests_total", map[string]string{"protocol": "http", "method": "GET", "status": "404"}, 1},
		{"gantry_serve_requests_total", map[string]string{"protocol": "http", "method": "PUT", "status": "401"}, 1},
		{"gantry_serve_requests_total", map[string]string{"protocol": "grpc", "method": "build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs", "status": "OK"}, 1},
		{"gantry_serve_requests_total", map[string]string{"protocol": "grpc", "method": "unknown", "status": "Unimplemented"}, 1},
		{"gantry_serve_client_requests_total", map[string]string{"client": "anonymous"}, 2}, // the 401 and the made-up method
		{"gantry_serve_received_bytes_total", map[string]string{"protocol": "http"}, 4000},
		{"gantry_serve_lookups_total", map[string]string{"result": "hit"}, 1},
		{"gantry_serve_lookups_total", map[string]string{"result": "miss"}, 2},
		{"gantry_serve_leases_granted_total", nil, 1},
		{"gantry_serve_lease_waits_total", nil, 1},
		{"gantry_serve_leases_held", nil, 1},
		{"gantry_serve_store_quota_bytes", nil, 3000},
		{"gantry_serve_auth_refused_total", nil, 1},
	} {
		if got := value(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := value(fams, "gantry_serve_client_received_bytes_total", map[string]string{"client": "ci"}); got <= 4000 {
		t.Errorf("gantry_serve_client_received_bytes_total{client=ci} = %v, want the 4000 bytes of the PUTs and the RPC's", got)
	}
	if got := value(fams, "gantry_serve_sent_bytes_total", map[string]string{"protocol": "http"}); got < 1000 {
		t.Errorf("gantry_serve_sent_bytes_total{protocol=http} = %v, want the 1000 bytes of the GET and more", got)
	}
	if got := value(fams, "gantry_serve_evicted_bytes_total", nil); got < 1000 {
		t.Errorf("gantry_serve_evicted_bytes_total = %v, want at least a blob's 1000", got)
	}
	if got := value(fams, "gantry_serve_store_size_bytes", nil); got > 3000 || got < 0 {
		t.Errorf("gantry_serve_store_size_bytes = %v, want under the quota of 3000 after eviction", got)
	}
	if h := series(fams, "gantry_serve_request_duration_seconds", put); h == nil || h.Histogram.GetSampleCount() != 4 || h.Histogram.GetSampleSum() <= 0 {
		t.Errorf("gantry_serve_request_duration_seconds%v = %v, want 4 observations", put, h)
	}
	for _, name := range []string{"go_goroutines", "process_start_time_seconds", "gantry_serve_admission_waiting", "gantry_serve_admission_active"} {
		if fams[name] == nil {
			t.Errorf("no %s in /metrics", name)
		}
	}
}

// TestServeAccessLogJSON: with the JSON log, every request gets one line
// naming the client (never a credential), method, path or RPC, status, bytes
// and duration; an eviction and lease events get theirs; no line holds a token.
func TestServeAccessLogJSON(t *testing.T) {
	o := startObserved(t, "", Options{Quota: 1500})
	blob := bytes.Repeat([]byte("z"), 1000)
	hash := cache.DigestOf(blob).Hash
	o.request("PUT", "/cas/"+hash, blob, true)
	o.request("GET", "/cas/"+hash+"?x=1", nil, true)
	o.request("GET", "/cas/"+hash, nil, false)
	key := cache.DigestOf([]byte("an action")).Hash
	o.request("POST", "/lease/"+key, nil, true)
	conn := o.dial()
	if _, err := repb.NewCapabilitiesClient(conn).GetCapabilities(authCtx(), &repb.GetCapabilitiesRequest{}); err != nil {
		t.Fatal(err)
	}
	other := bytes.Repeat([]byte("y"), 1000)
	o.request("PUT", "/cas/"+cache.DigestOf(other).Hash, other, true)
	proctest.Eventually(t, "the eviction's log line", func() bool { return strings.Contains(o.log(), "evicted to keep the quota") })
	o.stop()

	find := func(match func(l map[string]any) bool) map[string]any {
		for _, l := range o.logLines() {
			if match(l) {
				return l
			}
		}
		return nil
	}
	req := func(method, path string) func(map[string]any) bool {
		return func(l map[string]any) bool {
			return l["msg"] == "request" && l["method"] == method && l["path"] == path
		}
	}
	for _, c := range []struct {
		what  string
		match func(map[string]any) bool
		want  map[string]any
	}{
		{"the PUT", req("PUT", "/cas/"+hash), map[string]any{"level": "INFO", "protocol": "http", "client": "ci", "status": "200", "bytes_in": 1000.0, "bytes_out": 0.0}},
		{"the GET (its path without the query)", func(l map[string]any) bool { return req("GET", "/cas/"+hash)(l) && l["client"] == "ci" },
			map[string]any{"status": "200", "bytes_out": 1000.0}},
		{"the GET without credentials", func(l map[string]any) bool { return req("GET", "/cas/"+hash)(l) && l["status"] == "401" },
			map[string]any{"client": "anonymous"}},
		{"the RPC", func(l map[string]any) bool {
			return l["msg"] == "request" && l["method"] == "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities"
		}, map[string]any{"protocol": "grpc", "client": "ci", "status": "OK"}},
		{"the lease", func(l map[string]any) bool { return l["msg"] == "lease granted" }, map[string]any{"key": key, "holder": "ci", "token": 1.0}},
		{"the eviction", func(l map[string]any) bool { return l["msg"] == "evicted to keep the quota" }, map[string]any{"units": 1.0, "quota_bytes": 1500.0}},
	} {
		l := find(c.match)
		if l == nil {
			t.Errorf("no log line for %s in:\n%s", c.what, o.log())
			continue
		}
		for k, v := range c.want {
			if l[k] != v {
				t.Errorf("%s: %s = %v, want %v (%v)", c.what, k, l[k], v, l)
			}
		}
		if l["msg"] == "request" {
			if d, ok := l["duration"].(float64); !ok || d <= 0 {
				t.Errorf("%s: duration = %v, want nanoseconds", c.what, l["duration"])
			}
		}
	}
	if strings.Contains(o.log(), obsToken) {
		t.Errorf("the token appears in the log:\n%s", o.log())
	}
}

// TestServeLogFormat: text is the default; a format that is neither text nor
// json is refused with its flag named.
func TestServeLogFormat(t *testing.T) {
	var buf bytes.Buffer
	l, err := newLogger(&buf, "")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("request", "client", "ci")
	if got := buf.String(); !strings.Contains(got, "level=INFO msg=request client=ci") {
		t.Errorf("the default log line = %q, want log/slog's text", got)
	}
	_, err = New(Options{Dir: t.TempDir(), HTTPAddr: "127.0.0.1:0", AllowAnonymousRead: true, ClientCA: "x", LogFormat: "xml"})
	if want := `cache serve: --log-format "xml": not a log format: use text or json (bad configuration)`; err == nil || err.Error() != want {
		t.Errorf("New with --log-format xml: %v, want %s", err, want)
	}
}

// TestServeHealth: gRPC's health service answers a real health client without
// credentials, SERVING for the server and each of its services, NOT_SERVING
// to a watch once the server stops; /healthz and /readyz need no credentials
// while /status still does; /readyz is 503 with its reason when the store
// cannot be written, and ready again when it can.
func TestServeHealth(t *testing.T) {
	o := startObserved(t, "", Options{})
	health := healthpb.NewHealthClient(o.dial())
	for _, svc := range []string{"", "build.bazel.remote.execution.v2.ContentAddressableStorage", "google.bytestream.ByteStream"} {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %v, %v; want SERVING", svc, resp, err)
		}
	}
	if _, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service: %v, want NotFound", err)
	}
	for path, want := range map[string]struct {
		code int
		body string
	}{"/healthz": {200, "ok\n"}, "/readyz": {200, "ready\n"}, "/status": {401, "credentials required\n"}} {
		if code, body := o.request("GET", path, nil, false); code != want.code || body != want.body {
			t.Errorf("GET %s without credentials: %d %q, want %d %q", path, code, body, want.code, want.body)
		}
	}

	// The store's tmp/ turned into a file: nothing can be written (as root,
	// permissions would not stop it).
	tmp := filepath.Join(o.srv.c.Root, "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, body := o.request("GET", "/readyz", nil, false)
	if want := "not ready: the store is not writable: open <store>/tmp/"; code != http.StatusServiceUnavailable || !strings.HasPrefix(body, want) || !strings.HasSuffix(body, ": not a directory\n") {
		t.Errorf("GET /readyz with an unwritable store: %d %q, want 503 %q…: not a directory", code, body, want)
	}
	os.Remove(tmp)
	os.Mkdir(tmp, 0o755)
	if code, body := o.request("GET", "/readyz", nil, false); code != http.StatusOK {
		t.Errorf("GET /readyz with the store writable again: %d %q, want 200", code, body)
	}

	watch, err := health.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch: %v, %v; want SERVING", r, err)
	}
	stopped := make(chan struct{})
	go func() { o.stop(); close(stopped) }()
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch while the server stops: %v, %v; want NOT_SERVING", r, err)
	}
	select {
	case <-stopped:
	case <-time.After(4 * time.Second): // the grace is 5 s
		t.Errorf("the server did not stop while a health watch was open")
	}
}

// TestServeReadyOverQuota: a store that eviction cannot bring under its quota
// (what is left was used after its scan began: here, blobs dated in the
// future) is not ready.
func TestServeReadyOverQuota(t *testing.T) {
	dir := t.TempDir()
	c, err := cache.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour)
	for i := range 3 {
		d, err := c.PutBlob(bytes.Repeat([]byte{byte(i)}, 1000))
		if err != nil {
			t.Fatal(err)
		}
		os.Chtimes(c.BlobPath(d), future, future)
	}
	o := startObserved(t, dir, Options{Quota: 2000})
	want := "not ready: the store is over its quota after eviction (GET /status tells its size)\n"
	proctest.Eventually(t, "/readyz to say the store is over its quota", func() bool {
		code, body := o.request("GET", "/readyz", nil, false)
		return code == http.StatusServiceUnavailable && body == want
	})
	if !strings.Contains(o.log(), `"msg":"the store is still over its quota after eviction`) {
		t.Errorf("the log does not say the store is still over its quota:\n%s", o.log())
	}
}

// TestServeReloadFailureLogged: a token file that SIGHUP cannot reread is
// logged, as an error line of the log's format, and the old tokens stay.
func TestServeReloadFailureLogged(t *testing.T) {
	o := startObserved(t, "", Options{})
	if err := os.WriteFile(o.tokens, []byte(obsToken+" ci sometimes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cause := o.tokens + `:1: "sometimes" is not an access: lines are TOKEN [NAME [read|write]] (a name has no spaces)`
	if err := o.srv.ReloadCredentials(); err == nil || err.Error() != "cache serve: reloading credentials: "+cause {
		t.Errorf("ReloadCredentials = %v, want the file's line named", err)
	}
	if code, _ := o.request("GET", "/status", nil, true); code != http.StatusOK {
		t.Errorf("GET /status with the old token after a failed reload: %d, want 200", code)
	}
	o.stop()
	var found bool
	for _, l := range o.logLines() {
		if l["msg"] == "reloading credentials failed: the previous credentials stay in force" {
			found = l["level"] == "ERROR" && l["error"] == cause
		}
	}
	if !found {
		t.Errorf("no ERROR line for the failed reload with its cause in:\n%s", o.log())
	}
}

// TestLogBatchesAccessLinesOnly: access lines wait in the log's buffer (one
// write for many requests), any other line is written at once with the
// access lines before it, in order, and waiting access lines are written
// after the delay without another line to push them.
func TestLogBatchesAccessLinesOnly(t *testing.T) {
	logger := func(delay time.Duration) (*slog.Logger, *testreapi.LockedBuffer) {
		var out testreapi.LockedBuffer
		lw := newLogWriter(&out, delay)
		inner, err := newLogger(lw, "")
		if err != nil {
			t.Fatal(err)
		}
		return slog.New(flushHandler{inner.Handler(), lw}), &out
	}
	l, out := logger(time.Hour) // a loaded machine may pause the test for longer than logFlushDelay
	l.Info(accessMsg, "path", "/cas/1")
	l.Info(accessMsg, "path", "/cas/2")
	if got := out.String(); got != "" {
		t.Errorf("access lines written at once: %q, want them batched", got)
	}
	l.Warn("blob is damaged")
	got := out.String()
	i1, i2, iw := strings.Index(got, "path=/cas/1"), strings.Index(got, "path=/cas/2"), strings.Index(got, "msg=\"blob is damaged\"")
	if i1 < 0 || i2 < 0 || iw < 0 || !(i1 < i2 && i2 < iw) {
		t.Errorf("after a warning the log is %q, want both access lines, then the warning", got)
	}
	l, out = logger(time.Millisecond)
	l.Info(accessMsg, "path", "/cas/3")
	proctest.Eventually(t, "the waiting access line written by the timer", func() bool { return strings.Contains(out.String(), "path=/cas/3") })
}

// TestServeAccessLogWrittenWhileServing: a request's access line reaches the
// log while the server serves, with no other line after it and no stop.
func TestServeAccessLogWrittenWhileServing(t *testing.T) {
	o := startObserved(t, "", Options{})
	o.request("GET", "/cas/"+cache.DigestOf([]byte("absent")).Hash, nil, true)
	proctest.Eventually(t, "the GET's access line", func() bool { return strings.Contains(o.log(), `"status":"404"`) })
}
