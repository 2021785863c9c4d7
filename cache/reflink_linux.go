package cache

import (
	"os"

	"golang.org/x/sys/unix"
)

// cloneFile makes dst share src's content (FICLONE: a reflink, copy on
// write), where the filesystem can (btrfs, XFS, bcachefs); elsewhere it fails
// and the caller copies.
func cloneFile(dst, src *os.File) error {
	sc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	dc, err := dst.SyscallConn()
	if err != nil {
		return err
	}
	var cloneErr error
	err = sc.Control(func(sfd uintptr) {
		err := dc.Control(func(dfd uintptr) { cloneErr = unix.IoctlFileClone(int(dfd), int(sfd)) })
		if cloneErr == nil {
			cloneErr = err
		}
	})
	if err != nil {
		return err
	}
	return cloneErr
}
