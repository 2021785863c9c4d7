package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestPruneQuarantine: quarantine/ keeps the newest blobs within its bounds on
// count and bytes, and always the newest, however large.
func TestPruneQuarantine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sizes    []int // oldest first
		keep     int
		maxBytes int64
		want     []int // indices kept
	}{
		{"count", []int{1, 1, 1, 1, 1}, 3, 100, []int{2, 3, 4}},
		{"bytes", []int{10, 10, 10, 10}, 10, 25, []int{2, 3}},
		{"the newest, however large", []int{1, 1, 50}, 10, 25, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			name := func(i int) string { return fmt.Sprintf("%020d-blob%d", 1000+i, i) }
			for i, n := range tc.sizes {
				if err := os.WriteFile(filepath.Join(dir, name(i)), make([]byte, n), 0o444); err != nil {
					t.Fatal(err)
				}
			}
			pruneQuarantine(dir, tc.keep, tc.maxBytes)
			var want, got []string
			for _, i := range tc.want {
				want = append(want, name(i))
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, want) {
				t.Errorf("kept %v, want %v", got, want)
			}
		})
	}
}
