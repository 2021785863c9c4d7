//go:build !linux

package job

import "syscall"

// Tree returns only root: without /proc, descendants are not found.
func Tree(root int) []Proc {
	return []Proc{{Pid: root}}
}

// startTime cannot tell processes apart here.
func startTime(pid int) (string, bool) {
	return "", syscall.Kill(pid, 0) == nil
}

// alive reports whether p still exists.
func (p Proc) alive() bool { return syscall.Kill(p.Pid, 0) == nil }
