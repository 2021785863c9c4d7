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
	"path/filepath"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
)

// The action cache and the blob imports of a store (DESIGN.md §7), what
// `gantry cache serve` keeps: blobs in the CAS of an ordinary cache directory
// (cas/, tmp/, written as the local cache writes them), and ActionCache entries
// as serialized ActionResults under ac/<ab>/<hash>, written to a temporary file
// and renamed. The server reads and writes through these methods only: a blob
// enters cas/ only once its bytes hashed to its digest, and an entry is
// removed only if it still holds what was read (compare-and-delete).

// ACDir holds the action cache entries of a store.
const ACDir = "ac"

// ErrDigestMismatch is wrapped by errors for uploads whose bytes do not match the
// digest they were sent under.
var ErrDigestMismatch = errors.New("content does not match its digest")

// acPath is where the ActionCache entry of key is stored.
func (c *Cache) acPath(key Digest) string {
	return filepath.Join(c.Root, ACDir, key.Hash[:2], key.Hash)
}

// BlobImport is a blob being received: bytes are hashed as they are written to a
// temporary file under tmp/, and the file enters cas/ only if the digest matches.
type BlobImport struct {
	c    *Cache
	want Digest
	f    *os.File
	h    hash.Hash
	n    int64
}

// StartBlobImport starts receiving blob want. A size of -1 means unknown (an HTTP
// PUT without Content-Length): the hash alone is checked.
func (c *Cache) StartBlobImport(want Digest) (*BlobImport, error) {
	if err := (Digest{Hash: want.Hash, Size: max(want.Size, 0)}).Validate(); err != nil {
		return nil, fmt.Errorf("receiving blob: %w", err)
	}
	f, err := c.tempFile(uploadTemp)
	if err != nil {
		return nil, fmt.Errorf("receiving blob %s: %w", want, err)
	}
	return &BlobImport{c: c, want: want, f: f, h: sha256.New()}, nil
}

// Sum is the digest of the bytes written so far.
func (u *BlobImport) Sum() Digest {
	return Digest{Hash: hex.EncodeToString(u.h.Sum(nil)), Size: u.n}
}

// Received is how many bytes were written so far.
func (u *BlobImport) Received() int64 { return u.n }

// Write appends p, refusing more bytes than the digest's size.
func (u *BlobImport) Write(p []byte) (int, error) {
	if u.want.Size >= 0 && u.n+int64(len(p)) > u.want.Size {
		return 0, fmt.Errorf("receiving blob %s: more than %d bytes: %w", u.want, u.want.Size, ErrDigestMismatch)
	}
	n, err := u.f.Write(p)
	u.h.Write(p[:n])
	u.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("receiving blob %s: %w", u.want, err)
	}
	return n, nil
}

// abort drops the upload.
func (u *BlobImport) Abort() {
	u.f.Close()
	os.Remove(u.f.Name())
}

// commit checks the digest and moves the blob into cas/, fsynced; on any
// error the upload is dropped and nothing is stored.
func (u *BlobImport) Commit() error { return u.commit(fileSynced) }

// CommitVolatile is Commit without waiting for the blob to be durable: its
// writeback is started, and as for the blobs of a build the Commit of an
// artifact naming it makes it durable (one syncfs) before the artifact's ref
// is written. A pull stores many blobs for one ref.
func (u *BlobImport) CommitVolatile() error {
	startWriteback(u.f)
	return u.commit(volatile)
}

func (u *BlobImport) commit(dur durability) error {
	got := u.Sum()
	if u.want.Size < 0 {
		u.want.Size = u.n
	}
	if got != u.want {
		u.Abort()
		return fmt.Errorf("receiving blob %s: got %d bytes hashing to %s: %w", u.want, got.Size, got.Hash, ErrDigestMismatch)
	}
	fail := func(err error) error {
		u.Abort()
		return fmt.Errorf("storing blob %s: %w", u.want, err)
	}
	if err := syncFile(u.f, dur); err != nil {
		return fail(err)
	}
	if err := u.f.Chmod(blobMode); err != nil {
		return fail(err)
	}
	if err := u.f.Close(); err != nil {
		os.Remove(u.f.Name())
		return fmt.Errorf("storing blob %s: %w", u.want, err)
	}
	dst := u.c.BlobPath(u.want)
	if err := renameInto(u.f.Name(), dst); err != nil {
		os.Remove(u.f.Name())
		return fmt.Errorf("storing blob %s: %w", u.want, err)
	}
	if dur == volatile {
		u.c.note(eventBlob, dst)
	}
	return nil
}

// ImportBlob stores the blob want from r, hashing while it streams: it is
// stored only if r yields exactly the bytes of want (an error wrapping
// ErrDigestMismatch otherwise).
func (c *Cache) ImportBlob(want Digest, r io.Reader) (int64, error) {
	u, err := c.StartBlobImport(want)
	if err != nil {
		return 0, err
	}
	if want.Size >= 0 {
		r = io.LimitReader(r, want.Size+1)
	}
	if _, err := io.Copy(u, r); err != nil {
		u.Abort()
		return u.n, err
	}
	return u.n, u.Commit()
}

// TouchBlob marks blob d as used now, for the server's LRU eviction (best
// effort: a blob that vanished meanwhile needs no refresh).
func (c *Cache) TouchBlob(d Digest) { touchFile(c.BlobPath(d)) }

// touchFile marks path as used now (best effort, as TouchBlob).
func touchFile(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}

// ReadActionResult returns the ActionResult stored under key, if every blob it
// references is present: an entry with a missing blob is a miss (an error
// wrapping ErrNotFound), never handed out half-present. Such an entry, and one
// that does not decode, is a *StaleActionResultError (DropActionResult removes it). Reading
// refreshes the entry and its blobs for the LRU.
func (c *Cache) ReadActionResult(key Digest) (*repb.ActionResult, []byte, error) {
	p := c.acPath(key)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("action cache entry %s: %w", key.Hash, ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading action cache entry %s: %w", key.Hash, err)
	}
	stale := func(err error) (*repb.ActionResult, []byte, error) {
		return nil, nil, &StaleActionResultError{Data: data, Err: err}
	}
	// A damaged entry or tree is a miss as well (both ErrNotFound and
	// ErrCorrupt): the client builds and writes it again.
	ar := &repb.ActionResult{}
	if err := proto.Unmarshal(data, ar); err != nil {
		return stale(fmt.Errorf("action cache entry %s: %v: %w (%w)", key.Hash, err, ErrCorrupt, ErrNotFound))
	}
	blobs, err := c.ActionResultBlobs(ar)
	if errors.Is(err, ErrCorrupt) {
		return stale(fmt.Errorf("action cache entry %s: %w (%w)", key.Hash, err, ErrNotFound))
	}
	if errors.Is(err, ErrNotFound) {
		return stale(fmt.Errorf("action cache entry %s: %w", key.Hash, err))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("action cache entry %s: %w", key.Hash, err)
	}
	for _, d := range blobs {
		if !c.HasBlob(d) {
			return stale(fmt.Errorf("action cache entry %s: blob %s is missing: %w", key.Hash, d, ErrNotFound))
		}
	}
	touchFile(p)
	for _, d := range blobs {
		c.TouchBlob(d)
	}
	return ar, data, nil
}

// ActionResultBlobs lists every blob ar references: output files, stdout and
// stderr, output directories' trees and the files and directories within them
// (the Tree blobs must be present to be read; a missing one is ErrNotFound).
func (c *Cache) ActionResultBlobs(ar *repb.ActionResult) ([]Digest, error) {
	var out []Digest
	add := func(p *repb.Digest) error {
		if p == nil || (p.Hash == "" && p.SizeBytes == 0) {
			return nil
		}
		d := DigestFromProto(p)
		if err := d.Validate(); err != nil {
			return fmt.Errorf("%w: %w", err, ErrCorrupt)
		}
		out = append(out, d)
		return nil
	}
	for _, f := range ar.OutputFiles {
		if err := add(f.Digest); err != nil {
			return nil, err
		}
	}
	if err := add(ar.StdoutDigest); err != nil {
		return nil, err
	}
	if err := add(ar.StderrDigest); err != nil {
		return nil, err
	}
	for _, od := range ar.OutputDirectories {
		if err := add(od.TreeDigest); err != nil {
			return nil, err
		}
		if err := add(od.RootDirectoryDigest); err != nil {
			return nil, err
		}
		if od.TreeDigest == nil {
			continue
		}
		td := DigestFromProto(od.TreeDigest)
		data, err := c.ReadBlob(td)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("tree %s is missing: %w", td, ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		tree := &repb.Tree{}
		if err := proto.Unmarshal(data, tree); err != nil {
			return nil, fmt.Errorf("tree %s: %v: %w", td, err, ErrCorrupt)
		}
		for _, dir := range append([]*repb.Directory{tree.Root}, tree.Children...) {
			if dir == nil {
				continue
			}
			for _, f := range dir.Files {
				if err := add(f.Digest); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// WriteActionResult stores ar's serialization under key. data must parse as an
// ActionResult (an error wrapping ErrCorrupt otherwise). The blobs it
// references are refreshed first, so the server's evictor keeps them (cache/serve).
func (c *Cache) WriteActionResult(key Digest, data []byte) error {
	ar := &repb.ActionResult{}
	if err := proto.Unmarshal(data, ar); err != nil {
		return fmt.Errorf("action cache entry %s: not an ActionResult: %v: %w", key.Hash, err, ErrCorrupt)
	}
	if blobs, err := c.ActionResultBlobs(ar); err == nil {
		for _, d := range blobs {
			c.TouchBlob(d)
		}
	}
	if err := c.writeFileAtomic(c.acPath(key), data, 0o644, dirSynced); err != nil {
		return fmt.Errorf("storing action cache entry %s: %w", key.Hash, err)
	}
	return nil
}

// StaleActionResultError is an action cache entry that is present but cannot be used: it
// does not decode, or a blob it needs is missing or damaged. It wraps
// ErrNotFound: the lookup is a miss.
type StaleActionResultError struct {
	Data []byte // the entry as read
	Err  error
}

func (e *StaleActionResultError) Error() string { return e.Err.Error() }
func (e *StaleActionResultError) Unwrap() error { return e.Err }

// dropACFile removes the action cache entry at p if it still holds data. It is a
// compare-and-delete: an entry a client wrote after data was read stays. It
// reports whether it removed the entry.
func (c *Cache) dropACFile(p string, data []byte) bool {
	dropped, _ := c.dropFileIf(p, func(claimed string) bool {
		now, err := os.ReadFile(claimed)
		return err == nil && bytes.Equal(now, data)
	})
	return dropped
}

// DropActionResult removes the action cache entry of key if it still holds
// data (a compare-and-delete, see dropACFile) and reports whether it did.
func (c *Cache) DropActionResult(key Digest, data []byte) bool {
	return c.dropACFile(c.acPath(key), data)
}

// uploadTemp is the tmp/ pattern of a blob being received (StartBlobImport).
const uploadTemp = "upload"

// RemoveDeadBlobImports removes the partial uploads that server processes no longer
// running left in tmp/ (a server killed mid-upload), whatever their age: no one
// can resume them, since the table that knew them died with their server, and
// only a server makes them. It returns how many it removed.
func (c *Cache) RemoveDeadBlobImports() (int, error) {
	stray, err := c.StrayTemp()
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, p := range stray {
		if _, rest, _ := strings.Cut(filepath.Base(p), "-"); !strings.HasPrefix(rest, uploadTemp+"-") {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing a dead server's partial upload: %w", err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
