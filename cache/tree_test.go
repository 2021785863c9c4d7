package cache

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/internal/testtree"
	"google.golang.org/protobuf/proto"
)

var sampleTree = map[string]string{
	"README":                  "file:hello\n",
	"empty":                   "file:",
	"bin/tool":                "exec:#!/bin/sh\necho hi\n",
	"bin/tool-link":           "symlink:tool",
	"usr/lib/libx.so.1":       "file:ELF...",
	"usr/lib/libx.so":         "symlink:libx.so.1",
	"usr/share/empty-dir":     "dir",
	"usr/share/doc/x/NOTES":   "file:hello\n", // same content as README
	"abs-link":                "symlink:/etc/hostname",
	"dangling":                "symlink:does/not/exist",
	"a-b/c":                   "file:sorting a-b before a/",
	"a/b":                     "file:sorting",
	"deep/1/2/3/4/5/6/7/leaf": "exec:deep",
}

// checkoutModes are the ways Checkout stages files: copies or hard links, their
// content hashed or their blobs trusted (CheckoutOptions.Trusted).
var checkoutModes = []struct {
	name string
	opts CheckoutOptions
}{
	{"copy", CheckoutOptions{}},
	{"hardlink", CheckoutOptions{Hardlink: true}},
	{"trusted-copy", CheckoutOptions{Trusted: true}},
	{"trusted-hardlink", CheckoutOptions{Hardlink: true, Trusted: true}},
}

func TestStoreTreeCheckoutRoundTrip(t *testing.T) {
	for _, mode := range checkoutModes {
		hardlink := mode.opts.Hardlink
		t.Run(mode.name, func(t *testing.T) {
			c := openTestCache(t)
			src := t.TempDir()
			testtree.Write(t, src, sampleTree, nil)
			root, err := c.StoreTree(src)
			if err != nil {
				t.Fatal(err)
			}
			dest := filepath.Join(t.TempDir(), "out")
			if err := c.Checkout(root, dest, mode.opts); err != nil {
				t.Fatal(err)
			}
			want := testtree.WithDirs(sampleTree)
			if d := testtree.Diff(want, testtree.Read(t, dest)); d != "" {
				t.Errorf("checkout differs:\n%s", d)
			}
			// Non-executable files are linked to the CAS exactly when asked;
			// executables never are.
			for p, spec := range sampleTree {
				kind, content, _ := strings.Cut(spec, ":")
				if kind != "file" && kind != "exec" {
					continue
				}
				fi, err := os.Stat(filepath.Join(dest, p))
				if err != nil {
					t.Fatal(err)
				}
				bi, err := os.Stat(c.BlobPath(DigestOf([]byte(content))))
				if err != nil {
					t.Fatal(err)
				}
				linked := os.SameFile(fi, bi)
				if wantLinked := hardlink && kind == "file"; linked != wantLinked {
					t.Errorf("%s: hard-linked to CAS = %v, want %v", p, linked, wantLinked)
				}
			}
			// The CAS was not made executable by checking out.
			if bi, _ := os.Stat(c.BlobPath(DigestOf([]byte("exec")))); bi != nil && bi.Mode()&0o111 != 0 {
				t.Errorf("CAS blob became executable")
			}
		})
	}
}

func TestStoreTreeDigestStable(t *testing.T) {
	c := openTestCache(t)
	var paths []string
	for p := range sampleTree {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	a, b := t.TempDir(), t.TempDir()
	testtree.Write(t, a, sampleTree, paths)
	slices.Reverse(paths)
	testtree.Write(t, b, sampleTree, paths)
	// Mode bits other than executable and mtimes do not count.
	if err := os.Chmod(filepath.Join(b, "README"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(b, "bin/tool"), 0o700); err != nil {
		t.Fatal(err)
	}
	da, err := c.StoreTree(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := c.StoreTree(b)
	if err != nil {
		t.Fatal(err)
	}
	if da != db {
		t.Errorf("same tree, different digests: %v, %v", da, db)
	}
	// The executable bit does count.
	if err := os.Chmod(filepath.Join(b, "README"), 0o755); err != nil {
		t.Fatal(err)
	}
	if dc, err := c.StoreTree(b); err != nil || dc == da {
		t.Errorf("chmod +x did not change the digest (%v, %v)", dc, err)
	}
}

func TestStoredDirectoriesAreCanonical(t *testing.T) {
	c := openTestCache(t)
	src := t.TempDir()
	testtree.Write(t, src, sampleTree, nil)
	root, err := c.StoreTree(src)
	if err != nil {
		t.Fatal(err)
	}
	err = c.WalkTree(root, func(e TreeEntry) error {
		if e.Type != TypeDir {
			return nil
		}
		data, err := c.ReadBlob(e.Digest)
		if err != nil {
			return err
		}
		dir := &repb.Directory{}
		if err := proto.Unmarshal(data, dir); err != nil {
			return err
		}
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(dir)
		if err != nil {
			return err
		}
		if string(again) != string(data) {
			t.Errorf("%s: directory blob is not canonical", e.Path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := c.EmptyTree()
	if err != nil {
		t.Fatal(err)
	}
	// REAPI's well-known digest of the empty Directory is that of no bytes.
	if empty != DigestOf(nil) {
		t.Errorf("empty tree = %v, want %v", empty, DigestOf(nil))
	}
}

func TestWalkTreeOrder(t *testing.T) {
	c := openTestCache(t)
	src := t.TempDir()
	testtree.Write(t, src, sampleTree, nil)
	root, err := c.StoreTree(src)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = c.WalkTree(root, func(e TreeEntry) error {
		got = append(got, e.Type+" "+e.Path)
		if e.Path == "README" && (e.Size != 6 || e.Executable || e.Digest != DigestOf([]byte("hello\n"))) {
			t.Errorf("README entry = %+v", e)
		}
		if e.Path == "bin/tool" && !e.Executable {
			t.Errorf("bin/tool not executable: %+v", e)
		}
		if e.Path == "usr/lib/libx.so" && e.Target != "libx.so.1" {
			t.Errorf("symlink entry = %+v", e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Names sort by bytes: "README" before "a", "a" before "a-b".
	want := []string{
		"file README", "dir a", "file a/b", "dir a-b", "file a-b/c", "symlink abs-link",
		"dir bin", "file bin/tool", "symlink bin/tool-link", "symlink dangling",
		"dir deep", "dir deep/1", "dir deep/1/2", "dir deep/1/2/3", "dir deep/1/2/3/4",
		"dir deep/1/2/3/4/5", "dir deep/1/2/3/4/5/6", "dir deep/1/2/3/4/5/6/7",
		"file deep/1/2/3/4/5/6/7/leaf", "file empty",
		"dir usr", "dir usr/lib", "symlink usr/lib/libx.so", "file usr/lib/libx.so.1",
		"dir usr/share", "dir usr/share/doc", "dir usr/share/doc/x", "file usr/share/doc/x/NOTES",
		"dir usr/share/empty-dir",
	}
	if !slices.Equal(got, want) {
		t.Errorf("walk order:\n got %q\nwant %q", got, want)
	}

	// SkipDir and SkipAll behave as in filepath.WalkDir.
	var visited []string
	err = c.WalkTree(root, func(e TreeEntry) error {
		visited = append(visited, e.Path)
		switch e.Path {
		case "deep":
			return fs.SkipDir
		case "usr":
			return fs.SkipAll
		}
		return nil
	})
	if err != nil || slices.Contains(visited, "deep/1") || visited[len(visited)-1] != "usr" {
		t.Errorf("skipping: visited %q, err %v", visited, err)
	}
	stop := errors.New("stop")
	if err := c.WalkTree(root, func(TreeEntry) error { return stop }); err != stop {
		t.Errorf("WalkTree error = %v, want fn's error unchanged", err)
	}
}

func TestCheckoutMerge(t *testing.T) {
	c := openTestCache(t)
	srcA, srcB, srcC := t.TempDir(), t.TempDir(), t.TempDir()
	testtree.Write(t, srcA, map[string]string{"usr/bin/a": "exec:a", "usr/lib/shared": "file:same", "link": "symlink:usr"}, nil)
	testtree.Write(t, srcB, map[string]string{"usr/bin/b": "exec:b", "usr/lib/shared": "file:same", "link": "symlink:usr"}, nil)
	testtree.Write(t, srcC, map[string]string{"usr/lib/shared": "file:other"}, nil)
	var roots []Digest
	for _, src := range []string{srcA, srcB, srcC} {
		d, err := c.StoreTree(src)
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, d)
	}
	for _, mode := range checkoutModes {
		opts, name := mode.opts, mode.name
		dest := t.TempDir()
		for _, r := range roots[:2] {
			if err := c.Checkout(r, dest, opts); err != nil {
				t.Fatalf("%s: merging identical content: %v", name, err)
			}
		}
		// Checking out the same tree twice is fine too.
		if err := c.Checkout(roots[0], dest, opts); err != nil {
			t.Fatalf("%s: second checkout: %v", name, err)
		}
		want := map[string]string{
			"usr": "dir", "usr/bin": "dir", "usr/lib": "dir", "link": "symlink:usr",
			"usr/bin/a": "exec:a", "usr/bin/b": "exec:b", "usr/lib/shared": "file:same",
		}
		if d := testtree.Diff(want, testtree.Read(t, dest)); d != "" {
			t.Errorf("%s: merged tree differs:\n%s", name, d)
		}
		err := c.Checkout(roots[2], dest, opts)
		if conflict := filepath.Join(dest, "usr/lib/shared"); err == nil || !strings.Contains(err.Error(), conflict) {
			t.Errorf("%s: conflicting checkout error = %v, want one naming %s", name, err, conflict)
		}
	}
}

func TestCheckoutConflicts(t *testing.T) {
	c := openTestCache(t)
	src := t.TempDir()
	testtree.Write(t, src, map[string]string{"etc/conf": "file:x", "bin": "symlink:usr/bin", "tool": "exec:t"}, nil)
	root, err := c.StoreTree(src)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for name, prepare := range map[string]func(dest string) error{
		// A symlink where the tree has a directory is never followed.
		"symlink over dir": func(dest string) error { return os.Symlink(outside, filepath.Join(dest, "etc")) },
		"file over dir":    func(dest string) error { return os.WriteFile(filepath.Join(dest, "etc"), nil, 0o644) },
		"dir over file":    func(dest string) error { return os.MkdirAll(filepath.Join(dest, "tool"), 0o755) },
		"other symlink":    func(dest string) error { return os.Symlink("elsewhere", filepath.Join(dest, "bin")) },
		"not executable":   func(dest string) error { return os.WriteFile(filepath.Join(dest, "tool"), []byte("t"), 0o644) },
	} {
		t.Run(name, func(t *testing.T) {
			dest := t.TempDir()
			if err := prepare(dest); err != nil {
				t.Fatal(err)
			}
			err := c.Checkout(root, dest, CheckoutOptions{Hardlink: true})
			if err == nil || !strings.Contains(err.Error(), dest) {
				t.Errorf("Checkout error = %v, want a conflict naming a path in %s", err, dest)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Errorf("checkout wrote through a symlink: %v", entries)
			}
		})
	}
}

func TestCheckoutMissingBlob(t *testing.T) {
	c := openTestCache(t)
	src := t.TempDir()
	testtree.Write(t, src, map[string]string{"lost": "file:lost content"}, nil)
	root, err := c.StoreTree(src)
	if err != nil {
		t.Fatal(err)
	}
	blob := c.BlobPath(DigestOf([]byte("lost content")))
	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	for _, mode := range checkoutModes {
		err := c.Checkout(root, t.TempDir(), mode.opts)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "lost") {
			t.Errorf("%s: Checkout with missing blob: %v", mode.name, err)
		}
	}
}

func TestStoreTreeRejectsSpecialFiles(t *testing.T) {
	c := openTestCache(t)
	src := t.TempDir()
	fifo := filepath.Join(src, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	_, err := c.StoreTree(src)
	if err == nil || !strings.Contains(err.Error(), fifo) {
		t.Errorf("StoreTree with a fifo: %v, want error naming %s", err, fifo)
	}
}

func TestStoreTreeCopiesFiles(t *testing.T) {
	c := openTestCache(t)
	src := t.TempDir()
	testtree.Write(t, src, map[string]string{"f": "file:original"}, nil)
	if _, err := c.StoreTree(src); err != nil {
		t.Fatal(err)
	}
	// Changing the source afterwards cannot change the CAS.
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("changed!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadBlob(DigestOf([]byte("original"))); err != nil {
		t.Errorf("CAS changed with its source: %v", err)
	}
}

// A job's Cache reads and checks each Directory blob once (RememberDirectories):
// staging the same tree again reads no Directory blob, while a damaged one is still
// found the first time it is read, and a Cache that does not remember reads every
// time.
func TestRememberDirectories(t *testing.T) {
	c := openTestCache(t)
	src := t.TempDir()
	testtree.Write(t, src, map[string]string{"sub/f": "file:content"}, nil)
	root, err := c.StoreTree(src)
	if err != nil {
		t.Fatal(err)
	}
	rootDir, err := c.ReadDirectory(root)
	if err != nil {
		t.Fatal(err)
	}
	sub := DigestFromProto(rootDir.Directories[0].Digest)

	job := &Cache{Root: c.Root, pid: c.pid}
	job.RememberDirectories()
	if err := job.Checkout(root, t.TempDir(), CheckoutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Gone now: a second staging of the same tree by the same job does not read it.
	if err := os.Remove(c.BlobPath(sub)); err != nil {
		t.Fatal(err)
	}
	if err := job.Checkout(root, t.TempDir(), CheckoutOptions{}); err != nil {
		t.Errorf("the second checkout read a Directory blob the job had read and checked: %v", err)
	}
	if err := c.Checkout(root, t.TempDir(), CheckoutOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a Cache that does not remember found no missing blob: %v", err)
	}

	// Damaged before a job reads it: found, as without remembering.
	if err := os.WriteFile(c.BlobPath(root), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := &Cache{Root: c.Root, pid: c.pid}
	fresh.RememberDirectories()
	var blob *BlobError
	if err := fresh.Checkout(root, t.TempDir(), CheckoutOptions{}); !errors.As(err, &blob) {
		t.Errorf("a damaged Directory blob was not found on its first read: %v", err)
	}
}

// TestCheckoutReplace: with Replace, a file or symlink of the tree replaces another
// file, symlink or an empty directory (Replace told each path, identical ones not);
// a directory over a file and a file over a non-empty directory stay conflicts, and
// nothing outside dest changes.
func TestCheckoutReplace(t *testing.T) {
	c := openTestCache(t)
	store := func(files map[string]string) Digest {
		src := t.TempDir()
		testtree.Write(t, src, files, nil)
		d, err := c.StoreTree(src)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	lower := store(map[string]string{"x": "file:a", "tool": "exec:a", "l": "symlink:a", "same": "file:s", "e": "dir", "out": "symlink:/"})
	upper := store(map[string]string{"x": "exec:b", "tool": "symlink:x", "l": "file:b", "same": "file:s", "e": "symlink:x"})
	for _, mode := range checkoutModes {
		name := mode.name
		dest := t.TempDir()
		if err := c.Checkout(lower, dest, mode.opts); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var replaced []string
		opts := mode.opts
		opts.Replace = func(rel string) error {
			mu.Lock()
			defer mu.Unlock()
			replaced = append(replaced, rel)
			return nil
		}
		if err := c.Checkout(upper, dest, opts); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		slices.Sort(replaced)
		if got := strings.Join(replaced, " "); got != "e l tool x" {
			t.Errorf("%s: replaced %s, want e l tool x", name, got)
		}
		want := map[string]string{"x": "exec:b", "tool": "symlink:x", "l": "file:b", "same": "file:s", "e": "symlink:x", "out": "symlink:/"}
		if d := testtree.Diff(want, testtree.Read(t, dest)); d != "" {
			t.Errorf("%s: replaced tree differs:\n%s", name, d)
		}
		// The blobs of the lower tree are intact: replacing unlinks, never writes.
		check := t.TempDir()
		if err := c.Checkout(lower, check, CheckoutOptions{}); err != nil {
			t.Errorf("%s: the lower tree after replacing: %v", name, err)
		}
	}

	refuse := errors.New("refused")
	outside := t.TempDir()
	for _, tc := range []struct {
		name         string
		lower, upper map[string]string
		replace      func(string) error
		want         string
	}{
		{name: "file over a non-empty directory", lower: map[string]string{"d/f": "file:x"}, upper: map[string]string{"d": "file:y"},
			want: "DEST/d already exists and differs from the tree being checked out (a non-empty directory there, a file in the tree)"},
		{name: "directory over a file", lower: map[string]string{"d": "file:x"}, upper: map[string]string{"d/f": "file:y"},
			want: "DEST/d already exists and differs from the tree being checked out (a file there, a directory in the tree)"},
		{name: "directory over a symlink is not followed", lower: map[string]string{"d": "symlink:" + outside}, upper: map[string]string{"d/f": "file:y"},
			want: "DEST/d already exists and differs from the tree being checked out (a symlink there, a directory in the tree)"},
		{name: "Replace refuses", lower: map[string]string{"f": "file:x"}, upper: map[string]string{"f": "file:y"},
			replace: func(string) error { return refuse }, want: "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			if err := c.Checkout(store(tc.lower), dest, CheckoutOptions{}); err != nil {
				t.Fatal(err)
			}
			replace := tc.replace
			if replace == nil {
				replace = func(string) error { return nil }
			}
			err := c.Checkout(store(tc.upper), dest, CheckoutOptions{Replace: replace})
			want := strings.ReplaceAll(tc.want, "DEST", dest)
			if err == nil || !strings.HasSuffix(err.Error(), want) {
				t.Fatalf("error %v, want one ending %s", err, want)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Errorf("checkout wrote through a symlink: %v", entries)
			}
			var conflict *ConflictError
			if tc.replace == nil && (!errors.As(err, &conflict) || conflict.Rel != "d") {
				t.Errorf("error %#v is not a *ConflictError at d", err)
			}
		})
	}
}
