package cache

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/gantry-build/gantry/internal/testtree"
)

// Several writers (standing in for several gantry processes) storing the
// same content and committing the same artifact must leave a clean cache.
func TestConcurrentWriters(t *testing.T) {
	root := filepath.Join(t.TempDir(), "cache")
	src := t.TempDir()
	testtree.Write(t, src, sampleTree, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Go(func() {
			c, err := Open(root) // each with its own handle, like a process
			if err != nil {
				errs <- err
				return
			}
			files, err := c.StoreTree(src)
			if err != nil {
				errs <- err
				return
			}
			if _, err := c.PutBlob([]byte("shared log")); err != nil {
				errs <- err
				return
			}
			a := &Artifact{Project: "demo", Element: "base/x.toml", Key: "k", Success: true, Files: files}
			if err := c.Commit(a); err != nil {
				errs <- err
				return
			}
			if err := c.Checkout(files, t.TempDir(), CheckoutOptions{Hardlink: true}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Refs != 1 || len(rep.StrayTemp) != 0 {
		t.Errorf("Verify = %+v", rep)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) != 0 {
		t.Errorf("tmp/ not empty: %v", entries)
	}
}

// Hard links cannot cross filesystems: Checkout falls back to copying.
func TestCheckoutHardlinkAcrossFilesystems(t *testing.T) {
	c := openTestCache(t)
	other, err := os.MkdirTemp("/dev/shm", "gantry-cache-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	var a, b syscall.Stat_t
	if syscall.Stat(c.Root, &a) != nil || syscall.Stat(other, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the same filesystem as the test cache")
	}
	src := t.TempDir()
	testtree.Write(t, src, sampleTree, nil)
	root, err := c.StoreTree(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Checkout(root, other, CheckoutOptions{Hardlink: true}); err != nil {
		t.Fatal(err)
	}
	if d := testtree.Diff(testtree.WithDirs(sampleTree), testtree.Read(t, other)); d != "" {
		t.Errorf("checkout differs:\n%s", d)
	}
}
