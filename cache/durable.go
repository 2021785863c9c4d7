package cache

import (
	"fmt"
	"os"
)

// Durability at group cost. A blob is written to tmp/ and renamed into
// cas/ without an fsync of its own. Commit makes every blob durable in one pass —
// syncfs(2) of the cache's filesystem, which also covers a blob another process wrote
// and this one found present — and only then writes the ref, fsyncing it and its
// directory. So after a crash or a power loss a ref that survived points only at
// blobs that did; a blob that did not survive is at worst garbage, or missing with
// nothing pointing at it. fsync per blob cost 83% of committing many small files.

// durability is how far writeFileAtomic goes to make a file survive a power loss.
type durability int

const (
	volatile   durability = iota // no fsync: a blob, made durable by Commit's syncBlobs
	fileSynced                   // the file's content is fsynced before its rename
	dirSynced                    // and its directory after: the rename survives too (refs)
)

// syncBlobs makes every blob written so far durable.
func (c *Cache) syncBlobs() error {
	if err := c.flush(); err != nil {
		return fmt.Errorf("making the blobs in %s durable: %w", c.Root, err)
	}
	c.note(eventSync, c.Root)
	return nil
}

// flush is one syncfs of the cache's filesystem, between the events that say when it
// began and ended.
func (c *Cache) flush() error {
	c.note(eventSyncBegin, c.Root)
	if err := syncFS(c.Root); err != nil {
		return err
	}
	c.note(eventSyncEnd, c.Root)
	return nil
}

// Events a test can follow through Cache.trace, to simulate a crash at any point.
const (
	eventBlob = "blob" // a blob is in place, not yet durable
	// eventBlobMoved: TakeTree has just moved a file in as a blob, before its
	// last checks (take_linux.go); eventBlob follows.
	eventBlobMoved = "blob-moved"
	eventSync      = "sync" // everything written before is durable
	// A syncfs of this process's begins and ends (flush): everything written before
	// it began is durable once it ends.
	eventSyncBegin = "sync-begin"
	eventSyncEnd   = "sync-end"
	eventRef       = "ref"    // a ref is in place: durable now (Commit), or after the next syncfs (GroupCommitter)
	eventQueued    = "queued" // an artifact waits for a GroupCommitter's next syncfs
)

// note reports a durability event to the test hook, if any.
func (c *Cache) note(event, path string) {
	if c.trace != nil {
		c.trace(event, path)
	}
}

// syncFile fsyncs f when d asks for it.
func syncFile(f *os.File, d durability) error {
	if d == volatile {
		return nil
	}
	return f.Sync()
}
