package cli

// End-to-end tests of `gantry cache serve`: the real binary as a server, and
// real clients (gantry's own remote stores, net/http, Bazel) against it.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/cache/serve"
	"github.com/gantry-build/gantry/internal/testpki"
)

// serveProc is a running `gantry cache serve`.
type serveProc struct {
	t        *testing.T
	cmd      *exec.Cmd
	dir      string // the store
	http     string // host:port, "" when not served
	grpc     string
	token    string // a token the server accepts (client "ci")
	tokens   string // the token file
	stderr   *bytes.Buffer
	stderrMu *sync.Mutex
	done     chan struct{}
}

// serveTestPassword is ci-user's password in the servers' htpasswd file.
const serveTestPassword = "pa55-word"

// startServe starts the server on a fresh store with a token file holding
// token "s3cret-token ci", on HTTP and gRPC, with extra flags.
func startServe(t *testing.T, extra ...string) *serveProc {
	t.Helper()
	bin := gantryBinary(t)
	base := t.TempDir()
	s := &serveProc{t: t, dir: filepath.Join(base, "store"), token: "s3cret-token", tokens: filepath.Join(base, "tokens"),
		stderr: &bytes.Buffer{}, stderrMu: &sync.Mutex{}, done: make(chan struct{})}
	if err := os.WriteFile(s.tokens, []byte("# test tokens\ns3cret-token ci\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(serveTestPassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(base, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte("ci-user:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"cache", "serve", "--dir", s.dir, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
		"--token-file", s.tokens, "--htpasswd", htpasswd}, extra...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s.cmd.Stderr = lockedWriter{s.stderrMu, s.stderr}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
	})
	sc := bufio.NewScanner(out)
	for (s.http == "" || s.grpc == "") && sc.Scan() {
		proto, addr, _ := strings.Cut(sc.Text(), " ")
		switch proto {
		case "http":
			s.http = addr
		case "grpc":
			s.grpc = addr
		}
	}
	if s.http == "" || s.grpc == "" {
		<-s.done
		t.Fatalf("gantry cache serve did not start:\n%s", s.log())
	}
	go io.Copy(io.Discard, out)
	return s
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (s *serveProc) log() string {
	s.stderrMu.Lock()
	defer s.stderrMu.Unlock()
	return s.stderr.String()
}

// request sends an HTTP request to the server with the test's token (auth
// false: none) and returns the status and body.
func (s *serveProc) request(method, path string, body []byte, auth bool, header ...string) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, "http://"+s.http+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// metric returns the value of an unlabelled counter of GET /metrics.
func (s *serveProc) metric(name string) int64 {
	s.t.Helper()
	_, body := s.request("GET", "/metrics", nil, true)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, _ := strconv.ParseFloat(v, 64) // Prometheus's text writes 1e+06 for a million
			return int64(n)
		}
	}
	s.t.Fatalf("no metric %s in:\n%s", name, body)
	return 0
}

// stop sends SIGTERM and waits for a clean exit.
func (s *serveProc) stop() {
	s.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(e2eTimeout):
		s.t.Fatalf("gantry cache serve did not stop within %v after SIGTERM:\n%s", e2eTimeout, s.log())
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		s.t.Fatalf("gantry cache serve exited %d after SIGTERM, want 0:\n%s", code, s.log())
	}
}

// blobPath is where the store keeps a blob.
func (s *serveProc) blobPath(hash string) string { return filepath.Join(s.dir, "cas", hash[:2], hash) }

// verifyStore opens the store and fails unless `cache verify` finds it clean and
// tmp/ holds no leftover.
func (s *serveProc) verifyStore() {
	s.t.Helper()
	c, err := cache.Open(s.dir)
	if err != nil {
		s.t.Fatal(err)
	}
	rep, err := c.Verify()
	if err != nil {
		s.t.Fatal(err)
	}
	if !rep.Clean() {
		s.t.Fatalf("cache verify of the server's store:\n  %s", strings.Join(rep.Problems, "\n  "))
	}
	if left, _ := os.ReadDir(filepath.Join(s.dir, "tmp")); len(left) > 0 {
		s.t.Fatalf("partial files left in the store's tmp/: %v", left)
	}
}

func randomBlob(t testing.TB, n int) ([]byte, string) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// TestServeHTTPIntegrityAndAuth: the HTTP protocol refuses writes without a
// token, refuses bytes that do not match their digest and stores nothing of
// them, hides entries whose blobs are missing, and keeps credentials out of
// its output and metrics.
func TestServeHTTPIntegrityAndAuth(t *testing.T) {
	s := startServe(t)
	blob, hash := randomBlob(t, 1000)

	if code, _ := s.request("PUT", "/cas/"+hash, blob, false); code != http.StatusUnauthorized {
		t.Errorf("PUT without a token: status %d, want 401", code)
	}
	if code, _ := s.request("GET", "/cas/"+hash, nil, false); code != http.StatusUnauthorized {
		t.Errorf("GET without a token and without --allow-anonymous-read: status %d, want 401", code)
	}
	req, _ := http.NewRequest("PUT", "http://"+s.http+"/cas/"+hash, bytes.NewReader(blob))
	req.Header.Set("Authorization", "Bearer wrong-token")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("PUT with a wrong token: %v %v, want 403", resp.StatusCode, err)
	}
	wrong := append([]byte(nil), blob...)
	wrong[500] ^= 1
	if code, body := s.request("PUT", "/cas/"+hash, wrong, true); code != http.StatusBadRequest {
		t.Errorf("PUT of wrong bytes: status %d (%s), want 400", code, body)
	}
	if _, err := os.Stat(s.blobPath(hash)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the wrong bytes were stored: %v", err)
	}
	if code, _ := s.request("PUT", "/cas/"+hash, blob, true); code != http.StatusOK {
		t.Fatalf("PUT: status %d", code)
	}
	if code, body := s.request("GET", "/instance-a/cas/"+hash, nil, true); code != http.StatusOK || !bytes.Equal(body, blob) {
		t.Errorf("GET with an instance prefix: status %d, %d bytes", code, len(body))
	}

	// An ActionResult naming a blob the store lacks is a miss, and is removed:
	// it is stored again once the blob is there.
	missing, missingHash := randomBlob(t, 300)
	ar, _ := proto.Marshal(&repb.ActionResult{OutputFiles: []*repb.OutputFile{
		{Path: "a", Digest: &repb.Digest{Hash: hash, SizeBytes: int64(len(blob))}},
		{Path: "b", Digest: &repb.Digest{Hash: missingHash, SizeBytes: int64(len(missing))}},
	}})
	_, key := randomBlob(t, 10)
	if code, _ := s.request("PUT", "/ac/"+key, ar, true); code != http.StatusOK {
		t.Fatalf("PUT /ac: status %d", code)
	}
	if code, _ := s.request("GET", "/ac/"+key, nil, true); code != http.StatusNotFound {
		t.Errorf("GET of an entry with a missing blob: status %d, want 404", code)
	}
	s.request("PUT", "/cas/"+missingHash, missing, true)
	if code, _ := s.request("GET", "/ac/"+key, nil, true); code != http.StatusNotFound {
		t.Errorf("GET of an entry removed as stale: status %d, want 404", code)
	}
	s.request("PUT", "/ac/"+key, ar, true)
	if code, body := s.request("GET", "/ac/"+key, nil, true); code != http.StatusOK || !bytes.Equal(body, ar) {
		t.Errorf("GET of a complete entry: status %d", code)
	}
	if code, _ := s.request("PUT", "/ac/"+key, []byte("not a protobuf \xff\xff"), true); code != http.StatusBadRequest {
		t.Errorf("PUT /ac of garbage: status %d, want 400", code)
	}

	_, metrics := s.request("GET", "/metrics", nil, true)
	_, status := s.request("GET", "/status", nil, true)
	var st serve.Status
	if err := json.Unmarshal(status, &st); err != nil || st.Blobs < 2 || st.ACEntries != 1 {
		t.Errorf("GET /status = %s (%v), want 2 blobs and more, 1 entry", status, err)
	}
	if !strings.Contains(string(metrics), `gantry_serve_client_requests_total{client="ci"}`) {
		t.Errorf("metrics do not count client ci:\n%s", metrics)
	}
	s.stop()
	for what, text := range map[string]string{"metrics": string(metrics), "status": string(status), "log": s.log()} {
		if strings.Contains(text, s.token) || strings.Contains(text, "wrong-token") || strings.Contains(text, serveTestPassword) {
			t.Errorf("a token appears in the server's %s", what)
		}
	}
	s.verifyStore()
}

// TestServeGantryClient: gantry's own remote stores push and pull an artifact
// entry through the server, over HTTP and gRPC, each with a token, over TLS
// and over mutual TLS; a client without credentials cannot write.
func TestServeGantryClient(t *testing.T) {
	pki := testpki.New(t)
	plain := startServe(t)
	tlsSrv := startServe(t, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey)
	mtls := startServe(t, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--client-ca", pki.CA)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte(plain.token+"\n"), 0o600)

	for _, tc := range []struct {
		name string
		srv  *serveProc
		spec remote.Spec
	}{
		{"grpc-token", plain, remote.Spec{URL: "grpc://" + plain.grpc, TokenFile: tokenFile, Push: true}},
		{"grpc-tls", tlsSrv, remote.Spec{URL: "grpcs://" + tlsSrv.grpc, TokenFile: tokenFile, ServerCA: pki.CA, Push: true}},
		{"grpc-mtls", mtls, remote.Spec{URL: "grpcs://" + mtls.grpc, ServerCA: pki.CA, ClientCert: pki.ClientCert, ClientKey: pki.ClientKey, Push: true}},
		{"http-token", plain, remote.Spec{URL: "http://" + plain.http + "/team-a", TokenFile: tokenFile, Push: true}},
		{"http-basic", plain, remote.Spec{URL: "http://ci-user:" + serveTestPassword + "@" + plain.http, Push: true}},
		{"https-tls", tlsSrv, remote.Spec{URL: "https://" + tlsSrv.http, TokenFile: tokenFile, ServerCA: pki.CA, Push: true}},
		{"https-mtls", mtls, remote.Spec{URL: "https://" + mtls.http, ServerCA: pki.CA, ClientCert: pki.ClientCert, ClientKey: pki.ClientKey, Push: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, tc.spec)
			tc.srv.verifyStore()
		})
	}

	// No credentials, or a wrong password: writes are refused as auth failures.
	blob, _ := randomBlob(t, 100)
	d := cache.DigestOf(blob)
	for _, url := range []string{"grpc://" + plain.grpc, "http://" + plain.http, "http://ci-user:wrong@" + plain.http} {
		anon, err := remote.Open(remote.Spec{URL: url, Push: true})
		if err != nil {
			t.Fatal(err)
		}
		defer anon.Close()
		err = anon.WriteBlob(context.Background(), d, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(blob)), nil })
		if !remote.IsKind(err, remote.Auth) {
			t.Errorf("write to %s without valid credentials: %v, want an auth error", remote.RedactURL(url), err)
		}
	}
	if plain.cmd.ProcessState != nil {
		t.Fatal("server died")
	}
	// A client certificate the CA did not sign: mutual TLS refuses it.
	noCert, _ := remote.Open(remote.Spec{URL: "grpcs://" + mtls.grpc, ServerCA: pki.CA})
	defer noCert.Close()
	if _, err := noCert.FindMissing(context.Background(), []cache.Digest{d}); err == nil {
		t.Error("mutual TLS server answered a client without a certificate")
	}
}

// roundTrip stores an artifact's blobs and entry through spec's remote, then
// reads them back through a second connection.
func roundTrip(t *testing.T, spec remote.Spec) {
	t.Helper()
	ctx := context.Background()
	r, err := remote.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	record, _ := randomBlob(t, 200)
	files, tree := treeBlobs(t, record)
	big, _ := randomBlob(t, 6<<20) // over the batch limit: ByteStream
	blobs := [][]byte{files, tree, record, big}
	var ds []cache.Digest
	for _, b := range blobs {
		ds = append(ds, cache.DigestOf(b))
	}
	missing, err := r.FindMissing(ctx, ds)
	if err != nil || len(missing) != len(ds) {
		t.Fatalf("FindMissing on an empty store: %v, %v", missing, err)
	}
	for i, b := range blobs {
		if err := r.WriteBlob(ctx, ds[i], func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }); err != nil {
			t.Fatalf("WriteBlob %s: %v", ds[i], err)
		}
	}
	key := fmt.Sprintf("%x", sha256.Sum256(big))
	entry := &remote.Entry{Files: ds[0], Tree: ds[1], Record: ds[2], Log: ds[3]}
	if err := r.UpdateEntry(ctx, key, entry); err != nil {
		t.Fatalf("UpdateEntry: %v", err)
	}
	r2, err := remote.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	got, err := r2.GetEntry(ctx, key)
	if err != nil || *got != *entry {
		t.Fatalf("GetEntry = %+v, %v; want %+v", got, err, entry)
	}
	if missing, err := r2.FindMissing(ctx, ds); err != nil || len(missing) != 0 {
		t.Fatalf("FindMissing after the upload: %v, %v", missing, err)
	}
	for i, b := range blobs {
		var buf bytes.Buffer
		if err := r2.ReadBlob(ctx, ds[i], &buf); err != nil || !bytes.Equal(buf.Bytes(), b) {
			t.Fatalf("ReadBlob %s: %v (%d bytes)", ds[i], err, buf.Len())
		}
	}
}

// treeBlobs returns a root Directory holding file as "f", and its Tree blob.
func treeBlobs(t *testing.T, file []byte) (root, tree []byte) {
	d := cache.DigestOf(file)
	dir := &repb.Directory{Files: []*repb.FileNode{{Name: "f", Digest: d.Proto()}}}
	root, err := proto.Marshal(dir)
	if err != nil {
		t.Fatal(err)
	}
	tree, err = proto.Marshal(&repb.Tree{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	return root, tree
}

// TestServeQuota: over its quota the server evicts least recently used blobs
// in the background, but never a blob an action cache entry it keeps needs,
// even when that blob is the oldest in the store.
func TestServeQuota(t *testing.T) {
	const unit = 64 << 10
	s := startServe(t, "--quota", strconv.Itoa(16*unit))
	put := func() string {
		blob, hash := randomBlob(t, unit)
		if code, _ := s.request("PUT", "/cas/"+hash, blob, true); code != http.StatusOK {
			t.Fatalf("PUT: status %d", code)
		}
		return hash
	}
	a, b := put(), put()
	ar, _ := proto.Marshal(&repb.ActionResult{OutputFiles: []*repb.OutputFile{
		{Path: "a", Digest: &repb.Digest{Hash: a, SizeBytes: unit}},
		{Path: "b", Digest: &repb.Digest{Hash: b, SizeBytes: unit}},
	}})
	_, key := randomBlob(t, 10)
	if code, _ := s.request("PUT", "/ac/"+key, ar, true); code != http.StatusOK {
		t.Fatalf("PUT /ac: status %d", code)
	}
	var old []string
	for range 8 {
		old = append(old, put())
	}
	// A hit refreshes the entry; its blobs are then made the least recently
	// used files in the store.
	if code, _ := s.request("GET", "/ac/"+key, nil, true); code != http.StatusOK {
		t.Fatalf("GET /ac: status %d", code)
	}
	for _, h := range []string{a, b} {
		hourAgo := time.Now().Add(-time.Hour)
		if err := os.Chtimes(s.blobPath(h), hourAgo, hourAgo); err != nil {
			t.Fatal(err)
		}
	}
	for range 8 {
		put()
	}
	// Eviction runs in the background, and writes made while it scans need a
	// further scan: wait until the store is back under its quota.
	var body []byte
	eventually(t, e2eTimeout, "the server evicts down to its quota", func() bool {
		var st serve.Status
		_, body = s.request("GET", "/status", nil, true)
		return json.Unmarshal(body, &st) == nil && st.SizeBytes <= 16*unit && s.metric("gantry_serve_evictions_total") > 0
	})
	if code, _ := s.request("GET", "/ac/"+key, nil, true); code != http.StatusOK {
		t.Errorf("the kept entry is a miss after eviction (status %d): its blobs were evicted", code)
	}
	if _, err := os.Stat(s.blobPath(old[0])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the least recently used unreferenced blob was not evicted: %v", err)
	}
	s.stop()
	s.verifyStore()
}

// TestServeLeaseFencing: the build-once lease protocol over HTTP: the first
// asker holds the lease, a second waits; when the holder stops renewing, the
// lease expires and the second takes over with a higher fencing token; the
// server then refuses the first holder's entry and accepts the second's, after
// which askers are told to pull.
func TestServeLeaseFencing(t *testing.T) {
	s := startServe(t, "--lease-ttl", "300ms")
	_, key := randomBlob(t, 10)
	lease := func(token uint64) remote.LeaseReply {
		t.Helper()
		code, body := s.request("POST", fmt.Sprintf("/lease/%s?token=%d", key, token), nil, true)
		var r remote.LeaseReply
		if code != http.StatusOK || json.Unmarshal(body, &r) != nil {
			t.Fatalf("POST /lease: status %d: %s", code, body)
		}
		return r
	}
	first := lease(0)
	if !first.Granted || first.Token == 0 {
		t.Fatalf("first asker: %+v, want the lease", first)
	}
	if r := lease(0); r.Granted || r.Present || r.WaitMs <= 0 {
		t.Fatalf("second asker while the lease is held: %+v, want to wait", r)
	}
	if r := lease(first.Token); !r.Granted || r.Token != first.Token {
		t.Fatalf("renewal by the holder: %+v", r)
	}
	var second remote.LeaseReply
	eventually(t, e2eTimeout, "the lease expires and a waiter takes it", func() bool {
		second = lease(0)
		return second.Granted
	})
	if second.Token <= first.Token {
		t.Fatalf("takeover token %d is not above the first holder's %d", second.Token, first.Token)
	}
	blob, hash := randomBlob(t, 100)
	s.request("PUT", "/cas/"+hash, blob, true)
	ar, _ := proto.Marshal(&repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "a", Digest: &repb.Digest{Hash: hash, SizeBytes: 100}}}})
	if code, body := s.request("PUT", "/ac/"+key, ar, true, remote.FencingHeader, strconv.FormatUint(first.Token, 10)); code != http.StatusConflict {
		t.Errorf("AC update with the expired holder's token: status %d (%s), want 409", code, body)
	}
	if code, _ := s.request("GET", "/ac/"+key, nil, true); code != http.StatusNotFound {
		t.Errorf("the fenced update was stored (status %d)", code)
	}
	if code, body := s.request("PUT", "/ac/"+key, ar, true, remote.FencingHeader, strconv.FormatUint(second.Token, 10)); code != http.StatusOK {
		t.Errorf("AC update with the current token: status %d (%s)", code, body)
	}
	if r := lease(0); !r.Present || r.Granted {
		t.Errorf("asking once the entry is stored: %+v, want present", r)
	}
}

// TestServeReloadAndAnonymousRead: SIGHUP rereads the token file (a new token
// works, a removed one is refused), and --allow-anonymous-read lets clients
// without credentials read, never write.
func TestServeReloadAndAnonymousRead(t *testing.T) {
	s := startServe(t, "--allow-anonymous-read")
	blob, hash := randomBlob(t, 100)
	if code, _ := s.request("PUT", "/cas/"+hash, blob, false); code != http.StatusUnauthorized {
		t.Errorf("anonymous PUT: status %d, want 401", code)
	}
	if code, _ := s.request("PUT", "/cas/"+hash, blob, true); code != http.StatusOK {
		t.Fatalf("PUT: status %d", code)
	}
	if code, body := s.request("GET", "/cas/"+hash, nil, false); code != http.StatusOK || !bytes.Equal(body, blob) {
		t.Errorf("anonymous GET: status %d", code)
	}
	if err := os.WriteFile(s.tokens, []byte("rotated-token ci\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.cmd.Process.Signal(syscall.SIGHUP)
	old := s.token
	s.token = "rotated-token"
	other, otherHash := randomBlob(t, 100)
	eventually(t, e2eTimeout, "the new token is accepted after SIGHUP", func() bool {
		code, _ := s.request("PUT", "/cas/"+otherHash, other, true)
		return code == http.StatusOK
	})
	s.token = old
	if code, _ := s.request("PUT", "/cas/"+otherHash, other, true); code != http.StatusForbidden {
		t.Errorf("PUT with the removed token after SIGHUP: status %d, want 403", code)
	}
	s.stop()
	if strings.Contains(s.log(), "rotated-token") || strings.Contains(s.log(), old) {
		t.Error("a token appears in the server's log")
	}
}
