package serve

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/gantry-build/gantry/cache"
)

// A small read costs what opening its blob costs. os.Open of a regular file
// makes six system calls on Linux (openat, four fcntl to set and clear
// O_NONBLOCK, an epoll_ctl that fails); openBlob makes two (openat relative to
// the store's cas/ directory, which also saves the walk of the store's path,
// and the fcntl of os.NewFile).

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

// open opens the blob stored under hash, a valid digest's, as os.Open would
// (its errors are *os.PathError's naming the blob's path).
func (b blobDir) open(hash string) (*os.File, error) {
	rel := hash[:2] + "/" + hash
	path := b.path + "/" + rel
	if b.dir == nil {
		return os.Open(path)
	}
	var fd int
	var err error
	ctlErr := b.rc.Control(func(dirfd uintptr) {
		for {
			fd, err = syscall.Openat(int(dirfd), rel, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != syscall.EINTR {
				return
			}
		}
	})
	if ctlErr != nil {
		return os.Open(path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
