//go:build linux

package cache

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/internal/testtree"
	"golang.org/x/sys/unix"
)

// takeSpec is an install root: files (one executable), a symlink, an empty
// directory.
var takeSpec = map[string]string{
	"bin/tool":      "exec:#!/bin/sh\necho tool\n",
	"lib/libx.so":   "file:library bytes",
	"lib/libx.so.1": "symlink:libx.so",
	"share/doc":     "file:documentation",
	"share/empty":   "dir",
}

// installRoot writes spec into a fresh directory under the cache's tmp/, as a
// build job's install root is.
func installRoot(t *testing.T, c *Cache, spec map[string]string) string {
	t.Helper()
	dir, err := c.TempDir("install")
	if err != nil {
		t.Fatal(err)
	}
	testtree.Write(t, dir, spec, nil)
	return dir
}

// needLeases skips the test where the kernel grants no file leases
// (fs.leases-enable=0, some filesystems): TakeTree then copies every file.
func needLeases(t *testing.T, c *Cache) {
	t.Helper()
	f, err := c.tempFile("lease-probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	f.Close()
	fd, err := unix.Open(f.Name(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := setLease(fd, unix.F_RDLCK); err != nil {
		t.Skipf("no file leases here (%v; sysctl fs.leases-enable): TakeTree copies every file", err)
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestTakeTreeMovesFiles: TakeTree gives the digest StoreTree gives for the same
// content, moves each file's inode into cas/ (read-only) instead of copying it,
// and the tree checks out as it was.
func TestTakeTreeMovesFiles(t *testing.T) {
	c := openTestCache(t)
	needLeases(t, c)
	want, err := c.StoreTree(installRoot(t, c, takeSpec))
	if err != nil {
		t.Fatal(err)
	}
	removeAll(filepath.Join(c.Root, CASDir)) // so that nothing is found present
	dir := installRoot(t, c, takeSpec)
	lib := filepath.Join(dir, "lib/libx.so")
	ino := inode(t, lib)
	got, err := c.TakeTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("TakeTree = %s, StoreTree of the same tree = %s", got, want)
	}
	blob := c.BlobPath(DigestOf([]byte("library bytes")))
	if inode(t, blob) != ino {
		t.Errorf("the blob of lib/libx.so is a copy, not the install root's file moved in")
	}
	if fi, err := os.Stat(blob); err != nil || fi.Mode().Perm() != blobMode {
		t.Errorf("blob %s: %v, mode %v; want mode %v", blob, err, fi.Mode().Perm(), blobMode)
	}
	if _, err := os.Lstat(lib); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("install root still has %s after TakeTree (err %v): a write there would reach the blob", lib, err)
	}
	out := t.TempDir()
	if err := c.Checkout(got, out, CheckoutOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := testtree.Diff(testtree.WithDirs(takeSpec), testtree.Read(t, out)); diff != "" {
		t.Errorf("checkout of the taken tree differs:\n%s", diff)
	}
	if rep, err := c.Verify(); err != nil || !rep.Clean() {
		t.Errorf("Verify after TakeTree = %+v, %v; want clean", rep, err)
	}
}

// TestTakeTreeLaterWritesCannotReachBlobs: nothing that could still write to an
// install root's file after TakeTree — a new file at its path, a hard link to it
// elsewhere, a descriptor open for writing, a link made while it was being moved
// in — can change a blob.
func TestTakeTreeLaterWritesCannotReachBlobs(t *testing.T) {
	c := openTestCache(t)
	spec := map[string]string{"path": "file:by path", "linked": "file:by link", "open": "file:by descriptor", "late": "file:linked late"}
	dir := installRoot(t, c, spec)
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Link(filepath.Join(dir, "linked"), elsewhere); err != nil {
		t.Fatal(err)
	}
	writer, err := os.OpenFile(filepath.Join(dir, "open"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	// A link to "late" made after its checks, once it is in cas/ (as a
	// build's leftover process could make one through the install root).
	lateBlob := c.BlobPath(DigestOf([]byte("linked late")))
	late := filepath.Join(t.TempDir(), "late")
	c.trace = func(event, p string) {
		if event == eventBlobMoved && p == lateBlob {
			if err := os.Link(p, late); err != nil {
				t.Error(err)
			}
		}
	}
	root, err := c.TakeTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.trace = nil

	overwrite := func(p string) {
		t.Helper()
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("overwritten"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "path"), []byte("overwritten"), 0o644); err != nil {
		t.Fatal(err)
	}
	overwrite(elsewhere)
	overwrite(late)
	if _, err := writer.WriteAt([]byte("overwritten"), 0); err != nil {
		t.Fatal(err)
	}
	for name, content := range spec {
		d := DigestOf([]byte(content[len("file:"):]))
		if err := c.checkBlob(d); err != nil {
			t.Errorf("blob of %s changed by a write after TakeTree: %v", name, err)
		}
	}
	out := t.TempDir()
	if err := c.Checkout(root, out, CheckoutOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := testtree.Diff(testtree.WithDirs(spec), testtree.Read(t, out)); diff != "" {
		t.Errorf("checkout differs:\n%s", diff)
	}
}

// TestTakeTreeLeaseBroken: an open for writing that starts while a file is
// being moved in (it breaks the lease; with O_NONBLOCK it fails at once, the
// break still under way) leaves cas/ with a fresh copy, never the inode that
// writer will reach.
func TestTakeTreeLeaseBroken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("opening a read-only blob for writing needs root (CAP_DAC_OVERRIDE)")
	}
	c := openTestCache(t)
	needLeases(t, c)
	dir := installRoot(t, c, map[string]string{"f": "file:contended"})
	blob := c.BlobPath(DigestOf([]byte("contended")))
	ino := inode(t, filepath.Join(dir, "f"))
	broke := false
	c.trace = func(event, p string) {
		if event == eventBlobMoved && p == blob {
			_, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			broke = errors.Is(err, unix.EWOULDBLOCK)
		}
	}
	if _, err := c.TakeTree(dir); err != nil {
		t.Fatal(err)
	}
	if !broke {
		t.Fatal("the open for writing did not meet the lease")
	}
	if inode(t, blob) == ino {
		t.Error("cas/ still holds the inode whose lease was broken: its writer can change the blob")
	}
	if err := c.checkBlob(DigestOf([]byte("contended"))); err != nil {
		t.Error(err)
	}
}

// TestTakeTreeOtherFilesystem: files TakeTree cannot rename into cas/ (here
// another filesystem; a directory the build made read-only does the same to a
// user who is not root) are copied, and the tree is stored all the same.
func TestTakeTreeOtherFilesystem(t *testing.T) {
	c := openTestCache(t)
	var shm, cas unix.Stat_t
	if unix.Stat("/dev/shm", &shm) != nil || unix.Stat(c.Root, &cas) != nil || shm.Dev == cas.Dev {
		t.Skip("needs /dev/shm on a filesystem other than the test cache's")
	}
	dir, err := os.MkdirTemp("/dev/shm", "gantry-take-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(dir)
	testtree.Write(t, dir, takeSpec, nil)
	want, err := c.StoreTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	removeAll(filepath.Join(c.Root, CASDir))
	got, err := c.TakeTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("TakeTree across filesystems = %s, want %s", got, want)
	}
	if err := c.checkBlob(DigestOf([]byte("library bytes"))); err != nil {
		t.Error(err)
	}
}
