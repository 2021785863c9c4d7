package cache

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseQuota(t *testing.T) {
	dir := t.TempDir()
	for in, want := range map[string]int64{"1024": 1024, "10K": 10 << 10, "500M": 500 << 20, "10G": 10 << 30,
		"2t": 2 << 40, "1.5G": 3 << 29} {
		if got, err := ParseQuota(in, dir); err != nil || got != want {
			t.Errorf("ParseQuota(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	half, err := ParseQuota("50%", dir)
	whole, err2 := ParseQuota("100%", dir)
	if err != nil || err2 != nil || half <= 0 || whole/2-half > 1 || half-whole/2 > 1 {
		t.Errorf("50%% = %d (%v), 100%% = %d (%v)", half, err, whole, err2)
	}
	// A cache not made yet: the filesystem it will be made on.
	if got, err := ParseQuota("50%", filepath.Join(dir, "not", "yet")); err != nil || got != half {
		t.Errorf("50%% of a directory not made yet = %d (%v), want %d", got, err, half)
	}
	for _, in := range []string{"", "G", "10X", "-1G", "0", "150%", "abc%"} {
		if _, err := ParseQuota(in, dir); err == nil || !strings.Contains(err.Error(), "quota") {
			t.Errorf("ParseQuota(%q): err %v, want a quota error", in, err)
		}
	}
}

// Usage grows by what is stored, and a blob checked out by hard link counts once.
func TestUsageCountsStoredBytes(t *testing.T) {
	c := openTestCache(t)
	before, err := c.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutBlob(bytes.Repeat([]byte("x"), 1<<20)); err != nil {
		t.Fatal(err)
	}
	after, err := c.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if grew := after - before; grew < 1<<20 || grew > 1<<20+64<<10 {
		t.Errorf("usage grew by %d bytes for a 1 MiB blob", grew)
	}
}
