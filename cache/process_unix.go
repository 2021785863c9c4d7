//go:build unix

package cache

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with this pid exists (in our pid
// namespace). A reused pid makes a stray entry look live, which only delays
// its removal.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
