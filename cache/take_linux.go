package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// takeFile moves the regular file at p into cas/ as a blob, without copying its
// bytes, when nothing else can reach its inode; otherwise it stores a copy, as
// putFile does. p is consumed either way: the caller must own it (an install
// root under tmp/) and never read it again.
//
// Who else can hold the inode, and how each is shut out:
//   - another path (a hard link the build made, in the tree or anywhere): st_nlink
//     must be 1, before the move and after it;
//   - a process with the file open for writing (a build's background process):
//     a read lease (F_SETLEASE, F_RDLCK) is granted only when no open file
//     description of the inode is writable, and an open for writing made while
//     it is held breaks it and blocks until it is let go;
//   - p itself: renamed away, so a later write to p makes a new file.
//
// The lease is held from before the hash to after the rename. If it was broken
// meanwhile, or a link appeared, the blob just renamed into place is replaced by
// a fresh copy of itself before the lease is let go, so a writer waiting on the
// old inode never reaches a name in cas/. Every step is a plain syscall (no
// os.File), since a build's install root can hold tens of thousands of files.
func (c *Cache) takeFile(p string) (Digest, fs.FileMode, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return Digest{}, 0, fmt.Errorf("storing file %s: %w", p, err)
	}
	defer unix.Close(fd) // lets go of the lease
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Digest{}, 0, fmt.Errorf("storing file %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Digest{}, 0, fmt.Errorf("storing file %s: not a regular file", p)
	}
	mode := fs.FileMode(st.Mode & 0o777)
	if st.Nlink != 1 || setLease(fd, unix.F_RDLCK) != nil {
		return c.putFile(p) // shared, or open for writing (or no leases here): copy
	}
	d, err := hashFD(fd, st.Size)
	if err != nil {
		return c.putFile(p) // changed size under us (truncated before the lease): copy
	}
	if err := unix.Fchmod(fd, blobMode); err != nil {
		return Digest{}, 0, fmt.Errorf("storing file %s: %w", p, err)
	}
	dst := c.BlobPath(d)
	if renameInto(p, dst) != nil {
		// Another filesystem (EXDEV), a directory the build made read-only
		// (EACCES): copy, which needs only to read p, and reports what fails.
		// p is 0444 now: the mode is the one it had.
		d, _, err := c.putFile(p)
		return d, mode, err
	}
	c.note(eventBlobMoved, dst)
	if !stillAlone(fd) {
		if err := c.replaceBlob(fd, d, dst); err != nil {
			return Digest{}, 0, fmt.Errorf("storing file %s as blob %s: %w", p, d, err)
		}
	}
	c.note(eventBlob, dst)
	return d, mode, nil
}

func setLease(fd, lease int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, lease)
	return err
}

// stillAlone reports whether fd's inode still has one name and our lease on it
// is unbroken: nobody can write to it once we let go.
func stillAlone(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Nlink != 1 {
		return false
	}
	lease, err := unix.FcntlInt(uintptr(fd), unix.F_GETLEASE, 0)
	return err == nil && lease == unix.F_RDLCK
}

// replaceBlob renames a fresh copy of fd's content over dst, the blob d whose
// inode is fd's: someone else may write to that inode once the lease is let go.
// Writers are blocked until then, so the copy holds d's bytes.
func (c *Cache) replaceBlob(fd int, d Digest, dst string) error {
	tmp, err := c.tempFile("blob")
	if err != nil {
		return err
	}
	got, err := copyHashed(tmp, &fdReader{fd: fd})
	if err == nil && got != d {
		err = Mismatch(d, got, dst)
	}
	if err == nil {
		err = tmp.Chmod(blobMode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = renameInto(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		os.Remove(dst) // never leave a blob someone can write to
		return fmt.Errorf("replacing a blob another process can write to: %w", err)
	}
	return nil
}

// fdReader reads the file open at fd from its start, with pread(2): the fd
// stays ours to close.
type fdReader struct {
	fd  int
	off int64
}

func (r *fdReader) Read(p []byte) (int, error) {
	n, err := unix.Pread(r.fd, p, r.off)
	if n == 0 && err == nil && len(p) > 0 {
		return 0, io.EOF
	}
	r.off += int64(max(n, 0))
	return max(n, 0), err
}

// hashFD hashes the size bytes of the file open at fd, from its start.
func hashFD(fd int, size int64) (Digest, error) {
	h := sha256.New()
	buf := copyBuffers.Get().(*[256 << 10]byte)
	defer copyBuffers.Put(buf)
	for n := int64(0); n < size; {
		m, err := unix.Pread(fd, buf[:min(int64(len(buf)), size-n)], n)
		if err != nil {
			return Digest{}, err
		}
		if m == 0 {
			return Digest{}, fmt.Errorf("file ended after %d of %d bytes", n, size)
		}
		h.Write(buf[:m])
		n += int64(m)
	}
	return Digest{Hash: hex.EncodeToString(h.Sum(nil)), Size: size}, nil
}
