package cache

import (
	"fmt"
	"path/filepath"
	"sync"
)

// Group commit. A build job that commits on its own makes one syncfs of the whole
// filesystem per artifact and waits for it, its worker busy meanwhile. Split in
// two, the job stores its blobs and record (StoreBlobs: nothing fsynced) and ends,
// and the session that ran it places the ref through a GroupCommitter: one syncfs
// makes durable the blobs of every artifact queued before it began, their refs are
// placed after it ended, and the next syncfs — the next group's — makes those refs
// durable too (or, when no group follows and they are few, an fsync of each one's
// directory). A ref is thus never placed before a syncfs that began after its blobs
// were written has ended, and Commit returns only once the ref is durable: a power
// loss at any instant leaves no ref to a blob that did not survive, and a kill at
// any instant at worst blobs no ref names (gc's to sweep).

// PendingRef is an artifact whose blobs and record are stored but not yet durable,
// and whose ref is not written: what a GroupCommitter commits.
type PendingRef struct {
	Project string `json:"project"`
	Element string `json:"element"`
	Key     string `json:"key"`
	WeakKey string `json:"weak_key,omitempty"`
	Success bool   `json:"success"`
	Record  Digest `json:"record"`
}

// StoreBlobs is Commit without the ref: it checks that every blob a points at is
// stored, stores its record and says what a GroupCommitter needs to commit it.
// Nothing is made durable: until the ref is placed, the blobs are garbage to gc,
// so the caller holds the cache lock shared until the GroupCommitter's Commit
// ends (or another holder takes over before it lets go).
func (c *Cache) StoreBlobs(a *Artifact) (PendingRef, error) {
	if _, err := c.RefPath(a.Project, a.Element, a.Key); err != nil {
		return PendingRef{}, fmt.Errorf("committing artifact %s: %w", a.Name(), err)
	}
	if err := c.storeRecord(a); err != nil {
		return PendingRef{}, err
	}
	return PendingRef{Project: a.Project, Element: a.Element, Key: a.Key, WeakKey: a.WeakKey, Success: a.Success, Record: a.Record}, nil
}

// GroupCommitter places the refs of artifacts stored by StoreBlobs, many for one
// syncfs. Safe for concurrent use; its flushes run on a goroutine of its own
// while there is work, one at a time.
type GroupCommitter struct {
	c       *Cache
	mu      sync.Mutex
	queued  []*groupEntry // stored, waiting for the next flush
	running bool          // the flushing goroutine runs
}

type groupEntry struct {
	p    PendingRef
	ref  string // its path, once placed
	done chan error
}

// fsyncRefsAtMost is how many placed refs, with nothing queued behind them, are made
// durable by an fsync of each one's directory rather than a syncfs: a lone commit
// then costs what Commit does (one syncfs, one directory fsync), not two syncfs.
const fsyncRefsAtMost = 2

// NewGroupCommitter returns a committer of refs into c.
func (c *Cache) NewGroupCommitter() *GroupCommitter { return &GroupCommitter{c: c} }

// Commit places p's ref and returns once it is durable, after a syncfs that began
// after Commit was called: p's blobs must all be written by then.
func (g *GroupCommitter) Commit(p PendingRef) error {
	e := &groupEntry{p: p, done: make(chan error, 1)}
	g.mu.Lock()
	g.queued = append(g.queued, e)
	start := !g.running
	g.running = true
	g.mu.Unlock()
	g.c.note(eventQueued, "")
	if start {
		go g.flushes()
	}
	return <-e.done
}

// flushes runs group after group until none is queued: each syncfs makes durable
// the blobs of the group queued before it began and the refs placed after the
// last one ended, which it then reports durable; then the group's refs are placed.
func (g *GroupCommitter) flushes() {
	var placed []*groupEntry // refs in place, made durable by the next syncfs
	for {
		g.mu.Lock()
		group := g.queued
		g.queued = nil
		if len(group) == 0 && len(placed) == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		if len(group) == 0 && len(placed) <= fsyncRefsAtMost {
			for _, e := range placed {
				e.done <- syncDirectory(filepath.Dir(e.ref))
			}
			placed = placed[:0]
			continue
		}
		err := g.c.syncBlobs()
		for _, e := range placed {
			e.done <- err
		}
		placed = placed[:0]
		for _, e := range group {
			if err != nil {
				e.done <- fmt.Errorf("committing artifact %s/%s: %w", e.p.Project, e.p.Element, err)
				continue
			}
			ref, err := g.c.placeRef(e.p)
			if err != nil {
				e.done <- err
				continue
			}
			e.ref = ref
			placed = append(placed, e)
		}
	}
}

// placeRef writes the ref of p, and its weak ref, without any fsync: the next
// syncfs makes them durable. It returns the ref's path.
func (c *Cache) placeRef(p PendingRef) (string, error) {
	a := &Artifact{Project: p.Project, Element: p.Element, Key: p.Key, WeakKey: p.WeakKey, Success: p.Success}
	refPath, err := c.RefPath(p.Project, p.Element, p.Key)
	if err != nil {
		return "", fmt.Errorf("committing artifact %s: %w", a.Name(), err)
	}
	nf, err := c.writeNew(refPath, []byte(p.Record.String()+"\n"), 0o644, volatile, true)
	if err != nil {
		return "", fmt.Errorf("committing artifact %s: %w", a.Name(), err)
	}
	if err := c.place(nf, refPath, volatile); err != nil {
		return "", fmt.Errorf("committing artifact %s: %w", a.Name(), err)
	}
	c.note(eventRef, refPath)
	c.writeWeakRef(a, refPath, p.Record)
	return refPath, nil
}

// Stored checks that p's record and every blob it reaches are in the cache: for a
// committer that could not hold the cache lock from the store to the commit, when
// a cleanup may have swept them meanwhile.
func (c *Cache) Stored(p PendingRef) error {
	a, err := c.readRecord([]byte(p.Record.String()), p.Project, p.Element, p.Key)
	if err != nil {
		return fmt.Errorf("committing artifact %s/%s: its record: %w", p.Project, p.Element, err)
	}
	return c.Complete(a)
}
