package serve

import (
	"crypto/rand"
	"errors"
	"io"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
)

// twinPath is where the store keeps the executable twin of blob d (ExecDir).
func twinPath(c *cache.Cache, d cache.Digest) string {
	return filepath.Join(c.Root, cache.ExecDir, d.Hash[:2], d.Hash)
}

// writeTwin makes the executable twin of blob d, whose content is data, as a
// linked checkout of an executable would.
func writeTwin(c *cache.Cache, d cache.Digest, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(twinPath(c, d)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(twinPath(c, d), data, 0o555)
}

// TestServeEvictionTakesTwins: `cache serve` on a store that is also a local
// cache counts executable twins towards its quota, evicts a twin with its blob
// and a twin whose blob is gone, and keeps the twins of the blobs it keeps.
func TestServeEvictionTakesTwins(t *testing.T) {
	const unit = 64 << 10
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	put := func(age time.Duration, twin bool) cache.Digest {
		t.Helper()
		data := make([]byte, unit)
		rand.Read(data)
		d, err := c.PutBlob(data)
		if err != nil {
			t.Fatal(err)
		}
		then := time.Now().Add(-age)
		paths := []string{c.BlobPath(d)}
		if twin {
			if err := writeTwin(c, d, data); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, twinPath(c, d))
		}
		for _, p := range paths {
			if err := os.Chtimes(p, then, then); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	orphan := put(4*time.Hour, true)
	os.Remove(c.BlobPath(orphan))
	oldest, old := put(3*time.Hour, true), put(2*time.Hour, true)
	kept := []cache.Digest{old, put(time.Hour, false), put(time.Hour, false)}

	// Four blobs and three twins: over a quota of five blobs only if twins count.
	m := newServerMetrics()
	e := newEvictor(c, 5*unit, m, log.New(io.Discard, "", 0))
	if err := e.evict(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{twinPath(c, orphan), c.BlobPath(oldest), twinPath(c, oldest)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("eviction kept %s: %v", p, err)
		}
	}
	for _, p := range []string{c.BlobPath(kept[0]), twinPath(c, kept[0]), c.BlobPath(kept[1]), c.BlobPath(kept[2])} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("eviction removed %s, which it did not need to: %v", p, err)
		}
	}
	if got, want := e.size.Load(), int64(4*unit); got != want {
		t.Errorf("the store's size after eviction = %d, want %d (three blobs and a twin)", got, want)
	}
	if got, want := m.evictedBytes.Load(), int64(3*unit); got != want {
		t.Errorf("evicted %d bytes, want %d (a blob and two twins)", got, want)
	}
	if rep, err := c.Verify(); err != nil || !rep.Clean() {
		t.Errorf("Verify = %+v, %v; want clean", rep, err)
	}
}
