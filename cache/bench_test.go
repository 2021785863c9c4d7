package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkStoreTreeCheckout captures and checks out a 1000-file tree (20
// directories of 50 files of 4 KiB), as a build does with an install root
// and a dependency's sysroot. The cache already holds the content (a rebuild
// with the same output), so this measures hashing, tree encoding and
// checkout, not the first write and fsync of each blob.
func BenchmarkStoreTreeCheckout(b *testing.B) {
	src := b.TempDir()
	content := make([]byte, 4096)
	for d := range 20 {
		dir := filepath.Join(src, fmt.Sprintf("dir%02d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 50 {
			copy(content, fmt.Sprintf("file %d/%d", d, f))
			mode := os.FileMode(0o644)
			if f%10 == 0 {
				mode = 0o755
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), content, mode); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, hardlink := range []bool{false, true} {
		b.Run(fmt.Sprintf("hardlink=%v", hardlink), func(b *testing.B) {
			c := openTestCache(b)
			if _, err := c.StoreTree(src); err != nil {
				b.Fatal(err)
			}
			out := b.TempDir()
			i := 0
			for b.Loop() {
				root, err := c.StoreTree(src)
				if err != nil {
					b.Fatal(err)
				}
				dest := filepath.Join(out, fmt.Sprint(i))
				i++
				if err := c.Checkout(root, dest, CheckoutOptions{Hardlink: hardlink}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// writeFiles writes n files of size bytes (distinct contents) under dir.
func writeFiles(b *testing.B, dir string, n, size int) {
	b.Helper()
	content := make([]byte, size)
	for i := range content {
		content[i] = byte(i * 7)
	}
	for i := range n {
		copy(content, fmt.Sprintf("file %d", i))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), content, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// fileSets are the trees the integrity benchmarks use: many small files (a
// typical library's headers and objects) and a few big ones (a toolchain's
// binaries).
var fileSets = []struct {
	name    string
	n, size int
}{{"1000x4KiB", 1000, 4 << 10}, {"4x32MiB", 4, 32 << 20}}

// BenchmarkCheckoutVerify measures what hashing every file costs when
// checking out (staging) a tree: copies (as host sysroots are staged) and hard
// links (as bwrap sysroots are), each with and without verification.
func BenchmarkCheckoutVerify(b *testing.B) {
	for _, set := range fileSets {
		src := b.TempDir()
		writeFiles(b, src, set.n, set.size)
		c := openTestCache(b)
		root, err := c.StoreTree(src)
		if err != nil {
			b.Fatal(err)
		}
		for _, hardlink := range []bool{false, true} {
			for _, verify := range []bool{true, false} {
				opts := CheckoutOptions{Hardlink: hardlink, Trusted: !verify}
				b.Run(fmt.Sprintf("%s/hardlink=%v/verify=%v", set.name, hardlink, verify), func(b *testing.B) {
					b.SetBytes(int64(set.n * set.size))
					out := b.TempDir()
					for b.Loop() {
						dest := filepath.Join(out, "dest")
						if err := c.Checkout(root, dest, opts); err != nil {
							b.Fatal(err)
						}
						b.StopTimer()
						if err := os.RemoveAll(dest); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
				})
			}
		}
	}
}

// BenchmarkPutFilePresent measures storing files the cache already has (a
// rebuild with the same output): "present" now also hashes the blob already
// there before trusting it; "hash-only" is the hashing of the new file alone,
// all that trusting a present blob of the right size cost before; "absent"
// is the first write of the content, which the check saves.
func BenchmarkPutFilePresent(b *testing.B) {
	for _, set := range fileSets {
		src := b.TempDir()
		writeFiles(b, src, set.n, set.size)
		entries, err := os.ReadDir(src)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []string{"present", "hash-only", "absent"} {
			b.Run(set.name+"/"+mode, func(b *testing.B) {
				b.SetBytes(int64(set.n * set.size))
				c := openTestCache(b)
				if _, err := c.StoreTree(src); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if mode == "absent" {
						b.StopTimer()
						if err := removeAll(filepath.Join(c.Root, CASDir)); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					for _, e := range entries {
						p := filepath.Join(src, e.Name())
						if mode == "hash-only" {
							if _, err := hashFile(p); err != nil {
								b.Fatal(err)
							}
						} else if _, err := c.PutFile(p); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
