package cache

import "golang.org/x/sys/unix"

// syncFS flushes the filesystem holding dir: one journal commit for every blob.
func syncFS(dir string) error {
	fd, err := openFD(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}
