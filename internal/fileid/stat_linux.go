package fileid

import (
	"os"
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
