package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Weak refs: weak/<project>/<name>, name the hex SHA-256 of element, a zero byte and the
// weak key (weakRefPath), is a hard link to the ref of the latest successful artifact of
// the element built with that weak key: a second name of the ref's file, so that writing
// it makes no new inode and no directory per element (both cost a job dearly on ext4).
// Its content is the ref's, the record's digest; the record says the key. Where the
// filesystem refuses hard links it is a copy of that content instead, read alike.
//
// Caches written before keep weak/<project>/<element>/<weak key>, holding the key:
// LookupWeak still reads them, and cleanups prune them.

// writeWeakRef points a's weak ref at a's ref (refPath, naming record rd), for a
// successful artifact with a weak key: the latest such artifact of an element is what a
// non-strict session finds by its weak key. Best effort, after the ref: a weak ref
// missing (a crash, a full disk) only makes a non-strict session build what it could
// have reused; one left behind by a deleted artifact leads nowhere (LookupWeak).
func (c *Cache) writeWeakRef(a *Artifact, refPath string, rd Digest) {
	if !a.Success || a.WeakKey == "" {
		return
	}
	p, err := c.weakRefPath(a.Project, a.Element, a.WeakKey)
	if err != nil {
		return
	}
	err = linkFile(refPath, p)
	if errors.Is(err, fs.ErrNotExist) {
		if os.MkdirAll(filepath.Dir(p), 0o755) == nil {
			err = linkFile(refPath, p)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrExist):
		// An earlier artifact's: replaced at once, through a second name under tmp/
		// (again no new inode), so that a reader finds one weak ref or the other.
		tmp := c.TempName("weak")
		if linkFile(refPath, tmp) == nil {
			if renameInto(tmp, p) != nil {
				os.Remove(tmp)
			}
		}
	default: // no hard links here (EPERM, EXDEV, EMLINK): a copy of the ref's content
		_ = c.writeFileAtomic(p, []byte(rd.String()+"\n"), 0o644, volatile)
	}
}

// linkFile makes dst a hard link to src, with one link(2).
func linkFile(src, dst string) error {
	for {
		err := unix.Linkat(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, 0)
		if err != unix.EINTR {
			if err != nil {
				return &os.LinkError{Op: "link", Old: src, New: dst, Err: err}
			}
			return nil
		}
	}
}

// weakRefPath is the path of the weak ref of element's artifacts with weak key weak.
func (c *Cache) weakRefPath(project, element, weak string) (string, error) {
	if err := validateRefName(project, element, weak); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(element + "\x00" + weak))
	return filepath.Join(c.Root, weakDir, project, hex.EncodeToString(sum[:])), nil
}

// oldWeakRefPath is where caches written before kept the weak ref (a file holding the key).
func (c *Cache) oldWeakRefPath(project, element, weak string) string {
	return filepath.Join(c.Root, weakDir, project, filepath.FromSlash(element), weak)
}

// followWeakRef is the artifact the content of a weak ref of project leads to: the key
// its record says, looked up as it is now. A weak ref whose record is gone or damaged
// leads nowhere (ErrNotFound).
func (c *Cache) followWeakRef(p, project string, data []byte) (*Artifact, error) {
	_, rec, err := c.recordBlob(data)
	if err != nil {
		return nil, fmt.Errorf("weak ref %s leads nowhere (%v): %w", p, err, ErrNotFound)
	}
	var head struct {
		Element string `json:"element"`
		Key     string `json:"key"`
	}
	if err := json.Unmarshal(rec, &head); err != nil || !validSegment(head.Key) {
		return nil, fmt.Errorf("weak ref %s names a damaged record: %w", p, ErrNotFound)
	}
	return c.Lookup(project, head.Element, head.Key)
}

// pruneWeakRefs removes the weak refs whose artifact is gone, or no longer has that weak
// key, or that are damaged: a cleanup that removed artifacts calls it.
func (c *Cache) pruneWeakRefs() error {
	root := filepath.Join(c.Root, weakDir)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil // no weak refs yet, or removed meanwhile
		case err != nil:
			return fmt.Errorf("pruning weak refs: %w", err)
		case d.IsDir():
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil // gone meanwhile
		}
		if c.weakRefLive(rel, data) {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pruning weak refs: %w", err)
		}
		return nil
	})
}

// weakRefLive reports whether the weak ref at rel (under weak/), holding data, still
// leads to a successful artifact with the weak key it stands for.
func (c *Cache) weakRefLive(rel string, data []byte) bool {
	project, name, _ := strings.Cut(filepath.ToSlash(rel), "/")
	if !strings.Contains(name, "/") { // weak/<project>/<hash of element and weak key>
		a, err := c.followWeakRef(rel, project, data)
		if err != nil || !a.Success || a.WeakKey == "" {
			return false
		}
		p, err := c.weakRefPath(project, a.Element, a.WeakKey)
		return err == nil && filepath.Base(p) == name
	}
	// weak/<project>/<element>/<weak key>, holding the key (caches written before)
	dir := filepath.Dir(rel) // project/element
	key := string(bytes.TrimSpace(data))
	_, err := os.Lstat(filepath.Join(c.Root, refsDir, dir, key))
	return validSegment(key) && err == nil
}

// LookupWeak reads the latest successful artifact of element built with weak key weak
// (its weak ref). None, or one whose artifact is gone or no longer has that weak key,
// gives an error wrapping ErrNotFound.
func (c *Cache) LookupWeak(project, element, weak string) (*Artifact, error) {
	p, err := c.weakRefPath(project, element, weak)
	if err != nil {
		return nil, fmt.Errorf("looking up %s/%s by weak key: %w", project, element, err)
	}
	var a *Artifact
	data, err := readSmallFile(p, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return c.lookupOldWeak(project, element, weak)
	}
	if err != nil {
		return nil, fmt.Errorf("looking up %s/%s by weak key: %w", project, element, err)
	}
	if a, err = c.followWeakRef(p, project, data); err != nil {
		return nil, err
	}
	if !a.Success || a.Element != element || a.WeakKey != weak {
		return nil, fmt.Errorf("artifact %s no longer has weak key %s: %w", a.Name(), weak, ErrNotFound)
	}
	return a, nil
}

// lookupOldWeak is LookupWeak in a cache written before weak refs were hard links.
func (c *Cache) lookupOldWeak(project, element, weak string) (*Artifact, error) {
	p := c.oldWeakRefPath(project, element, weak)
	data, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("no artifact of %s/%s with weak key %s: %w", project, element, weak, ErrNotFound)
		}
		return nil, fmt.Errorf("looking up %s/%s by weak key: %w", project, element, err)
	}
	key := string(bytes.TrimSpace(data))
	if !validSegment(key) {
		return nil, fmt.Errorf("weak ref %s is damaged (%q): %w", p, key, ErrNotFound)
	}
	a, err := c.Lookup(project, element, key)
	if err != nil {
		return nil, err
	}
	if !a.Success || a.WeakKey != weak {
		return nil, fmt.Errorf("artifact %s no longer has weak key %s: %w", a.Name(), weak, ErrNotFound)
	}
	return a, nil
}
