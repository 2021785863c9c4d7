package cache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/testtree"
)

func TestBlobRoundTrip(t *testing.T) {
	c := openTestCache(t)
	for _, data := range [][]byte{{}, []byte("hello"), bytes.Repeat([]byte("x"), 1<<20)} {
		d, err := c.PutBlob(data)
		if err != nil {
			t.Fatal(err)
		}
		if d != DigestOf(data) {
			t.Errorf("PutBlob digest %v, want %v", d, DigestOf(data))
		}
		if !c.HasBlob(d) {
			t.Errorf("HasBlob(%v) = false after PutBlob", d)
		}
		got, err := c.ReadBlob(d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("ReadBlob returned %d bytes, want %d", len(got), len(data))
		}
		p := c.BlobPath(d)
		if want := filepath.Join(c.Root, "cas", d.Hash[:2], d.Hash); p != want {
			t.Errorf("BlobPath = %s, want %s", p, want)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o444 {
			t.Errorf("blob mode = %v, %v; want read-only", fi.Mode(), err)
		}
	}
}

func TestIdenticalContentStoredOnce(t *testing.T) {
	c := openTestCache(t)
	d1, err := c.PutBlob([]byte("same"))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := c.PutBlob([]byte("same"))
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, []byte("same"), 0o644); err != nil {
		t.Fatal(err)
	}
	d3, err := c.PutFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || d1 != d3 {
		t.Errorf("digests differ: %v %v %v", d1, d2, d3)
	}
	if n := countBlobs(t, c); n != 1 {
		t.Errorf("%d blobs in cas, want 1", n)
	}
	if stray, _ := c.StrayTemp(); len(stray) != 0 {
		t.Errorf("temporary files left: %v", stray)
	}
	if entries, _ := os.ReadDir(filepath.Join(c.Root, "tmp")); len(entries) != 0 {
		t.Errorf("tmp/ not empty: %v", entries)
	}
}

func TestPutFileStreamsLargeFile(t *testing.T) {
	c := openTestCache(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<20) // 48 MiB, above the hash-on-read limit
	f := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := c.PutFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if d != DigestOf(data) {
		t.Fatalf("PutFile = %v, want %v", d, DigestOf(data))
	}
	if err := c.checkBlob(d); err != nil {
		t.Fatal(err)
	}
}

func TestPutFileErrorsNamePath(t *testing.T) {
	c := openTestCache(t)
	dir := t.TempDir()
	for _, p := range []string{filepath.Join(dir, "missing"), dir} {
		_, err := c.PutFile(p)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("PutFile(%s) error = %v, want one naming the path", p, err)
		}
	}
}

func TestReadBlobDetectsCorruption(t *testing.T) {
	c := openTestCache(t)
	d, err := c.PutBlob([]byte("precious"))
	if err != nil {
		t.Fatal(err)
	}
	testtree.CorruptFile(t, c.BlobPath(d))
	if _, err := c.ReadBlob(d); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadBlob of flipped blob: %v, want ErrCorrupt", err)
	}
	missing := DigestOf([]byte("never stored"))
	if _, err := c.ReadBlob(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadBlob of missing blob: %v, want fs.ErrNotExist", err)
	}
	if c.HasBlob(missing) {
		t.Errorf("HasBlob of missing blob = true")
	}
	// Storing it again repairs a blob of the wrong size.
	if err := os.WriteFile(c.BlobPath(d), []byte("short"), 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutBlob([]byte("precious")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadBlob(d); err != nil {
		t.Errorf("after re-put: %v", err)
	}
}

func TestInvalidDigestIsNotAPath(t *testing.T) {
	c := openTestCache(t)
	bad := Digest{Hash: "../../../etc/passwd", Size: 1}
	if p := c.BlobPath(bad); p != "" {
		t.Errorf("BlobPath(%v) = %q, want empty", bad, p)
	}
	if c.HasBlob(bad) {
		t.Errorf("HasBlob(invalid) = true")
	}
	if _, err := c.ReadBlob(bad); err == nil {
		t.Errorf("ReadBlob(invalid) succeeded")
	}
}
