package cache

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the filesystem holding dir: one journal commit for every blob.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
