package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Executable twins. A blob is one inode with one mode, 0444, whatever
// the trees that name it say: the executable bit lives in the tree (REAPI
// FileNode.is_executable), not in the blob. A sysroot staged with hard links
// (CheckoutOptions.Hardlink, where the sandbox mounts it read-only) needs an inode
// with the x bit for each executable: the blob's executable twin, a copy of it
// with mode 0555 at exec/ab/<hash>, made the first time a linked staging needs it
// and linked from then on.
//
// A twin is derived data, local to this cache: never pushed, pulled or served
// (remotes deal in blobs), made durable (fsync) before it is named, since staging
// trusts it as it trusts blobs (integrity.go) and a twin a power loss left torn
// would otherwise be linked as it is, and removed by gc, and by a server's
// eviction (cache/serve), with its blob. A build job
// counts the twins it made (TwinBytes) in what it added to the cache. Verify hashes twins as it does blobs; Repair removes a damaged
// one. Like a blob, a twin's content never changes once in place, and it is
// linked only where nothing can write through the link.

const (
	ExecDir  = "exec" // the executable twins of blobs
	twinMode = 0o555
)

// twinPath is where the executable twin of blob d is (whether or not it is).
func (c *Cache) twinPath(d Digest) string { return c.twinPathOf(d.Hash) }

func (c *Cache) twinPathOf(hash string) string {
	return filepath.Join(c.Root, ExecDir, hash[:2], hash)
}

// RemoveBlob removes blob hash and its executable twin: the twins rule of
// every collector of a store (cache gc and its quota, a server's eviction) is
// that a twin goes with its blob, and that a twin whose blob is gone goes
// alone. It reports which of the two it removed; one already gone is no error.
func (c *Cache) RemoveBlob(hash string) (blob, twin bool, err error) {
	var errs []error
	removed := [2]bool{}
	for i, p := range []string{c.blobPathOf(hash), c.twinPathOf(hash)} {
		err := os.Remove(p)
		switch {
		case err == nil:
			removed[i] = true
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("removing blob %s: %w", p, err))
		}
	}
	return removed[0], removed[1], errors.Join(errs...)
}

// linkFile hard-links the file f at p: its blob, or its executable twin (made
// first if there is none yet). It returns the path linked to.
func (c *Cache) linkFile(d Digest, executable bool, p string) (string, error) {
	if !executable {
		src := c.BlobPath(d)
		return src, os.Link(src, p)
	}
	src := c.twinPath(d)
	err := os.Link(src, p)
	if errors.Is(err, fs.ErrNotExist) {
		if err = c.makeTwin(d); err == nil {
			err = os.Link(src, p)
		}
	}
	return src, err
}

// makeTwin makes the executable twin of blob d: a copy (a reflink where the
// filesystem can), checked against d, renamed into exec/. Two processes making
// the same twin at once both succeed; one rename wins, with the same bytes.
func (c *Cache) makeTwin(d Digest) error {
	src, err := c.OpenBlob(d)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := c.tempFile("twin")
	if err != nil {
		return err
	}
	var got Digest
	if cloneFile(tmp, src) == nil {
		got, err = DigestOfReader(src)
	} else {
		got, err = copyHashed(tmp, src)
	}
	if err == nil && got != d {
		err = Mismatch(d, got, src.Name())
	}
	if err == nil {
		err = tmp.Chmod(twinMode)
	}
	if err == nil {
		err = tmp.Sync() // once per twin, ever: staging will trust it
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = renameInto(tmp.Name(), c.twinPath(d))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("making the executable twin of blob %s: %w", d, err)
	}
	c.twinBytes.Add(d.Size)
	return nil
}

// TwinBytes is how many bytes of executable twins this Cache has made: a
// build job adds them to what it says it added to the cache
// (job.Result.CacheBytes), which the quota counts.
func (c *Cache) TwinBytes() int64 { return c.twinBytes.Load() }

// verifyTwins hashes every executable twin against its name, booking damaged
// ones (and anything else found in exec/) in rep; Repair removes them.
func (c *Cache) verifyTwins(rep *VerifyReport) error {
	root := filepath.Join(c.Root, ExecDir)
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return nil // none made yet
	}
	err := walkShards(root, "among the executable twins", rep, func(p string, d Digest, info fs.FileInfo, inPlace bool) {
		var problem error
		switch {
		case !inPlace:
			problem = errors.New("not an executable twin")
		case info.Mode().Perm() != twinMode:
			problem = fmt.Errorf("mode %v, not %v", info.Mode().Perm(), fs.FileMode(twinMode))
		default:
			if got, err := hashFile(p); err != nil {
				problem = err
			} else if got.Hash != d.Hash {
				problem = fmt.Errorf("content hashes to %s", got.Hash)
			}
		}
		rep.Twins++
		if problem != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("executable twin %s: %v (`gantry cache verify --repair` removes it; it is made again when needed)", p, problem))
			rep.badTwins = append(rep.badTwins, p)
		}
	})
	if err != nil {
		return fmt.Errorf("checking the executable twins in %s: %w", root, err)
	}
	return nil
}
