package proctree

import (
	"os"
	"os/exec"
	"testing"
)

// sharesOurMemory tells a vfork child between clone and exec, which FreezeTree
// kills instead of stopping (stopped, it holds the Go runtime of the process that
// forked it: seen in the kill -9 campaign, a worker hung with a thread in
// kernel_clone and every other in futex), from every other process: the caller
// itself counts, an exec'd child does not.
func TestSharesOurMemory(t *testing.T) {
	if !sharesOurMemory(os.Getpid()) {
		t.Error("the calling process does not share its own memory")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if sharesOurMemory(cmd.Process.Pid) {
		t.Errorf("exec'd child %d counts as sharing our memory", cmd.Process.Pid)
	}
	if sharesOurMemory(os.Getppid()) {
		t.Errorf("our parent %d counts as sharing our memory", os.Getppid())
	}
}
