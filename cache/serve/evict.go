package serve

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"google.golang.org/protobuf/proto"
)

// evictor keeps the server's store under its quota, in the background: reads
// never wait for it (a blob removed while it is being sent stays readable
// through the open file). Least recently used first, where use is the file's
// mtime (written, or refreshed by a hit): an ActionCache entry, a Remote
// Asset record (asset.go) and the unreferenced blobs are the units evicted; a
// blob referenced by an entry or record goes only with the last one that
// references it. A blob refreshed after the scan
// began (an entry written meanwhile touches its blobs) is kept; should one
// still go, the entry that needs it reads as a miss (ReadActionResult), never half-present.
//
// A store that is also a local cache may hold executable twins (cache's twin.go): they
// count towards the quota, a twin goes with its blob, and a twin whose blob is
// gone is a unit of its own, as cache gc has them.
type evictor struct {
	c       *cache.Cache
	quota   int64
	metrics *serverMetrics
	log     *slog.Logger

	size    atomic.Int64 // store size at the last scan, plus bytes written since
	written atomic.Int64 // every byte ever stored: writes during a scan are not lost
	over    atomic.Int64 // the store's size after the last scan's evictions, when still over the quota; else 0
	kick    chan struct{}
	scanned atomic.Int64 // scans done, for tests
	// scanAt is when the last scan started (Unix nanoseconds; 0 before any):
	// a read of a blob not refreshed since refreshes it (touchBlob).
	scanAt atomic.Int64
}

// touchStep is the resolution of the LRU: a read refreshes a blob's time only
// when that time is older than this, or older than the start of the evictor's
// last scan (whose removals keep what was refreshed since) — most reads of a
// busy blob make no utimensat, which also dirties its inode.
const touchStep = 10 * time.Second

// touchBlob marks blob d, read now, as used; mtime is its time as opened.
func (s *Server) touchBlob(d cache.Digest, mtime time.Time) {
	if time.Since(mtime) < touchStep && mtime.UnixNano() > s.evictor.scanAt.Load() {
		return
	}
	s.c.TouchBlob(d)
}

// touchRead is touchBlob for a blob read without its time at hand (a batch).
func (s *Server) touchRead(d cache.Digest) {
	if fi, err := os.Stat(s.c.BlobPath(d)); err == nil {
		s.touchBlob(d, fi.ModTime())
		return
	}
	s.c.TouchBlob(d)
}

// emptyDigest is the empty blob's, which a REAPI server always has: clients
// never upload it. The server stores it at start and never evicts it.
var emptyDigest = cache.DigestOf(nil)

// evictLowWater is the fraction of the quota a cleanup brings the store down to,
// so that it does not run again after every write.
const evictLowWater = 0.9

// evictInterval is how often the evictor scans without being woken: a store
// that grew behind the server's back (another process writing to it) is
// brought back under its quota within it.
const evictInterval = time.Minute

func newEvictor(c *cache.Cache, quota int64, m *serverMetrics, l *slog.Logger) *evictor {
	return &evictor{c: c, quota: quota, metrics: m, log: l, kick: make(chan struct{}, 1)}
}

// wrote tells the evictor that n bytes were stored.
func (e *evictor) wrote(n int64) {
	e.written.Add(n)
	if e.size.Add(n) > e.quota && e.quota > 0 {
		e.wake()
	}
}

// wake asks for a scan without waiting.
func (e *evictor) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// settle records the store's size after a scan that counted total: what was
// written while it ran is added (a file written during the walk may be counted
// twice, which can only cause an early scan), and a store still over the quota
// gets another scan, unless the scan evicted nothing and nothing was written
// since (what is left was used after the scan began; another scan at once
// would find the same: the next write or the minute's scan tries again).
func (e *evictor) settle(total, writtenAtStart int64, evicted bool) {
	size := total + e.written.Load() - writtenAtStart
	e.size.Store(size)
	if e.quota <= 0 {
		return
	}
	if total > e.quota {
		e.over.Store(total)
	} else {
		e.over.Store(0)
	}
	if size > e.quota && (evicted || size > total) {
		e.wake()
	}
}

// run keeps the quota until ctx is done. Without a quota it only measures the
// store once, for the size /metrics reports.
func (e *evictor) run(ctx context.Context) {
	if e.quota <= 0 {
		if err := e.evict(); err != nil {
			e.log.Error("measuring the store's size", "error", err)
		}
		return
	}
	tick := time.NewTicker(evictInterval)
	defer tick.Stop()
	for {
		if err := e.evict(); err != nil {
			e.log.Error("keeping the quota: scanning the store failed; it is scanned again within a minute", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		case <-tick.C:
		}
	}
}

type evictUnit struct {
	path  string
	size  int64
	mtime time.Time
	refs  []string // blobs an AC entry references
	isAC  bool
	blob  bool       // a blob of cas/, removed with its twin (cache.RemoveBlob)
	twin  *evictUnit // a blob's executable twin, removed with it
}

// evict scans the store and removes least recently used units until it is
// under evictLowWater of the quota.
func (e *evictor) evict() error {
	scanStart := time.Now()
	if e.quota > 0 { // without one, a scan only measures: it removes nothing
		e.scanAt.Store(scanStart.UnixNano())
	}
	writtenAtStart := e.written.Load()
	e.scanned.Add(1)
	blobs := map[string]*evictUnit{}
	var acs []*evictUnit
	var total int64
	walk := func(dir string, f func(path string, fi fs.FileInfo)) error {
		return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					total += fi.Size()
					f(p, fi)
				}
			}
			return nil
		})
	}
	if err := walk(filepath.Join(e.c.Root, cache.CASDir), func(p string, fi fs.FileInfo) {
		blobs[filepath.Base(p)] = &evictUnit{path: p, size: fi.Size(), mtime: fi.ModTime(), blob: true}
	}); err != nil {
		return err
	}
	var orphanTwins []*evictUnit
	if err := walk(filepath.Join(e.c.Root, cache.ExecDir), func(p string, fi fs.FileInfo) {
		t := &evictUnit{path: p, size: fi.Size(), mtime: fi.ModTime()}
		if b := blobs[filepath.Base(p)]; b != nil {
			b.twin = t
		} else {
			orphanTwins = append(orphanTwins, t)
		}
	}); err != nil {
		return err
	}
	if err := walk(filepath.Join(e.c.Root, cache.ACDir), func(p string, fi fs.FileInfo) {
		u := &evictUnit{path: p, size: fi.Size(), mtime: fi.ModTime(), isAC: true}
		if e.quota <= 0 { // measuring only: what an entry references does not matter
			acs = append(acs, u)
			return
		}
		if data, err := os.ReadFile(p); err == nil {
			ar := &repb.ActionResult{}
			if proto.Unmarshal(data, ar) == nil {
				ds, _ := e.c.ActionResultBlobs(ar)
				for _, d := range ds {
					u.refs = append(u.refs, d.Hash)
				}
			}
		}
		acs = append(acs, u)
	}); err != nil {
		return err
	}
	// Remote Asset records keep their blobs as entries do (asset.go).
	if err := walk(filepath.Join(e.c.Root, assetDir), func(p string, fi fs.FileInfo) {
		acs = append(acs, &evictUnit{path: p, size: fi.Size(), mtime: fi.ModTime(), isAC: true, refs: assetRefs(e.c, p)})
	}); err != nil {
		return err
	}
	if e.quota <= 0 || total <= e.quota {
		e.settle(total, writtenAtStart, false)
		return nil
	}
	refcount := map[string]int{}
	for _, a := range acs {
		for _, h := range a.refs {
			refcount[h]++
		}
	}
	units := append(append([]*evictUnit(nil), acs...), orphanTwins...)
	for h, b := range blobs {
		if refcount[h] == 0 && h != emptyDigest.Hash {
			units = append(units, b)
		}
	}
	sort.Slice(units, func(i, j int) bool { return units[i].mtime.Before(units[j].mtime) })
	target := int64(float64(e.quota) * evictLowWater)
	var evicted, evictedBytes int64
	remove := func(u *evictUnit) {
		if !u.isAC {
			// Refreshed since the scan: in use again, keep it.
			if fi, err := os.Stat(u.path); err != nil || !fi.ModTime().Before(scanStart) {
				return
			}
		}
		freed := u.size
		if u.blob {
			// The store's twins rule: its executable twin goes with it.
			blob, twin, _ := e.c.RemoveBlob(filepath.Base(u.path))
			if !blob {
				return
			}
			if twin && u.twin != nil {
				freed += u.twin.size
			}
		} else if os.Remove(u.path) != nil {
			return
		}
		total -= freed
		evicted++
		evictedBytes += freed
		e.metrics.evictions.Inc()
		e.metrics.evictedBytes.Add(float64(freed))
		e.log.Debug("evicted", "path", u.path, "bytes", freed)
	}
	for _, u := range units {
		if total <= target {
			break
		}
		remove(u)
		for _, h := range u.refs {
			if refcount[h]--; refcount[h] == 0 && blobs[h] != nil {
				remove(blobs[h])
			}
		}
	}
	e.log.Info("evicted to keep the quota", "units", evicted, "bytes", evictedBytes, "size_bytes", total, "quota_bytes", e.quota)
	if total > e.quota {
		e.log.Warn("the store is still over its quota after eviction: what is left was used since the scan began", "size_bytes", total, "quota_bytes", e.quota)
	}
	e.settle(total, writtenAtStart, evicted > 0)
	return nil
}
