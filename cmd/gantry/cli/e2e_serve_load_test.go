package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
)

// TestServeSIGTERMDuringUploads: SIGTERM while 8 clients (gantry's HTTP and gRPC
// stores) upload 5 MiB blobs: the server exits 0, every blob it acknowledged is
// on disk and valid, and no partial file remains.
func TestServeSIGTERMDuringUploads(t *testing.T) {
	s := startServe(t, "--shutdown-grace", "10s")
	var (
		mu    sync.Mutex
		acked []string
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte(s.token+"\n"), 0o600)
	for c := range 8 {
		// Half over HTTP, half over gRPC (ByteStream: blobs over the batch limit).
		st, err := serveLoadStore(s, c, tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				blob, hash := randomBlob(t, 5<<20)
				err := st.WriteBlob(context.Background(), cache.DigestOf(blob), func() (io.ReadCloser, error) {
					return io.NopCloser(bytes.NewReader(blob)), nil
				})
				if err != nil {
					return // the server is going away
				}
				mu.Lock()
				acked = append(acked, hash)
				mu.Unlock()
			}
		}()
	}
	eventually(t, e2eTimeout, "the clients have stored 16 blobs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 16
	})
	s.stop()
	stop.Store(true)
	wg.Wait()
	for _, h := range acked {
		b, err := os.ReadFile(s.blobPath(h))
		if err != nil || fmt.Sprintf("%x", sha256.Sum256(b)) != h {
			t.Errorf("acknowledged blob %s: %v, or content does not match", h, err)
		}
	}
	s.verifyStore()
}

// serveLoadArtifacts is how many artifacts each client pushes and pulls in
// TestServeLoad; GANTRY_SERVE_LOAD raises it (the 2,000).
func serveLoadArtifacts(t *testing.T) int {
	if v := os.Getenv("GANTRY_SERVE_LOAD"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("GANTRY_SERVE_LOAD=%q: not a number", v)
		}
		return n
	}
	return 60
}

// TestServeLoad: 8 concurrent clients, half over HTTP and half over gRPC, each
// push artifacts (blobs, then the entry) and pull back every artifact its
// neighbour pushed: no error, no acknowledged write lost, the store verifies clean.
func TestServeLoad(t *testing.T) {
	s := startServe(t)
	n := serveLoadArtifacts(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte(s.token+"\n"), 0o600)
	const clients = 8
	keys := make([][]string, clients)
	entries := make([][]*remote.Entry, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := serveLoadStore(s, c, tokenFile)
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			for i := range n {
				record := []byte(fmt.Sprintf("record %d/%d %d", c, i, time.Now().UnixNano()))
				root, tree := treeBlobs(t, record)
				e := &remote.Entry{Files: cache.DigestOf(root), Tree: cache.DigestOf(tree), Record: cache.DigestOf(record)}
				for _, b := range [][]byte{record, root, tree} {
					if err := st.WriteBlob(context.Background(), cache.DigestOf(b), func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }); err != nil {
						errs <- fmt.Errorf("client %d: %w", c, err)
						return
					}
				}
				key := fmt.Sprintf("load-%d-%d-%d", c, i, start.UnixNano())
				if err := st.UpdateEntry(context.Background(), key, e); err != nil {
					errs <- fmt.Errorf("client %d: %w", c, err)
					return
				}
				keys[c] = append(keys[c], key)
				entries[c] = append(entries[c], e)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	pushed := time.Since(start)
	// Every client pulls what its neighbour pushed, over the other protocol.
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := serveLoadStore(s, c+1, tokenFile)
			if err != nil {
				t.Error(err)
				return
			}
			defer st.Close()
			for i, key := range keys[c] {
				got, err := st.GetEntry(context.Background(), key)
				if err != nil || *got != *entries[c][i] {
					t.Errorf("entry %s: %v", key, err)
					return
				}
				var buf bytes.Buffer
				if err := st.ReadBlob(context.Background(), got.Record, &buf); err != nil || cache.DigestOf(buf.Bytes()) != got.Record {
					t.Errorf("record of %s: %v", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d clients × %d artifacts: pushed in %v, pulled in %v", clients, n, pushed, time.Since(start)-pushed)
	s.verifyStore()
}

// serveLoadStore is gantry's remote store for load client c: even clients
// speak HTTP, odd ones gRPC.
func serveLoadStore(s *serveProc, c int, tokenFile string) (remote.Store, error) {
	url := "grpc://" + s.grpc
	if c%2 == 0 {
		url = "http://" + s.http
	}
	return remote.Open(remote.Spec{URL: url, TokenFile: tokenFile, Push: true})
}
