package cache

import "syscall"

// statIdentity is the identity of the regular file at path, in one stat (following
// symbolic links, as a read does); ok is false when it cannot be had.
func statIdentity(path string) (fileIdentity, bool) {
	var st syscall.Stat_t
	for {
		err := syscall.Stat(path, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fileIdentity{}, false
		}
		return identityOf(&st)
	}
}

// fstatIdentity is statIdentity of an open file.
func fstatIdentity(fd int) (fileIdentity, bool) {
	var st syscall.Stat_t
	for {
		err := syscall.Fstat(fd, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fileIdentity{}, false
		}
		return identityOf(&st)
	}
}

func identityOf(st *syscall.Stat_t) (fileIdentity, bool) {
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return fileIdentity{}, false
	}
	return fileIdentity{Size: st.Size, Mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec, Ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
		Ino: uint64(st.Ino), Dev: uint64(st.Dev)}, true
}
