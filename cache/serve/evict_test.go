package serve

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
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
	m := newMetrics()
	e := newEvictor(c, 5*unit, m, discardLog)
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
	if got, want := testutil.ToFloat64(m.evictedBytes), float64(3*unit); got != want {
		t.Errorf("evicted %v bytes, want %v (a blob and two twins)", got, want)
	}
	if rep, err := c.Verify(); err != nil || !rep.Clean() {
		t.Errorf("Verify = %+v, %v; want clean", rep, err)
	}
}

// TestEvictorTable: what one eviction pass removes, least recently used first,
// down to 90% of the quota: blobs no entry references, and an action cache
// entry with the blobs only it referenced; a referenced blob only with its last
// entry, the empty blob never.
func TestEvictorTable(t *testing.T) {
	const unit = 64 << 10
	type blob struct {
		name string
		age  time.Duration
		ref  bool // referenced by the one action cache entry
	}
	for _, tc := range []struct {
		name     string
		quota    float64 // in units
		blobs    []blob
		entryAge time.Duration // 0: no entry
		empty    bool          // the empty blob is stored, older than all
		removed  []string      // blobs removed ("entry": the entry)
	}{
		{"under the quota nothing goes", 4,
			[]blob{{"a", 3 * time.Hour, false}, {"b", 2 * time.Hour, false}, {"c", time.Hour, false}}, 0, false, nil},
		{"oldest first, down to 90%", 2.5,
			[]blob{{"old", 3 * time.Hour, false}, {"mid", 2 * time.Hour, false}, {"new", time.Hour, false}}, 0, false, []string{"old"}},
		{"a referenced blob stays while its entry does", 2.5,
			[]blob{{"ref", 4 * time.Hour, true}, {"free", 2 * time.Hour, false}, {"new", time.Hour, false}}, time.Hour, false, []string{"free"}},
		{"an evicted entry takes its blobs", 1.5,
			[]blob{{"ref", time.Hour, true}, {"n1", time.Hour, false}, {"n2", time.Hour / 2, false}}, 5 * time.Hour, false, []string{"entry", "ref", "n1"}},
		{"the empty blob is never evicted", 0.5,
			[]blob{{"a", time.Hour, false}}, 0, true, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
			if err != nil {
				t.Fatal(err)
			}
			age := func(p string, d time.Duration) {
				t.Helper()
				then := time.Now().Add(-d)
				if err := os.Chtimes(p, then, then); err != nil {
					t.Fatal(err)
				}
			}
			paths := map[string]string{}
			ar := &repb.ActionResult{}
			for _, b := range tc.blobs {
				data := make([]byte, unit)
				rand.Read(data)
				d, err := c.PutBlob(data)
				if err != nil {
					t.Fatal(err)
				}
				paths[b.name] = c.BlobPath(d)
				if b.ref {
					ar.OutputFiles = append(ar.OutputFiles, &repb.OutputFile{Path: b.name, Digest: d.Proto()})
				}
			}
			if tc.entryAge > 0 {
				data, err := proto.Marshal(ar)
				if err != nil {
					t.Fatal(err)
				}
				key := cache.DigestOf([]byte(tc.name))
				if err := c.WriteActionResult(key, data); err != nil {
					t.Fatal(err)
				}
				paths["entry"] = filepath.Join(c.Root, cache.ACDir, key.Hash[:2], key.Hash)
				age(paths["entry"], tc.entryAge)
			}
			for _, b := range tc.blobs { // after the entry's write refreshed its blobs
				age(paths[b.name], b.age)
			}
			if tc.empty {
				d, err := c.PutBlob(nil)
				if err != nil {
					t.Fatal(err)
				}
				paths["empty"] = c.BlobPath(d)
				age(paths["empty"], 10*time.Hour)
			}
			e := newEvictor(c, int64(tc.quota*unit), newMetrics(), discardLog)
			if err := e.evict(); err != nil {
				t.Fatal(err)
			}
			for name, p := range paths {
				_, err := os.Stat(p)
				gone := errors.Is(err, os.ErrNotExist)
				if want := slices.Contains(tc.removed, name); gone != want {
					t.Errorf("%s: removed %v, want %v", name, gone, want)
				}
			}
		})
	}
}
