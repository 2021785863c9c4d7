package cache

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// LowWater is the share of the quota an automatic cleanup brings the cache
// down to, so that the next few builds do not start another one at once.
const LowWater = 0.8

// CleanupOptions says what a cleanup (Cleanup) removes. Artifacts go in this
// order: those named in Remove, those unused for OlderThan, then the least
// recently used until the cache is at most Target bytes. Protected artifacts,
// and those a live session on the cache needs (session.go), are never removed.
// After the artifacts, every blob no remaining artifact reaches goes.
type CleanupOptions struct {
	Target    int64         // bytes; 0: no size target
	OlderThan time.Duration // 0: no age limit
	Remove    []ArtifactRef // removed whatever their age
	Protect   func(ArtifactRef) bool
	// Leftovers also removes what crashed processes left: tmp/ entries of
	// processes that no longer run, and partial downloads in sources/ older
	// than an hour; and what no session used for a month: loads/ files and
	// staged junctions.
	Leftovers bool
	DryRun    bool // only say what would go
	// AfterRemove, if set, is called after each artifact removed (a test seam
	// to kill a cleanup half-way).
	AfterRemove func()
}

// RemovedArtifact is an artifact a cleanup removed (or would remove).
type RemovedArtifact struct {
	ArtifactRef
	LastUse time.Time `json:"last-use"`
	Bytes   int64     `json:"bytes"` // the space its blobs took, shared ones included
}

// CleanupReport says what a cleanup removed, or with DryRun would remove.
type CleanupReport struct {
	Before    int64             `json:"before"` // the cache's size on disk
	After     int64             `json:"after"`  // estimated from what was removed
	Freed     int64             `json:"freed"`
	Artifacts []RemovedArtifact `json:"artifacts"`
	Blobs     int               `json:"blobs"` // blobs removed (unreferenced ones included)
	Leftovers []string          `json:"leftovers,omitempty"`
	// Protected counts artifacts that were candidates but are protected;
	// Short says the target was not reached (what is left is protected or
	// is not artifacts: sources, logs).
	Protected int `json:"protected"`
	// Live counts the protected artifacts that live sessions need and Protect
	// does not keep (the caller's own), LiveBytes the space their blobs take
	// (each once).
	Live      int           `json:"live"`
	LiveBytes int64         `json:"live-bytes"`
	Short     bool          `json:"short"`
	Duration  time.Duration `json:"duration-ns"`
	DryRun    bool          `json:"dry-run,omitempty"`
	// Problems are refs that could not be read; while there are any, blobs
	// that were unreferenced before the cleanup are left alone.
	Problems []string `json:"problems,omitempty"`
}

// Cleanup removes artifacts and unreferenced blobs as opts says. The caller
// must hold the exclusive lock (Lock): nothing may commit meanwhile, or the
// blobs of an artifact being committed could be swept. An interrupted cleanup
// (kill -9) leaves a consistent cache: refs go first, one at a time, and
// blobs only once nothing reaches them.
func (c *Cache) Cleanup(opts CleanupOptions) (*CleanupReport, error) {
	start := time.Now()
	if c.servesActionCache() {
		return nil, fmt.Errorf("cleaning %s: %w", c.Root, ErrServerStore)
	}
	inv, err := c.takeInventory()
	if err != nil {
		return nil, fmt.Errorf("cleaning the cache %s: %w", c.Root, err)
	}
	rep := &CleanupReport{Before: inv.total, DryRun: opts.DryRun, Problems: errorStrings(inv.problems)}
	// Read under the exclusive lock: a session that publishes later stages
	// nothing until the cleanup is over, and heals what it finds gone.
	live, err := c.liveNeeds(!opts.DryRun)
	if err != nil {
		return nil, fmt.Errorf("cleaning the cache %s: %w", c.Root, err)
	}
	// A ref that cannot be read (damaged, or written by a newer gantry) may reach
	// blobs that look unreferenced: then only the blobs of the artifacts removed
	// now are swept, not the older unreferenced ones.
	orphans := make([]bool, len(inv.blobs))
	for i, b := range inv.blobs {
		orphans[i] = b.refs == 0
	}
	// Leftovers first: the space they free counts towards the target.
	var leftovers []string
	var leftoverBytes int64
	if opts.Leftovers {
		if leftovers, err = c.leftovers(); err != nil {
			return nil, fmt.Errorf("cleaning the cache %s: %w", c.Root, err)
		}
		rep.Leftovers = leftovers
		for _, p := range leftovers {
			leftoverBytes += inv.entries[p] // 0 for one made since the inventory: not in Before either
		}
	}
	doomed := inv.choose(opts, live, rep, leftoverBytes)
	rep.Freed += leftoverBytes
	// Blobs that nothing reaches any more: size them before touching anything.
	var sweep []int32
	for i, b := range inv.blobs {
		if b.present() && b.refs == 0 && (!orphans[i] || len(inv.problems) == 0) {
			sweep = append(sweep, int32(i))
			rep.Freed += b.disk
		}
	}
	rep.Blobs = len(sweep)
	rep.After = rep.Before - rep.Freed
	if opts.DryRun {
		rep.Duration = time.Since(start)
		return rep, nil
	}
	if len(doomed) > 0 || len(sweep) > 0 {
		// Before anything goes: a session that finds an artifact gone sees a
		// newer count, and knows a cleanup took it (Removals).
		if err := c.countRemoval(); err != nil {
			return nil, fmt.Errorf("cleaning the cache %s: %w", c.Root, err)
		}
	}
	var errs []error
	for _, a := range doomed {
		if err := c.Delete(a.Project, a.Element, a.Key); err != nil && !errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("cleaning the cache %s: %w", c.Root, err)
		}
		if opts.AfterRemove != nil {
			opts.AfterRemove()
		}
	}
	if len(doomed) > 0 {
		if err := c.pruneWeakRefs(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.removeBlobs(inv, sweep)...)
	for _, p := range leftovers {
		if err := removeAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	rep.Duration = time.Since(start)
	if len(errs) > 0 {
		return rep, fmt.Errorf("cleaning the cache %s: %w", c.Root, errors.Join(errs...))
	}
	return rep, nil
}

// ErrServerStore refuses a local cleanup of a `gantry cache serve` store: the
// blobs its action cache entries name are reached by no ref, so a local cleanup
// would take them all for garbage. The server keeps its own quota.
var ErrServerStore = errors.New("this is a `gantry cache serve` store: its action cache entries need blobs that no artifact ref names, " +
	"so a local cleanup would remove them; keep its size with `gantry cache serve --quota` and check it with `gantry cache verify --dir`")

// servesActionCache reports whether the cache holds an action cache (ac/),
// which only a server's store has.
func (c *Cache) servesActionCache() bool {
	info, err := os.Lstat(filepath.Join(c.Root, ACDir))
	return err == nil && info.IsDir()
}

// removeBlobs removes the blobs of sweep, and their executable twins, several
// at a time: unlinking is mostly waiting for the filesystem.
func (c *Cache) removeBlobs(inv *inventory, sweep []int32) []error {
	var mu sync.Mutex
	var errs []error
	var g errgroup.Group
	g.SetLimit(ioParallelism())
	for _, b := range sweep {
		hash := hex.EncodeToString(inv.blobs[b].id[:])
		g.Go(func() error {
			if _, _, err := c.RemoveBlob(hash); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
	}
	g.Wait()
	return errs
}

// choose picks the artifacts to remove, updating the blobs' reference counts
// as if they were gone, and books them in rep. Those live needs are kept as
// protected ones. leftovers is the space the leftovers removed with them free.
func (inv *inventory) choose(opts CleanupOptions, live map[ArtifactRef]bool, rep *CleanupReport, leftovers int64) []*artifactInfo {
	var doomed []*artifactInfo
	// remove books a as gone and returns the space that frees besides blobs: its ref
	// file, and its directory when it was the last ref there.
	remove := func(a *artifactInfo) int64 {
		doomed = append(doomed, a)
		rep.Artifacts = append(rep.Artifacts, RemovedArtifact{ArtifactRef: a.ref(), LastUse: a.LastUse, Bytes: inv.size(a)})
		for _, b := range a.blobs {
			inv.blobs[b].refs--
		}
		a.blobs = nil
		freed := a.refDisk
		d := inv.refDir(a)
		if d.refs--; d.refs == 0 {
			freed += d.disk
		}
		rep.Freed += freed
		return freed
	}
	liveBlobs := map[int32]bool{}
	// The caller's own first: a session's cleanup protects what the session
	// needs, which it has published too, and Live counts only what others need.
	protected := func(a *artifactInfo) bool {
		if opts.Protect != nil && opts.Protect(a.ref()) {
			return true
		}
		if !live[a.ref()] {
			return false
		}
		rep.Live++
		for _, b := range a.blobs {
			if !liveBlobs[b] {
				liveBlobs[b] = true
				rep.LiveBytes += inv.blobs[b].disk
			}
		}
		return true
	}
	named := map[ArtifactRef]bool{}
	for _, r := range opts.Remove {
		named[r] = true
	}
	// Least recently used first; ties by name, so a cleanup is reproducible.
	order := slices.Clone(inv.artifacts)
	slices.SortStableFunc(order, func(a, b *artifactInfo) int { return a.LastUse.Compare(b.LastUse) })
	cutoff := time.Now().Add(-opts.OlderThan)
	var rest []*artifactInfo
	for _, a := range order {
		switch {
		case named[a.ref()]:
			remove(a)
		case opts.OlderThan > 0 && a.LastUse.Before(cutoff):
			if protected(a) {
				rep.Protected++
				continue
			}
			remove(a)
		default:
			rest = append(rest, a)
		}
	}
	if opts.Target <= 0 {
		return doomed
	}
	used := inv.total - inv.unreferenced() - leftovers
	for _, a := range rest {
		if used <= opts.Target {
			break
		}
		if protected(a) {
			rep.Protected++
			continue
		}
		blobs := a.blobs
		used -= remove(a)
		for _, b := range blobs {
			if inv.blobs[b].refs == 0 {
				used -= inv.blobs[b].disk
			}
		}
	}
	rep.Short = used > opts.Target
	return doomed
}

// unreferenced is the space of blobs on disk that no artifact reaches.
func (inv *inventory) unreferenced() int64 {
	var n int64
	for _, b := range inv.blobs {
		if b.present() && b.refs == 0 {
			n += b.disk
		}
	}
	return n
}

// leftovers finds what crashed processes left: tmp/ entries of processes that
// no longer run, and entries of sources/tmp (partial downloads and clones)
// not written for an hour; the files of loads/ no session used for
// loadsMaxAge (staleLoads); and the staged junctions no load used for
// junctionMaxAge (staleJunctions). The inventory has their sizes.
func (c *Cache) leftovers() ([]string, error) {
	paths, err := c.StrayTemp()
	if err != nil {
		return nil, err
	}
	loads, err := c.staleLoads()
	if err != nil {
		return nil, err
	}
	junctions, err := c.staleJunctions()
	if err != nil {
		return nil, err
	}
	paths = append(paths, loads...)
	paths = append(paths, junctions...)
	srcTmp := filepath.Join(c.SourcesDir(), tmpDir)
	entries, err := os.ReadDir(srcTmp)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("listing %s: %w", srcTmp, err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) >= staleTempAge {
			paths = append(paths, filepath.Join(srcTmp, e.Name()))
		}
	}
	slices.Sort(paths)
	return paths, nil
}

// blobPathOf is the cas/ path of a blob by its hash.
func (c *Cache) blobPathOf(hash string) string {
	return filepath.Join(c.Root, CASDir, hash[:2], hash)
}
