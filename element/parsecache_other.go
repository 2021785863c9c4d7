//go:build !linux

package element

import (
	"os"
	"syscall"
)

// statCtime: the parse cache is used on Linux only, where it is tested.
func statCtime(st *syscall.Stat_t) (int64, bool) { return 0, false }

// statAt: elsewhere the parse cache stats through the root.
func statAt(dir *os.File, path string) (fileID, bool) { return fileID{}, false }
