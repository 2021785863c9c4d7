package cache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

var (
	// ErrNotFound is wrapped by errors for artifacts that are not in the cache.
	ErrNotFound = errors.New("not found")
	// ErrCorrupt is wrapped by errors for cache content that fails its checks:
	// a blob whose size or hash does not match its name, an unreadable ref or
	// record, a malformed tree.
	ErrCorrupt = errors.New("cache entry is corrupt")
)

// verifyHashLimit is the largest blob ReadBlob re-hashes on every read; larger
// blobs only get their size checked (Verify hashes everything).
const verifyHashLimit = 16 << 20

// blobMode is the mode of every file in cas/: read-only, because checkouts may
// hard-link it.
const blobMode = 0o444

// BlobPath returns where the blob d is stored (whether or not it is present),
// or "" if d is not a valid digest.
func (c *Cache) BlobPath(d Digest) string {
	if d.Validate() != nil {
		return ""
	}
	return filepath.Join(c.Root, CASDir, d.Hash[:2], d.Hash)
}

// HasBlob reports whether the blob d is present with the right size.
func (c *Cache) HasBlob(d Digest) bool {
	p := c.BlobPath(d)
	return p != "" && blobPresent(p, d.Size)
}

// HasIntactBlob is HasBlob with the blob's bytes hashed too: for a blob about to be
// adopted instead of fetched (a pull, a remote build's outputs). A build's staging
// trusts a blob by its type, size and mode, as it was hashed when it came in; but one
// that came in by a session the machine lost before its syncfs has no ref and may be
// torn with its size kept, and adopting it by its size would let a build stage it.
// A damaged copy is then fetched again, and its replacement renamed over it.
func (c *Cache) HasIntactBlob(d Digest) bool {
	p := c.BlobPath(d)
	if p == "" || !blobPresent(p, d.Size) {
		return false
	}
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	got, err := copyHashed(io.Discard, f)
	return err == nil && got == d
}

func blobPresent(path string, size int64) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() == size
}

// PutBlob stores data and returns its digest. Storing a blob that is already
// present does nothing, once the present copy is found identical; a damaged
// copy is replaced.
func (c *Cache) PutBlob(data []byte) (Digest, error) {
	d := DigestOf(data)
	p := c.BlobPath(d)
	if blobPresent(p, d.Size) {
		if d.Size == 0 { // the empty tree of an element that installs nothing
			return d, nil
		}
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
			return d, nil
		}
	}
	if err := c.writeFileLinked(p, data, blobMode, volatile); err != nil {
		return Digest{}, fmt.Errorf("storing blob %s: %w", d, err)
	}
	c.note(eventBlob, p)
	return d, nil
}

// PutFile stores the content of the regular file at path and returns its
// digest. The file is streamed, never read into memory whole: it is hashed,
// and copied (and hashed again, so the blob is named after what was copied)
// only if the cache lacks it. A blob already present is trusted only once
// its own content hashes right (reading it costs less than writing a copy);
// a damaged one is replaced.
func (c *Cache) PutFile(path string) (Digest, error) {
	d, _, err := c.putFile(path)
	return d, err
}

// putFile is PutFile that also returns the file's mode.
func (c *Cache) putFile(path string) (Digest, fs.FileMode, error) {
	fd, err := openFD(path, unix.O_RDONLY, 0) // plain system calls: see openFD
	if err != nil {
		return Digest{}, 0, fmt.Errorf("storing file %s: %w", path, err)
	}
	src := os.NewFile(uintptr(fd), path)
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return Digest{}, 0, fmt.Errorf("storing file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return Digest{}, 0, fmt.Errorf("storing file %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	// Hash first: rebuilds mostly produce files the cache already has, and
	// reading is much cheaper than writing a copy.
	if d, err := DigestOfReader(src); err != nil {
		return Digest{}, 0, fmt.Errorf("storing file %s: %w", path, err)
	} else if c.checkBlob(d) == nil {
		return d, fi.Mode(), nil
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return Digest{}, 0, fmt.Errorf("storing file %s: %w", path, err)
	}
	// The copy is hashed again: if the file changed meanwhile, the blob is
	// still named after what was stored.
	nf, err := c.createNew(filepath.Join(c.Root, CASDir), true)
	if err != nil {
		return Digest{}, 0, fmt.Errorf("storing file %s: %w", path, err)
	}
	fail := func(err error) (Digest, fs.FileMode, error) {
		nf.discard()
		return Digest{}, 0, fmt.Errorf("storing file %s: %w", path, err)
	}
	d, err := copyHashed(nf.f, src)
	if err != nil {
		return fail(err)
	}
	dst := c.BlobPath(d)
	if err := nf.f.Chmod(blobMode); err != nil {
		return fail(err)
	}
	if err := c.place(nf, dst, volatile); err != nil {
		return Digest{}, 0, fmt.Errorf("storing file %s as blob %s: %w", path, d, err)
	}
	c.note(eventBlob, dst)
	return d, fi.Mode(), nil
}

// ReadBlob returns the content of blob d. It checks the size, and the hash of
// blobs up to 16 MiB; a mismatch gives an error wrapping ErrCorrupt. A missing
// blob gives an error wrapping fs.ErrNotExist.
func (c *Cache) ReadBlob(d Digest) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("reading blob: %w", err)
	}
	p := c.BlobPath(d)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading blob %s: %w", d, err)
	}
	if int64(len(data)) != d.Size {
		return nil, fmt.Errorf("reading blob %s: %s has %d bytes: %w", d, p, len(data), ErrCorrupt)
	}
	if d.Size <= verifyHashLimit {
		if got := DigestOf(data); got != d {
			return nil, fmt.Errorf("reading blob %s: %s hashes to %s: %w", d, p, got.Hash, ErrCorrupt)
		}
	}
	return data, nil
}

// OpenBlob opens blob d for streaming, checking its size but not its hash.
func (c *Cache) OpenBlob(d Digest) (*os.File, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("opening blob: %w", err)
	}
	p := c.BlobPath(d)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("opening blob %s: %w", d, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening blob %s: %w", d, err)
	}
	if fi.Size() != d.Size {
		f.Close()
		return nil, fmt.Errorf("opening blob %s: %s has %d bytes: %w", d, p, fi.Size(), ErrCorrupt)
	}
	return f, nil
}

// checkBlob hashes blob d in full, as Verify does.
func (c *Cache) checkBlob(d Digest) error {
	f, err := c.OpenBlob(d)
	if err != nil {
		return err
	}
	defer f.Close()
	got, err := DigestOfReader(f)
	if err != nil {
		return fmt.Errorf("reading blob %s: %w", d, err)
	}
	if got != d {
		return fmt.Errorf("blob %s: %w", d, Mismatch(d, got, f.Name()))
	}
	return nil
}
