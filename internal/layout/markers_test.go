package layout

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoMergeConflictMarkers fails on a line a merge left unresolved in the repository's
// text files (Go files would not build; docs, scripts and testscripts would be shipped
// as they are).
func TestNoMergeConflictMarkers(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md", ".go", ".txtar", ".toml", ".sh", ".txt", ".proto", "":
		default:
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			if l := sc.Text(); strings.HasPrefix(l, "<<<<<<< ") || strings.HasPrefix(l, ">>>>>>> ") {
				t.Errorf("%s:%d: a merge conflict marker: %s", path, n, l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
