package cache

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// `cache gc` removes the parse caches and outcome memos of checkouts and projects no
// session used for loadsMaxAge, and temporary files a crashed save left; a file a
// session read (ReadLoadsFile) is marked used and kept, however old its contents.
func TestGCRemovesUnusedLoadsFiles(t *testing.T) {
	c := openTestCache(t)
	dir := LoadsDir(c.Root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-loadsMaxAge - time.Hour)
	files := map[string]time.Time{
		"0123456789abcdef0123456789abcdef": old,                             // a checkout gone
		outcomeMemoPrefix + "gone":         old,                             // a project gone
		outcomeMemoPrefix + "live":         old,                             // read below
		"fedcba9876543210fedcba9876543210": time.Now().Add(-24 * time.Hour), // in use
		".tmp-123":                         time.Now().Add(-2 * staleTempAge),
		".tmp-456":                         time.Now(), // a save under way
	}
	for name, mtime := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	if data, err := ReadLoadsFile(filepath.Join(dir, outcomeMemoPrefix+"live")); err != nil || string(data) != outcomeMemoPrefix+"live" {
		t.Fatalf("ReadLoadsFile = %q, %v", data, err)
	}
	rep, err := c.Cleanup(CleanupOptions{Leftovers: true})
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, p := range rep.Leftovers {
		removed = append(removed, filepath.Base(p))
	}
	slices.Sort(removed)
	want := []string{".tmp-123", "0123456789abcdef0123456789abcdef", outcomeMemoPrefix + "gone"}
	if !slices.Equal(removed, want) {
		t.Errorf("leftovers %v, want %v", removed, want)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{".tmp-456", "fedcba9876543210fedcba9876543210", outcomeMemoPrefix + "live"}; !slices.Equal(left, want) {
		t.Errorf("loads/ holds %v after gc, want %v", left, want)
	}
}
