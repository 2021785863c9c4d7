package element

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// statCtime is a file's change time in ns; ok is false where the platform has none.
func statCtime(st *syscall.Stat_t) (int64, bool) { return st.Ctim.Sec*1e9 + st.Ctim.Nsec, true }

// statAt is the identity of the regular file at path relative to the directory dir,
// in one fstatat; ok is false for anything else (a symbolic link, a missing file).
func statAt(dir *os.File, path string) (fileID, bool) {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(int(dir.Fd()), path, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.EINTR {
			continue
		}
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fileID{}, false
		}
		break
	}
	return fileID{Size: st.Size, Mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec, Ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
		Ino: uint64(st.Ino), Dev: uint64(st.Dev)}, true
}
