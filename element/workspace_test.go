package element

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// SyncWorkspace writes only what changed: an untouched file keeps its time, an edited
// one is copied, a removed one removed, a file that became a directory replaced, and
// what the build produced stays.
func TestSyncWorkspace(t *testing.T) {
	dir, build := t.TempDir(), filepath.Join(t.TempDir(), "build")
	manifest := filepath.Join(t.TempDir(), "synced.json")
	write := func(root, name, content string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(build, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	write(dir, "same.c", "same")
	write(dir, "edit.c", "old")
	write(dir, "gone.c", "gone")
	write(dir, "becomes", "a file")
	if err := SyncWorkspace(dir, build, manifest); err != nil {
		t.Fatal(err)
	}
	write(build, "same.o", "object") // the build's output
	past := time.Now().Add(-time.Hour)
	for _, name := range []string{"same.c", "edit.c"} {
		if err := os.Chtimes(filepath.Join(build, name), past, past); err != nil {
			t.Fatal(err)
		}
	}
	write(dir, "edit.c", "new")
	if err := os.Remove(filepath.Join(dir, "gone.c")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "becomes")); err != nil {
		t.Fatal(err)
	}
	write(dir, "becomes/inside.c", "in a directory")
	if err := SyncWorkspace(dir, build, manifest); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(filepath.Join(build, "same.c")); err != nil || !info.ModTime().Equal(past) {
		t.Errorf("the untouched file was written again (mtime %v, want %v)", info.ModTime(), past)
	}
	if info, err := os.Stat(filepath.Join(build, "edit.c")); err != nil || info.ModTime().Equal(past) {
		t.Error("the edited file kept its old time: make would not rebuild it")
	}
	if got := read("edit.c"); got != "new" {
		t.Errorf("edit.c = %q, want the edit", got)
	}
	if _, err := os.Lstat(filepath.Join(build, "gone.c")); !os.IsNotExist(err) {
		t.Errorf("gone.c is still in the build directory (%v)", err)
	}
	if got := read("becomes/inside.c"); got != "in a directory" {
		t.Errorf("becomes/inside.c = %q", got)
	}
	if got := read("same.o"); got != "object" {
		t.Errorf("the build's output was lost: %q", got)
	}
}

// Copies into the kept build directory keep the workspace file's time, so make
// compares an edit with what the builds made; a changed file put back with an older
// time gets the time of the sync instead, so make still sees it; without a manifest, a
// copy with the same time stays as it is.
func TestSyncWorkspaceKeepsTimes(t *testing.T) {
	dir, build := t.TempDir(), filepath.Join(t.TempDir(), "build")
	manifest := filepath.Join(t.TempDir(), "synced.json")
	staged := time.Date(2011, 11, 11, 11, 11, 11, 0, time.UTC)
	write := func(name, content string, when time.Time) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	mtime := func(name string) time.Time {
		t.Helper()
		info, err := os.Stat(filepath.Join(build, name))
		if err != nil {
			t.Fatal(err)
		}
		return info.ModTime()
	}
	sync := func() {
		t.Helper()
		if err := SyncWorkspace(dir, build, manifest); err != nil {
			t.Fatal(err)
		}
	}
	write("a.c", "v1", staged)
	write("sub/b.c", "b", staged)
	sync()
	for _, name := range []string{"a.c", "sub/b.c"} {
		if got := mtime(name); !got.Equal(staged) {
			t.Errorf("first sync: %s has %v, want the workspace's %v", name, got, staged)
		}
	}
	edited := time.Now().Add(-time.Minute).Round(time.Millisecond)
	write("a.c", "v2", edited)
	sync()
	if got := mtime("a.c"); !got.Equal(edited) {
		t.Errorf("an edit copied with %v, want the workspace's %v", got, edited)
	}
	// The old version put back with its old time (cp -p).
	before := time.Now()
	write("a.c", "v1", staged)
	sync()
	if got := mtime("a.c"); got.Before(before) {
		t.Errorf("a file put back with an older time got %v: make would keep what v2 built (want the sync's time, after %v)", got, before)
	}
	// A lost manifest copies everything again; a copy with the very same time stays.
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	sync()
	if got := mtime("sub/b.c"); !got.Equal(staged) {
		t.Errorf("without a manifest the untouched sub/b.c got %v, want %v", got, staged)
	}
}
