package cache

import (
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// unnamedOff is set once O_TMPFILE proved unsupported here (the filesystem or the
// kernel): every later file goes through a temporary name at once.
var unnamedOff atomic.Bool

// procFDs reports whether /proc/self/fd is there: linkUnnamed names the file through it
// (linkat with AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH).
var procFDs = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/fd")
	return err == nil
})

// openUnnamed opens a new file with no name in dir (O_TMPFILE), mode perm, for
// linkUnnamed to give it its name once written: no temporary name to make and remove,
// and nothing left behind by a crash. errors.ErrUnsupported where there is none.
func openUnnamed(dir string, perm uint32) (*os.File, error) {
	if unnamedOff.Load() || !procFDs() {
		return nil, errors.ErrUnsupported
	}
	fd, err := openFD(dir, unix.O_RDWR|unix.O_TMPFILE, perm)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) && (pe.Err == unix.EOPNOTSUPP || pe.Err == unix.EISDIR || pe.Err == unix.EINVAL) {
			unnamedOff.Store(true)
			return nil, errors.ErrUnsupported
		}
		return nil, err
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// linkUnnamed gives the file f, opened by openUnnamed, the name dst, with one linkat(2):
// it appears there complete, or not at all; an error wrapping fs.ErrExist when dst
// exists.
func linkUnnamed(f *os.File, dst string) error {
	src := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	for {
		err := unix.Linkat(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW)
		if err != unix.EINTR {
			if err != nil {
				return &os.LinkError{Op: "link", Old: f.Name() + " (unnamed)", New: dst, Err: err}
			}
			return nil
		}
	}
}
