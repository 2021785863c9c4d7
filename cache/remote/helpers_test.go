package remote

import (
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/cache"
)

// openTestCache opens a new local cache for a test.
func openTestCache(t testing.TB) *cache.Cache {
	t.Helper()
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
