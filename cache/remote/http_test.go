package remote

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/testhttp"
	"github.com/gantry-build/gantry/internal/testtree"
	"github.com/gantry-build/gantry/internal/version"
)

// memRemote is a small HTTP cache server (bazel-remote's protocol) on 127.0.0.1,
// with a hook to misbehave.
type memRemote struct {
	testhttp.Store
	mu sync.Mutex
	// fault, when set, may answer a request itself (returning true).
	fault func(w http.ResponseWriter, r *http.Request) bool
	srv   *httptest.Server
}

func newMemRemote(t *testing.T) *memRemote {
	m := &memRemote{Store: testhttp.Store{Prefix: "/prefix/"}}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		fault := m.fault
		m.mu.Unlock()
		if fault != nil && fault(w, r) {
			return
		}
		m.Store.ServeHTTP(w, r)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *memRemote) setFault(f func(w http.ResponseWriter, r *http.Request) bool) {
	m.mu.Lock()
	m.fault = f
	m.mu.Unlock()
}

func (m *memRemote) store(t *testing.T, userinfo string) Store {
	t.Helper()
	return m.storeIdle(t, userinfo, 0)
}

// storeIdle is store with an idle timeout (0: the default).
func (m *memRemote) storeIdle(t *testing.T, userinfo string, idle time.Duration) Store {
	t.Helper()
	u := strings.Replace(m.srv.URL, "http://", "http://"+userinfo, 1) + "/prefix/"
	s, err := Open(Spec{URL: u, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// builtArtifact commits a successful artifact of a few files (one large enough to be
// streamed in several reads) and returns it.
func builtArtifact(t *testing.T, c *cache.Cache) *cache.Artifact {
	t.Helper()
	src := t.TempDir()
	testtree.Write(t, src, map[string]string{
		"usr/bin/app":          "exec:#!/bin/sh\necho hi\n",
		"usr/share/doc/README": "file:" + strings.Repeat("gantry ", 50000),
		"usr/lib/libx.so":      "symlink:libx.so.1",
		"usr/lib/libx.so.1":    "file:elf",
		"empty":                "dir",
	}, nil)
	root, err := c.StoreTree(src)
	if err != nil {
		t.Fatal(err)
	}
	log, err := c.PutBlob([]byte("build log\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := &cache.Artifact{Project: "demo", Element: "base/app.toml", Key: strings.Repeat("ab", 32), Success: true, Files: root, Log: log,
		Dependencies: map[string]string{"lib.toml": strings.Repeat("cd", 32)}}
	if err := c.Commit(a); err != nil {
		t.Fatal(err)
	}
	got, err := c.Lookup(a.Project, a.Element, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestHTTPRemotePushPullRoundTrip(t *testing.T) {
	remote := newMemRemote(t)
	var mu sync.Mutex // the push's uploads run at once
	var auth []string
	remote.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		auth = append(auth, r.Header.Get("Authorization"))
		return false
	})
	src, dst := openTestCache(t), openTestCache(t)
	a := builtArtifact(t, src)
	store := remote.store(t, "user:s3cret@")
	ctx := context.Background()

	if _, err := PullArtifact(ctx, dst, store, a.Project, a.Element, a.Key, nil); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("pull before push: got %v, want a miss", err)
	}
	var last [2]int64
	tr, pushed, err := PushArtifact(ctx, src, store, a, func(done, total int64) { last = [2]int64{done, total} })
	if err != nil || !pushed {
		t.Fatalf("push: pushed %v, %v", pushed, err)
	}
	if tr.Blobs == 0 || last[0] != last[1] || last[1] != tr.Bytes {
		t.Fatalf("push transfer %+v, last progress %v", tr, last)
	}
	if _, pushed, err := PushArtifact(ctx, src, store, a, nil); err != nil || pushed {
		t.Fatalf("second push: pushed %v, %v; want nothing to do", pushed, err)
	}
	if _, err := PullArtifact(ctx, dst, store, a.Project, a.Element, a.Key, nil); err != nil {
		t.Fatalf("pull: %v", err)
	}
	got, err := dst.Lookup(a.Project, a.Element, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Files != a.Files || got.Log != a.Log || got.Dependencies["lib.toml"] != a.Dependencies["lib.toml"] {
		t.Fatalf("pulled artifact %+v differs from %+v", got, a)
	}
	want, out := filepath.Join(t.TempDir(), "want"), filepath.Join(t.TempDir(), "out")
	if err := src.Checkout(a.Files, want, cache.CheckoutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dst.Checkout(got.Files, out, cache.CheckoutOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := testtree.Diff(testtree.Read(t, want), testtree.Read(t, out)); diff != "" {
		t.Fatal(diff)
	}
	if rep, err := dst.Verify(); err != nil || !rep.Clean() {
		t.Fatalf("verify after pull: %+v %v", rep, err)
	}
	for _, h := range auth {
		if !strings.HasPrefix(h, "Basic ") {
			t.Fatalf("request without basic auth: %q", h)
		}
	}
}

func TestHTTPRemoteCorruptBlobIsNeverStored(t *testing.T) {
	remote := newMemRemote(t)
	src, dst := openTestCache(t), openTestCache(t)
	a := builtArtifact(t, src)
	store := remote.store(t, "")
	if _, _, err := PushArtifact(context.Background(), src, store, a, nil); err != nil {
		t.Fatal(err)
	}
	// The remote now serves wrong bytes (of the right length) for the large file.
	var bad cache.Digest
	src.WalkTree(a.Files, func(e cache.TreeEntry) error {
		if e.Type == cache.TypeFile && e.Size > 1000 {
			bad = e.Digest
		}
		return nil
	})
	remote.Put("cas/"+bad.Hash, []byte(strings.Repeat("X", int(bad.Size))))
	_, err := PullArtifact(context.Background(), dst, store, a.Project, a.Element, a.Key, nil)
	if !IsKind(err, Corrupt) || !strings.Contains(err.Error(), bad.Hash) || !strings.Contains(err.Error(), remote.srv.URL) {
		t.Fatalf("pull of a corrupt blob: got %v, want a corrupt error naming the remote and blob %s", err, bad)
	}
	if dst.HasBlob(bad) {
		t.Fatal("the corrupt blob entered the local CAS")
	}
	if _, err := dst.Lookup(a.Project, a.Element, a.Key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("a ref was written for an incomplete pull: %v", err)
	}
	if leftovers, _ := os.ReadDir(filepath.Join(dst.Root, "tmp")); len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

func TestHTTPRemoteErrorKinds(t *testing.T) {
	remote := newMemRemote(t)
	store := remote.storeIdle(t, "", 200*time.Millisecond)
	release := make(chan struct{})
	for _, tc := range []struct {
		name  string
		fault func(w http.ResponseWriter, r *http.Request) bool
		kind  ErrorKind
		text  string
	}{
		{"401", func(w http.ResponseWriter, r *http.Request) bool { w.WriteHeader(401); return true }, Auth, "token-file"},
		{"503", func(w http.ResponseWriter, r *http.Request) bool { w.WriteHeader(503); return true }, Unavailable, "503"},
		{"400", func(w http.ResponseWriter, r *http.Request) bool { w.WriteHeader(400); return true }, Refused, "400"},
		{"stall", func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return true
		}, Unavailable, "no data received"},
		{"truncated", func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			w.Write([]byte("short"))
			return true
		}, Unavailable, "connection closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote.setFault(tc.fault)
			_, err := store.GetEntry(context.Background(), "k")
			if !IsKind(err, tc.kind) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v, want a %s error mentioning %q", err, tc.kind, tc.text)
			}
		})
	}
	close(release)
	remote.srv.Close()
	if _, err := store.GetEntry(context.Background(), "k"); !IsKind(err, Unavailable) {
		t.Fatalf("server gone: got %v, want unavailable", err)
	}
}

// TestPullArtifactOfAnotherElementWithTheSameKey: elements with the same inputs share a
// key, and so the remote's entry: a pull for one of them gets the artifact another
// pushed, recorded under its own name.
func TestPullArtifactOfAnotherElementWithTheSameKey(t *testing.T) {
	remote := newMemRemote(t)
	src, dst := openTestCache(t), openTestCache(t)
	a := builtArtifact(t, src)
	store := remote.store(t, "")
	if _, _, err := PushArtifact(context.Background(), src, store, a, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := PullArtifact(context.Background(), dst, store, a.Project, "twin.toml", a.Key, nil); err != nil {
		t.Fatalf("pull of a twin: %v", err)
	}
	got, err := dst.Lookup(a.Project, "twin.toml", a.Key)
	if err != nil || got.Files != a.Files || got.Element != "twin.toml" {
		t.Fatalf("twin's artifact %+v, %v", got, err)
	}
}

// TestHTTPSRemoteWithServerCAAndToken: https with the server's CA from server-ca and a
// bearer token from token-file; without the CA the certificate is refused, not retried.
func TestHTTPSRemoteWithServerCAAndToken(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := Open(Spec{URL: srv.URL, ServerCA: ca, TokenFile: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.GetEntry(context.Background(), "k"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("with server-ca: got %v, want a miss", err)
	}
	if len(auth) != 1 || auth[0] != "Bearer t0ken" {
		t.Fatalf("authorization headers %q, want the bearer token", auth)
	}
	plain, err := Open(Spec{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.GetEntry(context.Background(), "k"); !IsKind(err, Refused) {
		t.Fatalf("without server-ca: got %v, want the certificate refused", err)
	}
}

// A spec's TokenEnv names the variable holding the bearer token (a --remote's
// GANTRY_REMOTE_TOKEN): it is sent as the token-file's would be, and the User-Agent
// says gantry and its version.
func TestHTTPRemoteTokenFromEnvironmentAndUserAgent(t *testing.T) {
	var mu sync.Mutex
	var auth, agents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth, agents = append(auth, r.Header.Get("Authorization")), append(agents, r.Header.Get("User-Agent"))
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer srv.Close()
	t.Setenv("TEST_REMOTE_TOKEN", " env-t0ken\n")
	store, err := Open(Spec{URL: srv.URL, TokenEnv: "TEST_REMOTE_TOKEN"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.GetEntry(context.Background(), "k"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("GetEntry = %v, want a miss", err)
	}
	if len(auth) != 1 || auth[0] != "Bearer env-t0ken" {
		t.Errorf("authorization headers %q, want the variable's bearer token", auth)
	}
	if len(agents) != 1 || agents[0] != version.UserAgent() || !strings.HasPrefix(agents[0], "gantry/") {
		t.Errorf("user agents %q, want %q", agents, version.UserAgent())
	}
	t.Setenv("TEST_REMOTE_TOKEN", "")
	if _, err := Open(Spec{URL: srv.URL, TokenEnv: "TEST_REMOTE_TOKEN"}); err == nil || err.Error() != "remote "+srv.URL+": TEST_REMOTE_TOKEN must hold one token on one line" {
		t.Errorf("an empty token variable: %v, want it named", err)
	}
}

// A blob left by a session the machine lost before its syncfs can be torn with its
// size and mode kept, and no ref names it; a pull adopting it by its size would hand
// it to a build's staging, which trusts blobs by type, size and mode.
func TestPullReplacesATornPresentBlob(t *testing.T) {
	remote := newMemRemote(t)
	src, dst := openTestCache(t), openTestCache(t)
	a := builtArtifact(t, src)
	store := remote.store(t, "")
	if _, _, err := PushArtifact(context.Background(), src, store, a, nil); err != nil {
		t.Fatal(err)
	}
	var torn cache.Digest
	src.WalkTree(a.Files, func(e cache.TreeEntry) error {
		if e.Type == cache.TypeFile && e.Size > 1000 {
			torn = e.Digest
		}
		return nil
	})
	for _, d := range []cache.Digest{torn, a.Files} { // a file and the root Directory
		p := dst.BlobPath(d)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, d.Size), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if !dst.HasBlob(torn) || dst.HasIntactBlob(torn) {
		t.Fatalf("the torn blob: present %v, intact %v; want present by its size, not intact", dst.HasBlob(torn), dst.HasIntactBlob(torn))
	}
	if _, err := PullArtifact(context.Background(), dst, store, a.Project, a.Element, a.Key, nil); err != nil {
		t.Fatalf("pull: %v", err)
	}
	if !dst.HasIntactBlob(torn) || !dst.HasIntactBlob(a.Files) {
		t.Fatal("the pull adopted a torn blob instead of fetching it")
	}
	if rep, err := dst.Verify(); err != nil || !rep.Clean() {
		t.Fatalf("verify after pull: %+v %v", rep, err)
	}
}
