package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// repairs is what Verify found that Repair can fix.
type repairs struct {
	broken   []brokenRef
	corrupt  []Digest // blobs whose content does not match their name
	badTwins []string // paths in exec/ that are not good executable twins
	brokenAC []brokenAC
	slotDirs []string // directories where a ref, blob or entry should be
}

// brokenAC is an action cache entry that does not decode or needs a blob that
// is missing or damaged, as Verify read it.
type brokenAC struct {
	path   string
	data   []byte
	reason error
}

// refDirError is a directory where an artifact ref should be: no artifact of
// that key can be stored until it goes.
type refDirError struct{ path string }

func (e *refDirError) Error() string {
	return e.path + " is a directory where an artifact ref should be"
}

// noteRefDir books a directory in place of a ref, if err is one.
func (r *repairs) noteRefDir(err error) {
	var rd *refDirError
	if errors.As(err, &rd) {
		r.slotDirs = append(r.slotDirs, rd.path)
	}
}

type brokenRef struct {
	ref    refName
	reason error
}

// noteBroken books a ref with problems: its artifact cannot be used.
func (r *repairs) noteBroken(ref refName, problems []error) {
	if len(problems) > 0 {
		r.broken = append(r.broken, brokenRef{ref, problems[0]})
	}
}

// noteCorrupt books every checked blob whose size or hash is wrong.
func (r *repairs) noteCorrupt(checked map[Digest]error) {
	for d, err := range checked {
		if errors.Is(err, ErrCorrupt) {
			r.corrupt = append(r.corrupt, d)
		}
	}
	slices.SortFunc(r.corrupt, func(a, b Digest) int { return strings.Compare(a.Hash, b.Hash) })
}

// Repair fixes what Verify reported in rep: it drops every ref whose record
// or blobs are missing or corrupt (the next build rebuilds or pulls the
// artifact) and every such action cache entry of a server's store, removes
// directories where a ref, blob or entry should be, corrupt blobs and damaged
// executable twins. It returns one line per repair. The caller holds the
// exclusive lock; a server serving the store may run meanwhile.
func (c *Cache) Repair(rep *VerifyReport) ([]string, error) {
	var done []string
	var errs []error
	for _, b := range rep.broken {
		err := c.Delete(b.ref.Project, b.ref.Element, b.ref.Key)
		if err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		done = append(done, fmt.Sprintf("dropped artifact %s/%s/%s: %v", b.ref.Project, b.ref.Element, b.ref.Key, b.reason))
	}
	for _, b := range rep.brokenAC {
		// Compare-and-delete: an entry a server wrote since Verify read it stays.
		if c.dropACFile(b.path, b.data) {
			done = append(done, fmt.Sprintf("removed action cache entry %s: %v", filepath.Base(b.path), b.reason))
		}
	}
	for _, p := range rep.slotDirs {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing the directory %s: %w", p, err))
			continue
		}
		done = append(done, fmt.Sprintf("removed the directory %s, where a file should be", p))
	}
	for _, d := range rep.corrupt {
		p := c.BlobPath(d)
		if c.checkBlob(d) == nil {
			continue // replaced with the right bytes since Verify (a server's upload)
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing corrupt blob %s: %w", p, err))
			continue
		}
		done = append(done, fmt.Sprintf("removed corrupt blob %s", p))
	}
	for _, p := range rep.badTwins {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing damaged executable twin %s: %w", p, err))
			continue
		}
		done = append(done, fmt.Sprintf("removed damaged executable twin %s", p))
	}
	if len(errs) > 0 {
		return done, fmt.Errorf("repairing the cache %s: %w", c.Root, errors.Join(errs...))
	}
	return done, nil
}
