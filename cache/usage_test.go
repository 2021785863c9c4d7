package cache

import (
	"os"
	"path/filepath"
	"testing"
)

// A cache not made yet is reported empty, and reading it does not make it: `cache
// usage` and `artifact list` are read-only queries. It is Made once Prepare made it.
func TestReportOfACacheNotMadeYet(t *testing.T) {
	root := filepath.Join(t.TempDir(), "cache")
	c, err := At(root)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Report(10)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total != 0 || rep.Blobs != 0 || rep.Artifacts != 0 || len(rep.Projects) != 0 || len(rep.Largest) != 0 {
		t.Errorf("report of a cache not made yet: %+v, want an empty one", rep)
	}
	if list, err := c.Usages(""); err != nil || len(list) != 0 {
		t.Errorf("Usages = %v, %v; want none", list, err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("reading the cache made %s (stat: %v)", root, err)
	}
	if c.Made() {
		t.Errorf("Made before Prepare")
	}
	if err := c.Prepare(); err != nil || !c.Made() {
		t.Errorf("Prepare: %v; Made %v, want true", err, c.Made())
	}
}
