package element

import (
	"os"
	"path/filepath"
	"testing"
)

// writeProject creates a project from a map of relative path -> content.
func writeProject(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func loadGraph(t *testing.T, dir string, targets ...string) (*Graph, error) {
	t.Helper()
	p, err := loadProject(dir)
	if err != nil {
		return nil, err
	}
	lock, err := LoadLock(dir)
	if err != nil {
		return nil, err
	}
	return load(p, lock, targets)
}

func mustGraph(t *testing.T, dir string, targets ...string) *Graph {
	t.Helper()
	g, err := loadGraph(t, dir, targets...)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return g
}
