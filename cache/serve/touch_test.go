package serve

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
)

// TestReadRefreshesOnlyStaleBlobs: a read (HTTP GET, ByteStream Read) refreshes
// a blob's time for the LRU when it is older than touchStep, or older than the
// start of the evictor's last scan; a blob refreshed a moment ago is left as
// it is (no utimensat per read).
func TestReadRefreshesOnlyStaleBlobs(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(t.TempDir(), "tokens")
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokens, []byte("s3cret ci\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Dir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", TokenFile: tokens, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Over gRPC the small blob is read in a batch, the large one over ByteStream.
	small, err := srv.c.PutBlob([]byte("a blob read often\n"))
	if err != nil {
		t.Fatal(err)
	}
	large, err := srv.c.PutBlob(bytes.Repeat([]byte("large "), 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	h, g := srv.Addrs()
	for _, c := range []struct {
		url string
		d   cache.Digest
	}{{"http://" + h, small}, {"grpc://" + g, small}, {"grpc://" + g, large}} {
		url, d, p := c.url, c.d, srv.c.BlobPath(c.d)
		store, err := remote.Open(remote.Spec{URL: url, TokenFile: token})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		readAt := func(mtime time.Time) time.Time {
			t.Helper()
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
			if err := store.ReadBlob(ctx, d, io.Discard); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			return fi.ModTime()
		}
		recent := time.Now().Add(-touchStep / 2).Truncate(time.Second)
		if got := readAt(recent); !got.Equal(recent) {
			t.Errorf("%s: a read of a blob used %v ago moved its time to %v", url, touchStep/2, got)
		}
		stale := time.Now().Add(-2 * touchStep)
		if got := readAt(stale); time.Since(got) > touchStep/2 {
			t.Errorf("%s: a read of a blob used %v ago left its time at %v", url, 2*touchStep, got)
		}
		srv.evictor.scanAt.Store(time.Now().UnixNano()) // a scan started after the blob's last use
		if got := readAt(recent); got.Equal(recent) {
			t.Errorf("%s: a read after a scan started left the blob's time before the scan", url)
		}
		srv.evictor.scanAt.Store(0)
	}
}
