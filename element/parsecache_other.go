//go:build !linux

package element

import "syscall"

// statCtime: the parse cache is used on Linux only, where it is tested.
func statCtime(st *syscall.Stat_t) (int64, bool) { return 0, false }
