package cache

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the filesystem holding dir: one journal commit for every blob.
func syncFS(dir string) error {
	fd, err := openFD(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// startWriteback asks the kernel to start writing f's dirty pages now, without
// waiting: the syncfs that makes f durable later finds less left to write.
func startWriteback(f *os.File) {
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
