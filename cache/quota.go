package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gantry-build/gantry/internal/units"
	"golang.org/x/sys/unix"
)

// ParseQuota reads a cache quota: a number of bytes with an optional K, M, G or T
// suffix (powers of 1024, "10G"), or a percentage of the size of the filesystem
// holding dir ("50%"; dir may not exist yet), as BuildStream's cache quota.
func ParseQuota(s, dir string) (int64, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("quota %q: want a size like 500M, 10G or 2T, or a share of the disk like 50%%", s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		p, err := strconv.ParseFloat(pct, 64)
		if err != nil || p <= 0 || p > 100 {
			return 0, bad
		}
		var st unix.Statfs_t
		if err := unix.Statfs(existingDir(dir), &st); err != nil {
			return 0, fmt.Errorf("quota %q: reading the size of the filesystem of %s: %w", s, dir, err)
		}
		return int64(float64(st.Blocks) * float64(st.Bsize) * p / 100), nil
	}
	n, ok := units.ParseSize(s)
	if !ok {
		return 0, bad
	}
	return n, nil
}

// existingDir is dir, or where it does not exist yet its nearest ancestor that does: the
// filesystem a cache not made yet will be made on.
func existingDir(dir string) string {
	for {
		_, err := os.Stat(dir)
		parent := filepath.Dir(dir)
		if !errors.Is(err, fs.ErrNotExist) || parent == dir {
			return dir
		}
		dir = parent
	}
}

// Usage is the space the cache takes on disk: blobs, refs, sources and logs (a file
// hard-linked twice inside the cache counts once).
func (c *Cache) Usage() (int64, error) {
	var total int64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(c.Root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == c.Root {
				return err
			}
			return nil // vanished meanwhile (another gantry's temp file)
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if st.Nlink > 1 {
				if seen[st.Ino] {
					return nil
				}
				seen[st.Ino] = true
			}
			total += st.Blocks * 512
			return nil
		}
		total += info.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measuring the cache %s: %w", c.Root, err)
	}
	return total, nil
}
