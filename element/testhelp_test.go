package element

import (
	"os"
	"path/filepath"
	"testing"
	"time"
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

// loadKeys loads app.toml of the project at dir, with a parse cache kept in cacheDir
// (which remembers files however recently changed) when cached, saves it, and returns
// every element's key by name, and the cache (nil when not cached).
func loadKeys(t *testing.T, dir, cacheDir string, cached bool) (map[string]string, *ParseCache) {
	t.Helper()
	g, pc := loadSaved(t, dir, cacheDir, "app.toml", cached, func(*Project) {})
	keys := map[string]string{}
	for name, e := range g.Elements {
		keys[name] = e.Key
	}
	return keys, pc
}

// loadSaved loads target of the project at dir, set as set says, with a parse cache
// kept in cacheDir (which remembers files however recently changed) when cached, and
// saves the cache (nil when not cached).
func loadSaved(t *testing.T, dir, cacheDir, target string, cached bool, set func(*Project)) (*Graph, *ParseCache) {
	t.Helper()
	p, err := loadProject(dir)
	if err != nil {
		t.Fatal(err)
	}
	set(p)
	var pc *ParseCache
	if cached {
		pc = OpenParseCache(cacheDir, dir)
		pc.racy = -time.Hour
	}
	g, err := LoadCached(p, &Lock{Entries: map[string][]string{}}, []string{target}, pc)
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Save(); err != nil {
		t.Fatal(err)
	}
	return g, pc
}
