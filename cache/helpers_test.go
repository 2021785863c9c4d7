package cache

import (
	"io/fs"
	"os/exec"
	"path/filepath"
	"testing"
)

func openTestCache(t testing.TB) *Cache {
	t.Helper()
	c, err := Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// countBlobs returns the number of files in cas/.
func countBlobs(t testing.TB, c *Cache) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(c.Root, CASDir), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// deadPID returns the pid of a process that has exited.
func deadPID(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	return cmd.Process.Pid
}
