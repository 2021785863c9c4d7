//go:build linux

package proctest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// vforkStopped is a parent that vforks a child which stops itself before its
// exec, as a child of dash's vfork does when SIGSTOP reaches it between the two.
const vforkStopped = `#include <signal.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
	pid_t p = vfork();
	if (p == 0) {
		raise(SIGSTOP);
		execl("/bin/sleep", "sleep", "100", (char *)0);
		_exit(127);
	}
	printf("%d\n", (int)p);
	fflush(stdout);
	pause();
	return 0;
}
`

// TestStoppedCountsAVforkParent: a group stop must count a vfork parent whose
// child was stopped before its exec. The parent stays in D (its vfork wait cannot
// be stopped) with SIGSTOP pending, and it cannot run before the child does.
// Counting only state T waited forever on it (CI, sandbox tests).
func TestStoppedCountsAVforkParent(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("gcc is needed to build the vfork test program")
		}
		t.Skip("gcc is needed to build the vfork test program: apt-get install gcc")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "vfork.c"), filepath.Join(dir, "vfork")
	if err := os.WriteFile(src, []byte(vforkStopped), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	pgid, stdout := startGroup(t, exec.Command(bin))

	// The parent prints the child's pid once the child has exec'd or exited, which
	// it never does here: wait for the states instead.
	go func() { _, _ = bufio.NewReader(stdout).ReadString('\n') }()
	Eventually(t, "the child stops itself and the parent waits in its vfork", func() bool {
		parent, ok := Read(pgid)
		g := Group(pgid)
		return ok && parent.State == 'D' && len(g) == 2 && (g[0].State == 'T' || g[1].State == 'T')
	})
	if AllStopped(Group(pgid)) {
		t.Fatalf("the group counts as stopped before SIGSTOP reached the parent:\n%s", DescribeGroup(pgid))
	}
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "the group counts as stopped", func() bool { return AllStopped(Group(pgid)) })
	if parent, _ := Read(pgid); parent.State != 'D' {
		t.Fatalf("the parent is in state %c, want D: the test no longer exercises a vfork wait", parent.State)
	}
}

// TestGroupAndStates runs a shell and its child in their own group: both are
// members, neither stopped; after SIGSTOP both are; after SIGCONT none is.
func TestGroupAndStates(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 100 & echo $!; wait")
	pgid, stdout := startGroup(t, cmd)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	sleep, _ := strconv.Atoi(strings.TrimSpace(line))
	Eventually(t, "the sleep runs", func() bool { p, ok := Read(sleep); return ok && p.Comm == "sleep" })
	p, _ := Read(sleep)
	if p.PPID != pgid || p.PGrp != pgid || !Alive(sleep) {
		t.Fatalf("sleep: %+v, want ppid and group %d, alive", p, pgid)
	}
	if g := Group(pgid); len(g) != 2 || AllStopped(g) || !NoneStopped(g) {
		t.Fatalf("before SIGSTOP:\n%s", DescribeGroup(pgid))
	}
	_ = syscall.Kill(-pgid, syscall.SIGSTOP)
	Eventually(t, "both stop", func() bool { return AllStopped(Group(pgid)) })
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
	Eventually(t, "both run again", func() bool { return NoneStopped(Group(pgid)) })
	if d := DescribeGroup(pgid); !strings.Contains(d, "sleep 100") {
		t.Fatalf("Describe does not show the command line:\n%s", d)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = cmd.Wait()
	Eventually(t, "the sleep is gone", func() bool { return !Alive(sleep) })
	if AllStopped(nil) {
		t.Fatal("an empty group counts as stopped")
	}
}

// startGroup starts cmd in a process group of its own, killed when the test
// ends, and returns the group and cmd's stdout.
func startGroup(t *testing.T, cmd *exec.Cmd) (pgid int, stdout io.Reader) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid = cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL); _ = cmd.Wait() })
	return pgid, stdout
}
