package remote

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/testhttp"
)

// BenchmarkPullArtifact pulls one artifact of 200 files of 256 KiB from an
// in-process HTTP cache on loopback into an empty cache: every blob verified,
// written and made durable before the ref (bench/pull.sh measures the same
// against nginx and curl). The server's CPU is in the profile too.
func BenchmarkPullArtifact(b *testing.B) {
	const files, size = 200, 256 << 10
	srv := httptest.NewServer(&testhttp.Store{Prefix: "/prefix/"})
	b.Cleanup(srv.Close)
	store, err := Open(Spec{URL: srv.URL + "/prefix/"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	src := openTestCache(b)
	dir := b.TempDir()
	for i := range files {
		data := make([]byte, size)
		rand.Read(data)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	root, err := src.StoreTree(dir)
	if err != nil {
		b.Fatal(err)
	}
	a := &cache.Artifact{Project: "bench", Element: "big.toml", Key: strings.Repeat("ab", 32), Success: true, Files: root}
	if err := src.Commit(a); err != nil {
		b.Fatal(err)
	}
	if a, err = src.Lookup(a.Project, a.Element, a.Key); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := PushArtifact(ctx, src, store, a, nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(files * size)
	for b.Loop() {
		b.StopTimer()
		dst := openTestCache(b)
		b.StartTimer()
		if _, err := PullArtifact(ctx, dst, store, a.Project, a.Element, a.Key, nil); err != nil {
			b.Fatal(err)
		}
	}
}
