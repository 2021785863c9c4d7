package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
)

// The store of `gantry cache serve` (DESIGN.md §7): blobs in the CAS of an
// ordinary cache directory (cas/, tmp/, written as the local cache writes them),
// and ActionCache entries as serialized ActionResults under ac/<ab>/<hash>,
// written to a temporary file and renamed. The server reads and writes through
// these functions only.

const acDir = "ac"

// emptyDigest is the empty blob's, which a REAPI server always has: clients
// never upload it. The server stores it at start and never evicts it.
var emptyDigest = DigestOf(nil)

// ErrDigestMismatch is wrapped by errors for uploads whose bytes do not match the
// digest they were sent under.
var ErrDigestMismatch = errors.New("content does not match its digest")

// acPath is where the ActionCache entry of key is stored.
func (c *Cache) acPath(key Digest) string {
	return filepath.Join(c.Root, acDir, key.Hash[:2], key.Hash)
}

// blobUpload is a blob being received: bytes are hashed as they are written to a
// temporary file under tmp/, and the file enters cas/ only if the digest matches.
type blobUpload struct {
	c    *Cache
	want Digest
	f    *os.File
	h    hash.Hash
	n    int64
}

// newBlobUpload starts receiving blob want. A size of -1 means unknown (an HTTP
// PUT without Content-Length): the hash alone is checked.
func (c *Cache) newBlobUpload(want Digest) (*blobUpload, error) {
	if err := (Digest{Hash: want.Hash, Size: max(want.Size, 0)}).Validate(); err != nil {
		return nil, fmt.Errorf("receiving blob: %w", err)
	}
	f, err := c.tempFile(uploadTemp)
	if err != nil {
		return nil, fmt.Errorf("receiving blob %s: %w", want, err)
	}
	return &blobUpload{c: c, want: want, f: f, h: sha256.New()}, nil
}

// Write appends p, refusing more bytes than the digest's size.
func (u *blobUpload) Write(p []byte) (int, error) {
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
func (u *blobUpload) abort() {
	u.f.Close()
	os.Remove(u.f.Name())
}

// commit checks the digest and moves the blob into cas/; on any error the
// upload is dropped and nothing is stored.
func (u *blobUpload) commit() error {
	got := Digest{Hash: hex.EncodeToString(u.h.Sum(nil)), Size: u.n}
	if u.want.Size < 0 {
		u.want.Size = u.n
	}
	if got != u.want {
		u.abort()
		return fmt.Errorf("receiving blob %s: got %d bytes hashing to %s: %w", u.want, got.Size, got.Hash, ErrDigestMismatch)
	}
	fail := func(err error) error {
		u.abort()
		return fmt.Errorf("storing blob %s: %w", u.want, err)
	}
	if err := u.f.Sync(); err != nil {
		return fail(err)
	}
	if err := u.f.Chmod(blobMode); err != nil {
		return fail(err)
	}
	if err := u.f.Close(); err != nil {
		os.Remove(u.f.Name())
		return fmt.Errorf("storing blob %s: %w", u.want, err)
	}
	if err := renameInto(u.f.Name(), u.c.BlobPath(u.want)); err != nil {
		os.Remove(u.f.Name())
		return fmt.Errorf("storing blob %s: %w", u.want, err)
	}
	return nil
}

// receiveBlob stores the blob want from r, hashing while it streams: it is
// stored only if r yields exactly the bytes of want (an error wrapping
// ErrDigestMismatch otherwise).
func (c *Cache) receiveBlob(want Digest, r io.Reader) (int64, error) {
	u, err := c.newBlobUpload(want)
	if err != nil {
		return 0, err
	}
	if want.Size >= 0 {
		r = io.LimitReader(r, want.Size+1)
	}
	if _, err := io.Copy(u, r); err != nil {
		u.abort()
		return u.n, err
	}
	return u.n, u.commit()
}

// touch marks path as used now, for the server's LRU eviction (best effort:
// a blob that vanished meanwhile needs no refresh).
func touch(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}

// readAC returns the ActionResult stored under key, if every blob it
// references is present: an entry with a missing blob is a miss (an error
// wrapping ErrNotFound), never handed out half-present. Such an entry, and one
// that does not decode, is a *staleACError (lookupAC removes it). Reading
// refreshes the entry and its blobs for the LRU.
func (c *Cache) readAC(key Digest) (*repb.ActionResult, []byte, error) {
	p := c.acPath(key)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("action cache entry %s: %w", key.Hash, ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading action cache entry %s: %w", key.Hash, err)
	}
	stale := func(err error) (*repb.ActionResult, []byte, error) {
		return nil, nil, &staleACError{data: data, err: err}
	}
	// A damaged entry or tree is a miss as well (both ErrNotFound and
	// ErrCorrupt): the client builds and writes it again.
	ar := &repb.ActionResult{}
	if err := proto.Unmarshal(data, ar); err != nil {
		return stale(fmt.Errorf("action cache entry %s: %v: %w (%w)", key.Hash, err, ErrCorrupt, ErrNotFound))
	}
	blobs, err := c.actionResultBlobs(ar)
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
	touch(p)
	for _, d := range blobs {
		touch(c.BlobPath(d))
	}
	return ar, data, nil
}

// actionResultBlobs lists every blob ar references: output files, stdout and
// stderr, output directories' trees and the files and directories within them
// (the Tree blobs must be present to be read; a missing one is ErrNotFound).
func (c *Cache) actionResultBlobs(ar *repb.ActionResult) ([]Digest, error) {
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

// writeAC stores ar's serialization under key. data must parse as an
// ActionResult (an error wrapping ErrCorrupt otherwise). The blobs it
// references are refreshed first, so the evictor keeps them (server_evict.go).
func (c *Cache) writeAC(key Digest, data []byte) error {
	ar := &repb.ActionResult{}
	if err := proto.Unmarshal(data, ar); err != nil {
		return fmt.Errorf("action cache entry %s: not an ActionResult: %v: %w", key.Hash, err, ErrCorrupt)
	}
	if blobs, err := c.actionResultBlobs(ar); err == nil {
		for _, d := range blobs {
			touch(c.BlobPath(d))
		}
	}
	if err := c.writeFileAtomic(c.acPath(key), data, 0o644, dirSynced); err != nil {
		return fmt.Errorf("storing action cache entry %s: %w", key.Hash, err)
	}
	return nil
}
