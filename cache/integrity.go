package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
)

// Cache integrity. A blob's name is the SHA-256 of its content, but what is on
// disk can still differ: bit rot, a disk that lost a write, a build that wrote
// through a hard link into cas/ before sysroots were staged safely, a user's
// mistake. Such damage must not spread (into a dependant's build, a checkout,
// an artifact that reuses the blob) and must not stick: a blob found bad or
// missing where its bytes are read anyway (checking out, staging, storing the
// same content again) is removed, so the next write of that content stores it
// afresh, and the caller learns which blob it was through a *BlobError so that
// it can drop the artifact that needed it (see DropArtifact).
//
// Cached-or-not questions (the plan, `show`) stay cheap: they read refs and
// records only. Hashing every dependency on every null build would cost as much
// as staging it; `cache verify` hashes everything on demand.
//
// Staging a build's dependencies does not hash either (CheckoutOptions.Trusted):
// every blob was hashed when it entered the cache (a commit hashes each file it
// moves in, a pull each blob it receives, an executable twin is checked against
// its blob as it is made), always into a new inode, which is read-only from
// then on (blobMode, twinMode) and made durable before any ref reaches it (a
// twin before it is named); gantry never writes to it again, and hard-links it
// only where nothing can write through the link (bwrap's read-only sysroot;
// the host sandbox gets copies). What staging checks instead comes with the
// one fstat (lstat for a link) it makes anyway: a regular file of the blob's
// size, with the blob's mode. A write by anyone but root needs the mode changed
// first, and a blob whose mode was changed is hashed as it is staged; a blob
// cut short or grown is damage. Damage that keeps the size and the mode — the
// medium's own (bit rot), root writing into cas/ and putting the mode back — is
// staged as it is: `cache verify` finds it, and `artifact checkout`, `shell`,
// push and serve still hash what they read.

// BlobError reports a blob that is missing or whose content does not match its
// digest, found while reading it. A damaged blob has already been removed from
// the CAS when the error is returned. It wraps fs.ErrNotExist for a missing
// blob and ErrCorrupt for a damaged one.
type BlobError struct {
	Digest Digest
	// Path is where the blob sits in the tree being read (slash-separated,
	// "" for the root directory or a blob outside any tree).
	Path string
	// Missing says the blob was absent; otherwise it was damaged.
	Missing bool
	Err     error
}

func (e *BlobError) Error() string {
	what := "blob " + e.Digest.String()
	if e.Path != "" {
		what += " (" + e.Path + ")"
	}
	if e.Missing {
		return what + " is missing from the cache"
	}
	var mm *MismatchError
	if errors.As(e.Err, &mm) {
		return fmt.Sprintf("%s is corrupt: its content hashes to %s; removed %s from the cache", what, mm.got, mm.path)
	}
	return fmt.Sprintf("%s is corrupt (%v); removed it from the cache", what, e.Err)
}

func (e *BlobError) Unwrap() error { return e.Err }

// BlobReadFailed is the error of reading blob d that failed with err: a
// *BlobError, the blob removed, when it is missing or damaged; err otherwise.
func (c *Cache) BlobReadFailed(d Digest, err error) error { return c.blobError(d, "", err) }

// blobError turns an error from reading blob d into a *BlobError when it says
// the blob is missing or damaged, removing a damaged blob. Other errors (a
// full disk, a permission problem) are returned as they are.
func (c *Cache) blobError(d Digest, treePath string, err error) error {
	var be *BlobError
	switch {
	case err == nil || errors.As(err, &be):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return &BlobError{Digest: d, Path: treePath, Missing: true, Err: err}
	case errors.Is(err, ErrCorrupt):
		c.removeBlob(d)
		return &BlobError{Digest: d, Path: treePath, Err: err}
	}
	return err
}

// removeBlob removes blob d, found damaged. A concurrent writer may just have
// renamed good content into place; removing that is harmless (the blob is then
// missing, which heals the same way).
func (c *Cache) removeBlob(d Digest) {
	if p := c.BlobPath(d); p != "" {
		_ = os.Remove(p)
	}
}

// copyBuffers hold the buffers of hashing copies: large enough that the
// system calls cost little next to SHA-256, and reused, because allocating
// one per file would cost more than hashing a small file.
var copyBuffers = sync.Pool{New: func() any { return new([256 << 10]byte) }}

// copyHashed copies src to dst, hashing what it copies, and returns the
// digest of the copied bytes.
func copyHashed(dst io.Writer, src io.Reader) (Digest, error) {
	h := NewDigestWriter()
	buf := copyBuffers.Get().(*[256 << 10]byte)
	defer copyBuffers.Put(buf)
	// src as a plain Reader: an *os.File's WriteTo would copy through a new 32 KiB
	// buffer of its own, never this one.
	if _, err := io.CopyBuffer(io.MultiWriter(dst, h), struct{ io.Reader }{src}, buf[:]); err != nil {
		return Digest{}, err
	}
	return h.Digest(), nil
}

// DigestWriter hashes and counts what is written to it: the digest of content
// met piece by piece (copied, sent, received).
type DigestWriter struct {
	h hash.Hash
	n int64
}

// NewDigestWriter starts an empty digest.
func NewDigestWriter() *DigestWriter { return &DigestWriter{h: sha256.New()} }

// Size is how many bytes were written.
func (w *DigestWriter) Size() int64 { return w.n }

func (w *DigestWriter) Write(p []byte) (int, error) {
	w.h.Write(p)
	w.n += int64(len(p))
	return len(p), nil
}

// digest is the digest of everything written so far.
func (w *DigestWriter) Digest() Digest {
	return Digest{Hash: hex.EncodeToString(w.h.Sum(nil)), Size: w.n}
}

// DigestOfReader returns the digest of everything r yields.
func DigestOfReader(r io.Reader) (Digest, error) { return copyHashed(io.Discard, r) }

// MismatchError is content at path that hashes to got instead of want. It
// wraps ErrCorrupt.
type MismatchError struct {
	path      string
	want, got Digest
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s hashes to %s, not %s", e.path, e.got, e.want)
}

func (e *MismatchError) Unwrap() error { return ErrCorrupt }

// Mismatch is the error of content at path that hashes to got, not want.
func Mismatch(want, got Digest, path string) error {
	return &MismatchError{path: path, want: want, got: got}
}

// DropArtifact removes the ref of artifact a, found damaged (a blob it needs is
// missing or corrupt), so that it is no longer cached and the next build makes it
// again. It is a compare-and-delete: only a ref that still names a's record goes.
// Another process may have replaced the damaged artifact with a good one of the
// same key meanwhile (its own build, a pull, a heal); that one stays. When a's
// record is not known (zero: an artifact this session built whose ref may not be
// written yet), the ref goes only if its record names a's files tree. It reports
// whether it removed the ref; an artifact already gone is not an error.
func (c *Cache) DropArtifact(a *Artifact) (bool, error) {
	refPath, err := c.RefPath(a.Project, a.Element, a.Key)
	if err != nil {
		return false, fmt.Errorf("dropping artifact: %w", err)
	}
	if !c.namesArtifact(refPath, a) {
		return false, nil
	}
	dropped, err := c.dropFileIf(refPath, func(claimed string) bool { return c.namesArtifact(claimed, a) })
	if err != nil {
		return false, fmt.Errorf("dropping artifact %s: %w", a.Name(), err)
	}
	if dropped {
		c.pruneRefDirs(refPath)
	}
	return dropped, nil
}

// dropFileIf removes the file at p if still, asked of the file, says it is
// still the one to remove: a compare-and-delete against other processes. It
// claims the file with one rename, so that no other process can replace what
// still looks at, and what it compared is what it removes. A file that was
// replaced before the claim is put back, unless a newer one took its place
// meanwhile (the link fails then; the claimed one is the older and goes). It
// reports whether it removed the file; a file already gone is not an error.
func (c *Cache) dropFileIf(p string, still func(claimed string) bool) (bool, error) {
	claimed := c.TempName("drop")
	if err := syscall.Rename(p, claimed); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return false, nil
		}
		return false, &os.LinkError{Op: "rename", Old: p, New: claimed, Err: err}
	}
	defer os.Remove(claimed)
	if still(claimed) {
		return true, nil
	}
	if err := os.Link(claimed, p); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("restoring %s, written meanwhile: %w", p, err)
	}
	return false, nil
}

// namesArtifact reports whether the ref file at refPath names artifact a: its
// record when a.Record is known, else a record whose files tree is a.Files.
func (c *Cache) namesArtifact(refPath string, a *Artifact) bool {
	data, err := readSmallFile(refPath, nil)
	if err != nil {
		return false
	}
	rd, err := ParseDigest(string(bytes.TrimSpace(data)))
	if err != nil {
		return false
	}
	if !a.Record.IsZero() {
		return rd == a.Record
	}
	if a.Files.IsZero() {
		return false
	}
	rec, err := c.readRecord(data, a.Project, a.Element, a.Key)
	if err != nil {
		// The record itself is damaged: this ref cannot be anyone's good artifact.
		return errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrCorrupt)
	}
	return rec.Files == a.Files
}
