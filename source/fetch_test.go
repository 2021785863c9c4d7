package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gantry-build/gantry/internal/testhttp"
)

// newTarServer serves files on 127.0.0.1, misbehaving on purpose as the path says
// (testhttp.FileServer: /NAME, /flaky/N/NAME, /truncate/NAME, /cut/NAME, /wrong/NAME,
// /status/N, /stall, /trickle, /endless).
func newTarServer(t *testing.T, files map[string][]byte) *testhttp.FileServer {
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: data}
	}
	s := testhttp.NewFileServer(fsys)
	t.Cleanup(s.Close)
	return s
}

func fetchOpts(t *testing.T) FetchOptions {
	return FetchOptions{SourcesDir: filepath.Join(t.TempDir(), "sources"), IdleTimeout: 5 * time.Second}
}

func TestFetchTarAndStage(t *testing.T) {
	archive := gzipped(t, makeTar(t,
		dir("hello-1.0/"), file("hello-1.0/README", "hi\n"), exe("hello-1.0/configure", "#!/bin/sh\n"),
		symlink("hello-1.0/LINK", "README")))
	srv := newTarServer(t, map[string][]byte{"hello.tar.gz": archive})
	o := fetchOpts(t)
	var lastDone, lastTotal int64
	o.Progress = func(done, total int64) { lastDone, lastTotal = done, total }
	s := &Spec{Kind: Tar, URL: srv.URL + "/hello.tar.gz", Ref: sha(archive), BaseDir: "*"}

	if Cached(o.SourcesDir, s) {
		t.Fatal("Cached before fetching")
	}
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	if !Cached(o.SourcesDir, s) {
		t.Fatal("not Cached after fetching")
	}
	if lastDone != int64(len(archive)) || lastTotal != int64(len(archive)) {
		t.Errorf("last progress = %d/%d, want %d/%d", lastDone, lastTotal, len(archive), len(archive))
	}
	if got := readFile(t, filepath.Join(o.SourcesDir, "files", s.Ref)); got != string(archive) {
		t.Error("the cached file is not the archive")
	}
	if entries, _ := os.ReadDir(filepath.Join(o.SourcesDir, "tmp")); len(entries) != 0 {
		t.Errorf("tmp/ keeps %d entries", len(entries))
	}

	// Fetching again is a no-op without the network.
	before := srv.Total()
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	if n := srv.Total() - before; n != 0 {
		t.Errorf("a cached fetch made %d requests", n)
	}

	build := t.TempDir()
	s.Directory = "src"
	if err := Stage(context.Background(), s, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(listTree(t, filepath.Join(build, "src")), " ")
	if want := "LINK->README README=hi\n configure=#!/bin/sh\n"; got != want {
		t.Errorf("staged %q, want %q", got, want)
	}
	info, err := os.Stat(filepath.Join(build, "src", "configure"))
	if err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("configure mode = %v, %v; want 0755", info.Mode(), err)
	}
}

func TestTrackTarDownloadsIntoCache(t *testing.T) {
	archive := makeTar(t, file("a", "1"))
	srv := newTarServer(t, map[string][]byte{"a.tar": archive})
	o := fetchOpts(t)
	s := &Spec{Kind: Tar, URL: srv.URL + "/a.tar"}
	ref, err := Track(context.Background(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	if ref != sha(archive) {
		t.Fatalf("Track = %s, want %s", ref, sha(archive))
	}
	if s.Ref != "" {
		t.Error("Track changed the spec")
	}
	s.Ref = ref
	before := srv.Total()
	if !Cached(o.SourcesDir, s) {
		t.Error("tracked source not Cached")
	}
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	if srv.Total() != before {
		t.Error("Fetch after Track used the network")
	}
}

func TestFetchErrors(t *testing.T) {
	archive := gzipped(t, makeTar(t, file("a", "1")))
	srv := newTarServer(t, map[string][]byte{"a.tar.gz": archive})
	tests := []struct {
		path      string
		temporary bool
		status    int
		contains  []string
	}{
		{path: "/status/404", status: 404, contains: []string{"404"}},
		{path: "/status/403", status: 403, contains: []string{"403"}},
		{path: "/status/429", status: 429, temporary: true, contains: []string{"429"}},
		{path: "/status/408", status: 408, temporary: true},
		{path: "/status/500", status: 500, temporary: true},
		{path: "/status/503", status: 503, temporary: true, contains: []string{"503 Service Unavailable"}},
		{path: "/truncate/a.tar.gz", temporary: true, contains: []string{fmt.Sprintf("%d of %d bytes", len(archive)/2, len(archive))}},
		{path: "/cut/a.tar.gz", temporary: true, contains: []string{fmt.Sprintf("connection closed after %d bytes", len(archive)/2)}},
		{path: "/wrong/a.tar.gz", contains: []string{"checksum mismatch", sha(archive), sha([]byte(testhttp.WrongBody))}},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.path[1:], "/", "-"), func(t *testing.T) {
			o := fetchOpts(t)
			s := &Spec{Kind: Tar, URL: srv.URL + tt.path, Ref: sha(archive)}
			err := Fetch(context.Background(), s, o)
			if err == nil {
				t.Fatal("Fetch succeeded")
			}
			t.Log(err)
			if IsTemporary(err) != tt.temporary {
				t.Errorf("IsTemporary = %t, want %t: %v", !tt.temporary, tt.temporary, err)
			}
			if !strings.Contains(err.Error(), s.URL) {
				t.Errorf("error does not name the url: %v", err)
			}
			for _, c := range tt.contains {
				if !strings.Contains(err.Error(), c) {
					t.Errorf("error does not contain %q: %v", c, err)
				}
			}
			var ne *NetworkError
			if tt.status != 0 && (!errors.As(err, &ne) || ne.Status != tt.status) {
				t.Errorf("error is not a NetworkError with status %d: %#v", tt.status, err)
			}
			if Cached(o.SourcesDir, s) {
				t.Error("a failed fetch left the source Cached")
			}
			if entries, _ := os.ReadDir(filepath.Join(o.SourcesDir, "tmp")); len(entries) != 0 {
				t.Errorf("a failed fetch left %d files in tmp/", len(entries))
			}
		})
	}
}

func TestFetchUnavailableThenAvailable(t *testing.T) {
	archive := makeTar(t, file("a", "1"))
	srv := newTarServer(t, map[string][]byte{"a.tar": archive})
	o := fetchOpts(t)
	s := &Spec{Kind: Tar, URL: srv.URL + "/flaky/1/a.tar", Ref: sha(archive)}
	err := Fetch(context.Background(), s, o)
	if !IsTemporary(err) {
		t.Fatalf("first fetch: want a temporary error, got %v", err)
	}
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatalf("second fetch: %v", err)
	}
	if !Cached(o.SourcesDir, s) {
		t.Error("not Cached after the second fetch")
	}
}

func TestFetchStallTimesOut(t *testing.T) {
	srv := newTarServer(t, nil)
	o := fetchOpts(t)
	o.IdleTimeout = 200 * time.Millisecond
	s := &Spec{Kind: Tar, URL: srv.URL + "/stall", Ref: strings.Repeat("0", 64)}
	start := time.Now()
	err := Fetch(context.Background(), s, o)
	elapsed := time.Since(start)
	t.Log(err)
	if !IsTemporary(err) {
		t.Fatalf("want a temporary error, got %v", err)
	}
	if !strings.Contains(err.Error(), "no data received for 200ms") {
		t.Errorf("error does not say it stalled: %v", err)
	}
	if elapsed > 5*time.Second {
		t.Errorf("the stalled fetch took %v", elapsed)
	}
}

// TestFetchDeadline: a server that keeps the idle timeout at bay with a byte now and
// then still fails at the overall deadline; not temporary (see DefaultNetDeadline).
func TestFetchDeadline(t *testing.T) {
	srv := newTarServer(t, nil)
	o := fetchOpts(t)
	o.Deadline = 300 * time.Millisecond
	err := Fetch(context.Background(), &Spec{Kind: Tar, URL: srv.URL + "/trickle", Ref: strings.Repeat("0", 64)}, o)
	if err == nil || !strings.Contains(err.Error(), "not finished after 300ms, the download deadline") {
		t.Fatalf("want the deadline error, got %v", err)
	}
	if IsTemporary(err) {
		t.Error("a passed deadline is temporary")
	}
}

// TestFetchSizeLimit: a download larger than the limit fails, announced (Content-Length)
// or not (an endless chunked body), and leaves nothing in the source cache.
func TestFetchSizeLimit(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3<<20)
	srv := newTarServer(t, map[string][]byte{"big.tar": big})
	o := fetchOpts(t)
	o.MaxDownload = 1 << 20
	for _, path := range []string{"/big.tar", "/endless"} {
		err := Fetch(context.Background(), &Spec{Kind: Tar, URL: srv.URL + path, Ref: sha(big)}, o)
		if err == nil || !strings.Contains(err.Error(), "larger than 1.0 MiB (1048576 bytes), the download limit") {
			t.Fatalf("%s: want the size error, got %v", path, err)
		}
		if IsTemporary(err) {
			t.Errorf("%s: a download past the limit is temporary", path)
		}
	}
	t.Setenv("GANTRY_MAX_DOWNLOAD_SIZE", "2M")
	o.MaxDownload = 0
	if err := Fetch(context.Background(), &Spec{Kind: Tar, URL: srv.URL + "/big.tar", Ref: sha(big)}, o); err == nil || !strings.Contains(err.Error(), "larger than 2.0 MiB (2097152 bytes)") {
		t.Fatalf("want GANTRY_MAX_DOWNLOAD_SIZE applied, got %v", err)
	}
	if files, _ := os.ReadDir(filepath.Join(o.SourcesDir, "files")); len(files) != 0 {
		t.Errorf("the source cache holds %d files", len(files))
	}
}

func TestFetchCancelled(t *testing.T) {
	srv := newTarServer(t, nil)
	o := fetchOpts(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("interrupted by user")
	time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
	err := Fetch(ctx, &Spec{Kind: Tar, URL: srv.URL + "/stall", Ref: strings.Repeat("0", 64)}, o)
	if !errors.Is(err, cause) {
		t.Fatalf("want the cancel cause, got %v", err)
	}
	if IsTemporary(err) {
		t.Error("a cancelled fetch is temporary")
	}
}

func TestFetchConnectionRefusedIsTemporary(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	err := Fetch(context.Background(), &Spec{Kind: Tar, URL: url + "/a.tar", Ref: strings.Repeat("0", 64)}, fetchOpts(t))
	if !IsTemporary(err) {
		t.Fatalf("want a temporary error, got %v", err)
	}
}

func TestFetchFileURL(t *testing.T) {
	archive := zstded(t, makeTar(t, file("pkg/a", "from a file url")))
	p := filepath.Join(t.TempDir(), "pkg.tar.zst")
	if err := os.WriteFile(p, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	o := fetchOpts(t)
	s := &Spec{Kind: Tar, URL: "file://" + p, BaseDir: "*"}
	ref, err := Track(context.Background(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	s.Ref = ref
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	build := t.TempDir()
	if err := Stage(context.Background(), s, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(build, "a")); got != "from a file url" {
		t.Errorf("staged %q", got)
	}

	missing := &Spec{Kind: Tar, URL: "file://" + p + ".missing", Ref: ref}
	err = Fetch(context.Background(), missing, fetchOpts(t))
	if err == nil || IsTemporary(err) || !strings.Contains(err.Error(), missing.URL) {
		t.Errorf("missing file: want a permanent error naming the url, got %v", err)
	}
}

func TestFetchRejectsBadRef(t *testing.T) {
	err := Fetch(context.Background(), &Spec{Kind: Tar, URL: "http://127.0.0.1:1/a.tar", Ref: "../../etc/passwd"}, fetchOpts(t))
	if err == nil || !strings.Contains(err.Error(), "not a sha256") {
		t.Fatalf("want a bad-ref error, got %v", err)
	}
	if Cached(t.TempDir(), &Spec{Kind: Tar, Ref: "../x"}) {
		t.Error("Cached with a path as ref")
	}
}

func TestRemote(t *testing.T) {
	body := []byte("#!/bin/sh\necho tool\n")
	srv := newTarServer(t, map[string][]byte{"tool.sh": body})
	o := fetchOpts(t)
	s := &Spec{Kind: Remote, URL: srv.URL + "/tool.sh", Ref: sha(body), Directory: "bin", Executable: true}
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	build := t.TempDir()
	so := StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build}
	if err := Stage(context.Background(), s, so); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(build, "bin", "tool.sh")
	info, err := os.Stat(p)
	if err != nil || info.Mode().Perm() != 0o755 || readFile(t, p) != string(body) {
		t.Fatalf("staged %v %v", info, err)
	}

	named := *s
	named.Filename, named.Executable = "renamed.txt", false
	if err := Stage(context.Background(), &named, so); err != nil {
		t.Fatal(err)
	}
	info, err = os.Stat(filepath.Join(build, "bin", "renamed.txt"))
	if err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("renamed: %v %v", info, err)
	}

	bad := *s
	bad.Filename = "../escape"
	if err := Stage(context.Background(), &bad, so); err == nil {
		t.Error("a filename with a slash was staged")
	}
}

func TestStageNotFetched(t *testing.T) {
	s := &Spec{Kind: Tar, URL: "http://127.0.0.1:1/a.tar", Ref: strings.Repeat("a", 64)}
	err := Stage(context.Background(), s, StageOptions{SourcesDir: t.TempDir(), BuildRoot: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "gantry fetch") {
		t.Fatalf("want a not-fetched error, got %v", err)
	}
}

func TestStageDetectsCorruptCache(t *testing.T) {
	archive := makeTar(t, file("a", "1"))
	o := fetchOpts(t)
	s := &Spec{Kind: Tar, URL: "file:///x", Ref: sha(archive)}
	os.MkdirAll(filepath.Join(o.SourcesDir, "files"), 0o755)
	os.WriteFile(filepath.Join(o.SourcesDir, "files", s.Ref), []byte("garbage"), 0o644)
	err := Stage(context.Background(), s, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("want a corruption error, got %v", err)
	}
}

func TestProgress(t *testing.T) {
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			w.Write(big[:1000]) // no Content-Length: flushed before the end
			w.(http.Flusher).Flush()
			w.Write(big[1000:])
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		w.Write(big)
	}))
	defer srv.Close()
	for _, tt := range []struct {
		path  string
		total int64
	}{{"/sized", int64(len(big))}, {"/chunked", 0}} {
		t.Run(tt.path[1:], func(t *testing.T) {
			o := fetchOpts(t)
			var calls []int64
			o.Progress = func(done, total int64) {
				if total != tt.total {
					t.Errorf("total = %d, want %d", total, tt.total)
				}
				calls = append(calls, done)
			}
			if err := Fetch(context.Background(), &Spec{Kind: Remote, URL: srv.URL + tt.path, Ref: sha(big)}, o); err != nil {
				t.Fatal(err)
			}
			if len(calls) < 2 || calls[len(calls)-1] != int64(len(big)) {
				t.Fatalf("progress calls %v", calls)
			}
			for i := 1; i < len(calls); i++ {
				if calls[i] < calls[i-1] {
					t.Fatalf("progress went backwards: %v", calls)
				}
			}
		})
	}
}

// Two jobs fetching the same URL at once download it once: the second waits for the
// first's lock and finds the file cached. The first download is held until a second
// request arrives (the bug) or a quarter second passes without one.
func TestFetchSameURLConcurrentlyDownloadsOnce(t *testing.T) {
	body := []byte("one download is enough\n")
	var requests atomic.Int64
	first := make(chan struct{})
	second := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch requests.Add(1) {
		case 1:
			close(first)
			select {
			case <-second:
			case <-time.After(250 * time.Millisecond):
			}
		case 2:
			close(second)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	defer srv.Close()
	o := fetchOpts(t)
	spec := func() *Spec { return &Spec{Kind: Remote, URL: srv.URL + "/file.txt", Ref: sha(body)} }
	errs := make(chan error, 2)
	go func() { errs <- Fetch(context.Background(), spec(), o) }()
	<-first
	go func() { errs <- Fetch(context.Background(), spec(), o) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the URL was downloaded %d times, want once", n)
	}
	if !Cached(o.SourcesDir, spec()) {
		t.Error("not cached after both fetches")
	}
}
