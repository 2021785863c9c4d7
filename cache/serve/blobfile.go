package serve

import (
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gantry-build/gantry/cache"
)

// A small read costs what opening its blob costs. os.Open of a regular file
// makes six system calls on Linux (openat, four fcntl to set and clear
// O_NONBLOCK, an epoll_ctl that fails), allocates a File and registers its
// cleanup; an HTTP GET opens its blob with one openat relative to the store's
// cas/ directory (which also saves the walk of the store's path) and reads it
// by its descriptor (blobFile: fstat, pread, close, as nginx).

// blobDir is the store's cas/ directory, open for openat for the server's
// life (its *os.File closes it once the server is garbage: a handler that
// outlives Serve, which http.Server.Close allows, still has its descriptor).
type blobDir struct {
	path string
	dir  *os.File        // nil: open by path
	rc   syscall.RawConn // dir's
}

func openBlobDir(c *cache.Cache) blobDir {
	p := filepath.Join(c.Root, cache.CASDir)
	dir, err := os.Open(p)
	if err != nil {
		return blobDir{path: p}
	}
	rc, err := dir.SyscallConn()
	if err != nil {
		dir.Close()
		return blobDir{path: p}
	}
	return blobDir{p, dir, rc}
}

// open opens the blob stored under hash, a valid digest's, by its
// descriptor alone: no *os.File (a fcntl, an allocation and a cleanup per
// read). Its errors are *os.PathError's naming the blob's path, as os.Open's.
func (b blobDir) open(hash string) (blobFile, error) {
	rel := hash[:2] + "/" + hash
	path := b.path + "/" + rel
	if b.dir == nil {
		fd, err := openRetry(func() (int, error) { return syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) })
		if err != nil {
			return blobFile{}, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return blobFile{fd, path}, nil
	}
	var fd int
	var err error
	ctlErr := b.rc.Control(func(dirfd uintptr) {
		fd, err = openRetry(func() (int, error) { return syscall.Openat(int(dirfd), rel, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) })
	})
	if ctlErr != nil {
		return blobDir{path: b.path}.open(hash)
	}
	if err != nil {
		return blobFile{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return blobFile{fd, path}, nil
}

func openRetry(open func() (int, error)) (int, error) {
	for {
		fd, err := open()
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// blobFile is a blob open for reading, by its descriptor.
type blobFile struct {
	fd   int
	path string
}

func (f blobFile) Name() string { return f.path }

func (f blobFile) Close() error { return syscall.Close(f.fd) }

// ReadAt is io.ReaderAt's: it fills p unless the blob ends first (io.EOF).
func (f blobFile) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		k, err := syscall.Pread(f.fd, p[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, &os.PathError{Op: "read", Path: f.path, Err: err}
		}
		if k == 0 {
			return n, io.EOF
		}
		n += k
	}
	return n, nil
}

// stat is fstat(2) of the blob.
func (f blobFile) stat() (syscall.Stat_t, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Fstat(f.fd, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return st, &os.PathError{Op: "stat", Path: f.path, Err: err}
		}
		return st, nil
	}
}

// osFile returns a *os.File of its own on the blob (a duplicate descriptor),
// for what wants one (quarantine): the caller closes it.
func (f blobFile) osFile() (*os.File, error) {
	fd, err := syscall.Dup(f.fd)
	if err != nil {
		return nil, &os.PathError{Op: "dup", Path: f.path, Err: err}
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), f.path), nil
}
