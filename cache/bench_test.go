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
