package cache

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/internal/testtree"
)

// twinSpec is a sysroot's worth of files: an executable and a plain file.
var twinSpec = map[string]string{"bin/tool": "exec:#!/bin/sh\necho tool\n", "lib/data": "file:data"}

// commitTwinArtifact commits an artifact of twinSpec and returns it with the
// digest of its executable.
func commitTwinArtifact(t *testing.T, c *Cache) (*Artifact, Digest) {
	t.Helper()
	dir := t.TempDir()
	testtree.Write(t, dir, twinSpec, nil)
	files, err := c.StoreTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := &Artifact{Project: "p", Element: "base.toml", Key: "k1", Success: true, Files: files}
	if err := c.Commit(a); err != nil {
		t.Fatal(err)
	}
	return a, DigestOf([]byte("#!/bin/sh\necho tool\n"))
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}

// TestHardlinkCheckoutLinksExecutables: a linked checkout links an executable
// to its blob's executable twin (mode 0555), made once and shared by later
// checkouts, while the blob itself stays 0444; before, executables were copied.
func TestHardlinkCheckoutLinksExecutables(t *testing.T) {
	c := openTestCache(t)
	a, exe := commitTwinArtifact(t, c)
	first, second := filepath.Join(t.TempDir(), "1"), filepath.Join(t.TempDir(), "2")
	for _, dest := range []string{first, second} {
		if err := c.Checkout(a.Files, dest, CheckoutOptions{Hardlink: true}); err != nil {
			t.Fatal(err)
		}
		if diff := testtree.Diff(testtree.WithDirs(twinSpec), testtree.Read(t, dest)); diff != "" {
			t.Fatalf("linked checkout differs:\n%s", diff)
		}
	}
	if !sameFile(t, filepath.Join(first, "bin/tool"), filepath.Join(second, "bin/tool")) {
		t.Error("the executable was copied, not linked: two checkouts hold two inodes")
	}
	if got := c.TwinBytes(); got != exe.Size {
		t.Errorf("TwinBytes = %d after two linked checkouts, want %d: the one twin made, once", got, exe.Size)
	}
	twin := c.twinPath(exe)
	if fi, err := os.Stat(twin); err != nil || fi.Mode().Perm() != twinMode {
		t.Fatalf("executable twin %s: %v; want mode %v", twin, err, os.FileMode(twinMode))
	}
	if !sameFile(t, filepath.Join(first, "bin/tool"), twin) {
		t.Error("the staged executable is not the twin")
	}
	if fi, err := os.Stat(c.BlobPath(exe)); err != nil || fi.Mode().Perm() != blobMode {
		t.Errorf("blob %s: %v, want mode %v", c.BlobPath(exe), err, os.FileMode(blobMode))
	}
	if !sameFile(t, filepath.Join(first, "lib/data"), c.BlobPath(DigestOf([]byte("data")))) {
		t.Error("the plain file is not linked to its blob")
	}
}

// TestDamagedTwin: a damaged twin (a power loss before it reached the disk, a
// write through a link) is not its blob's damage: a linked checkout still gives
// the right bytes, drops the twin and keeps the blob and the artifact; Verify
// reports a damaged twin, Repair removes it, and the next linked checkout makes
// it again.
func TestDamagedTwin(t *testing.T) {
	c := openTestCache(t)
	a, exe := commitTwinArtifact(t, c)
	if err := c.Checkout(a.Files, t.TempDir(), CheckoutOptions{Hardlink: true}); err != nil {
		t.Fatal(err)
	}
	twin := c.twinPath(exe)
	testtree.CorruptFile(t, twin)
	os.Chmod(twin, twinMode)

	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || rep.Twins != 1 || len(rep.badTwins) != 1 {
		t.Fatalf("Verify with a damaged twin = %+v; want one problem, the twin", rep)
	}
	if _, err := c.Repair(rep); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(twin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Repair left the damaged twin: %v", err)
	}
	if _, err := c.Lookup(a.Project, a.Element, a.Key); err != nil {
		t.Errorf("Repair dropped the artifact for its twin's damage: %v", err)
	}

	if err := c.Checkout(a.Files, t.TempDir(), CheckoutOptions{Hardlink: true}); err != nil {
		t.Fatal(err)
	}
	testtree.CorruptFile(t, twin) // now damaged where only staging sees it
	os.Chmod(twin, twinMode)
	dest := t.TempDir()
	if err := c.Checkout(a.Files, dest, CheckoutOptions{Hardlink: true}); err != nil {
		t.Fatalf("linked checkout with a damaged twin: %v", err)
	}
	if diff := testtree.Diff(testtree.WithDirs(twinSpec), testtree.Read(t, dest)); diff != "" {
		t.Errorf("linked checkout with a damaged twin differs:\n%s", diff)
	}
	if _, err := os.Stat(twin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging kept the damaged twin: %v", err)
	}
	if err := c.checkBlob(exe); err != nil {
		t.Errorf("the blob suffered for its twin: %v", err)
	}
	if rep, err := c.Verify(); err != nil || !rep.Clean() {
		t.Errorf("Verify = %+v, %v; want clean", rep, err)
	}
}

// TestCleanupRemovesTwins: usage counts executable twins with their blobs; gc
// removes a twin with its blob, and a twin whose blob is gone.
func TestCleanupRemovesTwins(t *testing.T) {
	c := openTestCache(t)
	a, exe := commitTwinArtifact(t, c)
	if err := c.Checkout(a.Files, t.TempDir(), CheckoutOptions{Hardlink: true}); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Report(10)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Twins != 1 || rep.TwinBytes == 0 || rep.Unreferenced != 0 {
		t.Errorf("usage = %+v; want one twin, nothing unreferenced", rep)
	}
	// A twin of a blob that is gone is garbage.
	orphan, err := c.PutBlob([]byte("an executable nobody keeps"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.makeTwin(orphan); err != nil {
		t.Fatal(err)
	}
	os.Remove(c.BlobPath(orphan))
	if _, err := c.Cleanup(CleanupOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.twinPath(orphan)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("gc kept the twin of a missing blob: %v", err)
	}
	if _, err := os.Stat(c.twinPath(exe)); err != nil {
		t.Errorf("gc removed the twin of a blob still reached: %v", err)
	}
	ref := ArtifactRef{Project: a.Project, Element: a.Element, Key: a.Key}
	if _, err := c.Cleanup(CleanupOptions{Remove: []ArtifactRef{ref}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{c.BlobPath(exe), c.twinPath(exe)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("gc of the artifact left %s: %v", p, err)
		}
	}
	if rep, err := c.Verify(); err != nil || !rep.Clean() {
		t.Errorf("Verify = %+v, %v; want clean", rep, err)
	}
}
