package cache

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"golang.org/x/sys/unix"
)

// copyTrusted is copyBlob for a trusted checkout (CheckoutOptions.Trusted): the
// blob's type, size and mode are checked with one fstat and its bytes copied by
// the kernel (copy_file_range: a reflink where the filesystem can), never read
// into gantry nor hashed. Six system calls for a small file: open, fstat, open
// (create), copy_file_range, close, close. A blob whose mode is not blobMode
// was made writable since it was stored: it is hashed as it is copied
// (copyBlob), as an untrusted checkout does.
func (c *Cache) copyTrusted(f *repb.FileNode, p, rel string, opts CheckoutOptions) error {
	d := DigestFromProto(f.Digest)
	src := c.BlobPath(d)
	if src == "" {
		return fmt.Errorf("checking out %s: %w", p, d.Validate())
	}
	sfd, err := openFD(src, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ELOOP) {
		err = fmt.Errorf("%w: a symlink, not a blob: %w", err, ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("checking out %s: opening blob %s: %w", p, d, err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return fmt.Errorf("checking out %s: opening blob %s: %w", p, d, err)
	}
	switch trusted, err := checkStat(&st, src, d, blobMode); {
	case err != nil:
		return fmt.Errorf("checking out %s: %w", p, err)
	case !trusted:
		opts.Trusted = false
		return c.copyBlob(f, p, rel, opts)
	}
	perm := uint32(0o644)
	if f.IsExecutable {
		perm = 0o755
	}
	dfd, err := openFD(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, perm)
	if errors.Is(err, fs.ErrExist) {
		return c.existingFile(f, p, rel, opts)
	}
	if err != nil {
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	err = copyFD(dfd, sfd, d.Size)
	if err == nil && perm&umask() != 0 {
		err = unix.Fchmod(dfd, perm) // the mode a tree gives, whatever the umask
	}
	if cerr := unix.Close(dfd); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p)
		return fmt.Errorf("checking out %s from blob %s: %w", p, d, err)
	}
	return nil
}

// checkStat is a trusted checkout's check of st, the blob d at p, which must
// have mode: a regular file of d's size (anything else is damage: an error
// wrapping ErrCorrupt), and trusted only with that mode.
func checkStat(st *unix.Stat_t, p string, d Digest, mode uint32) (trusted bool, err error) {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("blob %s: %s is not a regular file: %w", d, p, ErrCorrupt)
	}
	if st.Size != d.Size {
		return false, fmt.Errorf("blob %s: %s has %d bytes: %w", d, p, st.Size, ErrCorrupt)
	}
	return st.Mode&0o7777 == mode, nil
}

// checkLinkedTrusted is checkLinked for a trusted checkout: p, just linked to
// src (the blob d or its twin, whose mode is mode), is checked by one lstat;
// content is hashed only where the mode says the inode was made writable.
func (c *Cache) checkLinkedTrusted(d Digest, src, p string, mode uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	trusted, err := checkStat(&st, src, d, mode)
	if err != nil {
		os.Remove(p)
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	if trusted {
		return nil
	}
	return c.checkLinked(d, src, p)
}

// copyFD copies size bytes of the file open at sfd, from its start, to the new
// file open at dfd: with copy_file_range, or read and write where the kernel
// cannot (an old kernel, two filesystems it will not copy between). Fewer bytes
// than size (the blob shrank meanwhile) is damage.
func copyFD(dfd, sfd int, size int64) error {
	var off int64
	for off < size {
		n, err := unix.CopyFileRange(sfd, nil, dfd, nil, int(min(size-off, 1<<30)), 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil && off == 0 && (err == unix.EXDEV || err == unix.EINVAL || err == unix.ENOSYS ||
			err == unix.EOPNOTSUPP || err == unix.EPERM) {
			return copyFDSlow(dfd, sfd, size)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("the blob ended after %d of %d bytes: %w", off, size, ErrCorrupt)
		}
		off += int64(n)
	}
	return nil
}

// copyFDSlow is copyFD through a buffer.
func copyFDSlow(dfd, sfd int, size int64) error {
	buf := copyBuffers.Get().(*[256 << 10]byte)
	defer copyBuffers.Put(buf)
	var off int64
	for off < size {
		n, err := unix.Pread(sfd, buf[:min(int64(len(buf)), size-off)], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("the blob ended after %d of %d bytes: %w", off, size, ErrCorrupt)
		}
		for w := buf[:n]; len(w) > 0; {
			m, err := unix.Write(dfd, w)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			w = w[m:]
		}
		off += int64(n)
	}
	return nil
}

// umask is the process's file mode creation mask, read from /proc (reading it
// with umask(2) means setting it, which other goroutines creating files would
// see); all bits set where it cannot be read, so that every copy is chmodded.
var umask = sync.OnceValue(func() uint32 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0o777
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(m)
			}
		}
	}
	return 0o777
})
