package serve

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
)

// BenchmarkServeRead reads blobs from `cache serve` on loopback with 8
// concurrent clients and a bearer token, the access log written to a file:
// 4 KiB blobs (requests/s; the server's CPU per request is in the profile)
// and 16 MiB ones (MB/s), over HTTP and gRPC. bench/serve.sh measures the
// same against nginx.
func BenchmarkServeRead(b *testing.B) {
	dir := b.TempDir()
	tokens := filepath.Join(b.TempDir(), "tokens")
	token := filepath.Join(b.TempDir(), "token")
	logFile, err := os.Create(filepath.Join(b.TempDir(), "log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { logFile.Close() })
	if err := os.WriteFile(tokens, []byte("s3cret bench\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	c, err := cache.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	put := func(n, size int) []cache.Digest {
		var ds []cache.Digest
		for range n {
			data := make([]byte, size)
			rand.Read(data)
			d, err := c.PutBlob(data)
			if err != nil {
				b.Fatal(err)
			}
			ds = append(ds, d)
		}
		return ds
	}
	small, large := put(256, 4<<10), put(2, 16<<20)
	srv, err := New(Options{Dir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", TokenFile: tokens, Log: logFile, ShutdownGrace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	h, g := srv.Addrs()
	for _, proto := range []string{"http", "grpc"} {
		addr := map[string]string{"http": h, "grpc": g}[proto]
		store, err := remote.Open(remote.Spec{URL: proto + "://" + addr, TokenFile: token})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close() })
		for _, set := range []struct {
			name string
			ds   []cache.Digest
		}{{"4KiB", small}, {"16MiB", large}} {
			b.Run(fmt.Sprintf("%s/%s", proto, set.name), func(b *testing.B) {
				b.SetBytes(set.ds[0].Size)
				b.SetParallelism(4) // 8 clients on 2 processors
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						d := set.ds[int(next.Add(1))%len(set.ds)]
						if err := store.ReadBlob(ctx, d, io.Discard); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
