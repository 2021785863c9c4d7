package cache

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// stageProject is a JunctionStaging that writes a project.toml, counting its calls.
func stageProject(fetched, staged *int) JunctionStaging {
	return JunctionStaging{
		Fetch: func() error { *fetched++; return nil },
		Stage: func(dir string) error {
			*staged++
			return os.WriteFile(filepath.Join(dir, "project.toml"), []byte("name = \"base\"\n"), 0o644)
		},
	}
}

// backdate sets path's modification time age ago.
func backdate(t *testing.T, path string, age time.Duration) {
	t.Helper()
	old := time.Now().Add(-age)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

// `cache gc` removes the staged junctions no load used for junctionMaxAge and the
// temporary directories of stagings that crashed; one a load used is kept, however
// long ago it was staged.
func TestGCRemovesUnusedStagedJunctions(t *testing.T) {
	c := openTestCache(t)
	var fetched, staged int
	old, err := StagedJunction(c.SourcesDir(), "0ld", stageProject(&fetched, &staged))
	if err != nil {
		t.Fatal(err)
	}
	current, err := StagedJunction(c.SourcesDir(), "current", stageProject(&fetched, &staged))
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(c.SourcesDir(), junctionsDir, junctionStaging+"123")
	if err := os.Mkdir(crashed, 0o755); err != nil {
		t.Fatal(err)
	}
	backdate(t, crashed, 2*staleTempAge)
	for _, d := range []string{old, current} {
		backdate(t, d, junctionMaxAge+time.Hour)
	}
	// A load of the current version: marked used, neither fetched nor staged again.
	if _, err := StagedJunction(c.SourcesDir(), "current", stageProject(&fetched, &staged)); err != nil {
		t.Fatal(err)
	}
	if fetched != 2 || staged != 2 {
		t.Fatalf("fetched %d, staged %d times, want 2 and 2", fetched, staged)
	}
	rep, err := c.Cleanup(CleanupOptions{Leftovers: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{crashed, old}; !slices.Equal(rep.Leftovers, want) {
		t.Errorf("leftovers %v, want %v", rep.Leftovers, want)
	}
	if rep.Freed == 0 {
		t.Errorf("freed nothing removing %v", rep.Leftovers)
	}
	if _, err := os.Stat(filepath.Join(current, "project.toml")); err != nil {
		t.Errorf("the junction in use was removed: %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the unused junction is still there: %v", err)
	}
}

// A load that finds its staged junction due for a mark while a cleanup holds the cache
// waits for it, and stages the project again when the cleanup removed it: a load is
// never left with a directory that goes away.
func TestStagedJunctionLoadDuringGC(t *testing.T) {
	c := openTestCache(t)
	var fetched, staged int
	dir, err := StagedJunction(c.SourcesDir(), "v1", stageProject(&fetched, &staged))
	if err != nil {
		t.Fatal(err)
	}
	backdate(t, dir, junctionMaxAge+time.Hour)
	gc, err := c.Lock(context.Background(), Exclusive, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan string, 1)
	type result struct {
		dir string
		err error
	}
	loaded := make(chan result, 1)
	o := stageProject(&fetched, &staged) // counted by the load's goroutine until it ends
	o.Waiting = func(msg string) { waiting <- msg }
	go func() {
		d, err := StagedJunction(c.SourcesDir(), "v1", o)
		loaded <- result{d, err}
	}()
	select {
	case <-waiting:
	case r := <-loaded:
		t.Fatalf("the load did not wait for the cleanup: %v, %v", r.dir, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the load did not wait for the cache lock")
	}
	rep, err := c.Cleanup(CleanupOptions{Leftovers: true})
	gc.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Leftovers, []string{dir}) {
		t.Fatalf("leftovers %v, want %v", rep.Leftovers, []string{dir})
	}
	var r result
	select {
	case r = <-loaded:
	case <-time.After(10 * time.Second):
		t.Fatal("the load did not end after the cleanup")
	}
	if r.err != nil || r.dir != dir {
		t.Fatalf("load = %v, %v; want %v", r.dir, r.err, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "project.toml")); err != nil {
		t.Fatalf("the load's project is not there: %v", err)
	}
	if fetched != 2 || staged != 2 {
		t.Errorf("fetched %d, staged %d times, want 2 and 2 (again after the cleanup)", fetched, staged)
	}
	// Marked by its staging: a cleanup now keeps it.
	rep, err = c.Cleanup(CleanupOptions{Leftovers: true})
	if err != nil || len(rep.Leftovers) != 0 {
		t.Errorf("a second cleanup removed %v, %v", rep.Leftovers, err)
	}
}

// A staging that gives the directory an old time (a tarball's "./" entry) still leaves
// it marked used now.
func TestStagedJunctionMarkedAfterStaging(t *testing.T) {
	c := openTestCache(t)
	var fetched, staged int
	o := stageProject(&fetched, &staged)
	stage := o.Stage
	o.Stage = func(dir string) error {
		if err := stage(dir); err != nil {
			return err
		}
		backdate(t, dir, 10*junctionMaxAge)
		return nil
	}
	if _, err := StagedJunction(c.SourcesDir(), "tarball", o); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Cleanup(CleanupOptions{Leftovers: true})
	if err != nil || len(rep.Leftovers) != 0 {
		t.Errorf("a cleanup removed %v, %v", rep.Leftovers, err)
	}
}
