package remote

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/gantry-build/gantry/cache"
)

// Throughput of the grpc store on loopback, against bst-artifact-server
// (Python) and the in-process Go REAPI server of the tests: large blobs over
// ByteStream (MB/s) and small blobs in batches (blobs/s, 16 concurrent
// callers as the transfer layer makes). bench/grpc.sh runs them.

func benchServers(b *testing.B, run func(b *testing.B, s Store)) {
	b.Run("bst-artifact-server", func(b *testing.B) { run(b, openGRPC(b, Spec{URL: startBST(b, true)})) })
	b.Run("go-reapi", func(b *testing.B) {
		run(b, openGRPC(b, Spec{URL: "grpc://" + newTestREAPI().start(b)}))
	})
}

func BenchmarkGRPCByteStream(b *testing.B) {
	const size = 64 << 20
	blobs := testBlobs(0, size)
	delete(blobs, cache.DigestOf(nil))
	var d cache.Digest
	for d = range blobs {
	}
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(blobs[d])), nil }
	benchServers(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		b.Run("write", func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() { // a rewrite: the Go server ends it early, bst-artifact-server takes it all
				if err := s.WriteBlob(ctx, d, open); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("read", func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				if err := s.ReadBlob(ctx, d, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

func BenchmarkGRPCBatch(b *testing.B) {
	blobs := testBlobs(2000) // 1 B to 20 KB, about 10 KB on average
	benchServers(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		b.Run("write", func(b *testing.B) {
			for b.Loop() {
				if err := putBlobs(ctx, s, blobs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(blobs)*b.N)/b.Elapsed().Seconds(), "blobs/s")
		})
		b.Run("read", func(b *testing.B) {
			for b.Loop() {
				if err := checkBlobs(ctx, s, blobs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(blobs)*b.N)/b.Elapsed().Seconds(), "blobs/s")
		})
	})
}
