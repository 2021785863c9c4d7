package fileid

import (
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Stat is the ID of the regular file at path, in one stat (following symbolic links,
// as a read does); ok is false for anything else or when it cannot be had.
func Stat(path string) (ID, bool) {
	var st syscall.Stat_t
	if err := retry(func() error { return syscall.Stat(path, &st) }); err != nil {
		return ID{}, false
	}
	return FromStat(&st)
}

// Fstat is Stat of an open file.
func Fstat(fd int) (ID, bool) {
	var st syscall.Stat_t
	if err := retry(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return ID{}, false
	}
	return FromStat(&st)
}

// At is the ID of the regular file at path relative to the directory dir, in one
// fstatat that does not follow a symbolic link; ok is false for anything else (a link,
// a missing file).
func At(dir *os.File, path string) (ID, bool) {
	var st unix.Stat_t
	if err := retry(func() error { return unix.Fstatat(int(dir.Fd()), path, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil ||
		st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ID{}, false
	}
	return ID{Size: st.Size, Mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec, Ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
		Ino: uint64(st.Ino), Dev: uint64(st.Dev)}, true
}

// FromInfo is the ID of the file fi describes, if it is a regular file.
func FromInfo(fi os.FileInfo) (ID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ID{}, false
	}
	return FromStat(st)
}

// FromStat is the ID of the file st describes, if it is a regular file.
func FromStat(st *syscall.Stat_t) (ID, bool) {
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return ID{}, false
	}
	return ID{Size: st.Size, Mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec, Ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
		Ino: uint64(st.Ino), Dev: uint64(st.Dev)}, true
}

// retry runs a system call again while a signal interrupts it.
func retry(call func() error) error {
	for {
		if err := call(); err != syscall.EINTR {
			return err
		}
	}
}

// ReadAt reads the regular file at path relative to the directory dir and returns its
// content and the ID it had when opened, in four system calls (openat2, fstat, read,
// close; os.Root's open adds a stat, four fcntls and an epoll registration, which were
// most of the system time of loading 100,000 element files). The path must lead to the
// file without a symbolic link and without leaving dir (RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS); ok is false for anything else — a link, a missing file, a kernel
// without openat2 — and the caller reads the file through its os.Root, which follows
// links that stay inside and names the error.
//
// The content is read up to the size the open file had (the ID's): a file that grows
// meanwhile has another ID by then, so a cache keyed by the ID reads it again.
func ReadAt(dir *os.File, path string) (data []byte, id ID, ok bool) {
	if noOpenat2.Load() {
		return nil, ID{}, false
	}
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	err := retry(func() (err error) { fd, err = unix.Openat2(int(dir.Fd()), path, &how); return err })
	if err != nil {
		if err == unix.ENOSYS || err == unix.EPERM {
			noOpenat2.Store(true) // an old kernel, or a seccomp filter that refuses it
		}
		return nil, ID{}, false
	}
	defer unix.Close(fd)
	if id, ok = Fstat(fd); !ok {
		return nil, ID{}, false // not a regular file
	}
	data = make([]byte, id.Size)
	for n := 0; n < len(data); {
		var m int
		if err := retry(func() (err error) { m, err = unix.Read(fd, data[n:]); return err }); err != nil {
			return nil, ID{}, false
		}
		if m == 0 {
			return data[:n], id, true // shrunk since the fstat: a new ID already
		}
		n += m
	}
	return data, id, true
}

// noOpenat2 is set once openat2 is known to be unavailable.
var noOpenat2 atomic.Bool
