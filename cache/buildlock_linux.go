package cache

import (
	"errors"

	"golang.org/x/sys/unix"
)

const openLockFlags = unix.O_RDWR | unix.O_CREAT

// lockByte takes byte off of the lock file open as fd with an open file
// description lock: at once or not at all (false), or, with wait, once the
// holder has let go of it.
func lockByte(fd int, off int64, wait bool) (bool, error) {
	cmd := unix.F_OFD_SETLK
	if wait {
		cmd = unix.F_OFD_SETLKW
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: off, Len: 1}
	for {
		err := unix.FcntlFlock(uintptr(fd), cmd, &lk)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case !wait && (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES)):
			return false, nil
		}
		return false, err
	}
}

func closeFD(fd int) { _ = unix.Close(fd) }
