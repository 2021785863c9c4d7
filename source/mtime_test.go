package source

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testtree"
)

// SetStagedTimes gives every entry below the directory, and the directory, StagedTime
// (modification, and access for what is not read since), links their own; it follows
// no link out of the tree.
func TestSetStagedTimes(t *testing.T) {
	outside := t.TempDir()
	outFile := filepath.Join(outside, "target.txt")
	if err := os.WriteFile(outFile, []byte("outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := os.Chtimes(outFile, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(outside, old, old); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "build")
	testtree.Write(t, root, map[string]string{"configure.ac": "file:AC_INIT\n", "aclocal.m4": "file:dnl\n",
		"src/main.c": "file:int main;\n", "src/deep/er/x.c": "file:int x;\n", "empty/.keep": "file:"}, nil)
	if err := os.Chmod(filepath.Join(root, "aclocal.m4"), 0o444); err != nil { // read-only files too
		t.Fatal(err)
	}
	for link, target := range map[string]string{"out-file": outFile, "out-dir": outside, "dangling": "nowhere", "src/rel": "main.c"} {
		if err := os.Symlink(target, filepath.Join(root, filepath.FromSlash(link))); err != nil {
			t.Fatal(err)
		}
	}

	if err := SetStagedTimes(root); err != nil {
		t.Fatal(err)
	}
	times := testtree.Times(t, root)
	for rel, mtime := range times {
		info, err := os.Lstat(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		// A directory's access time moved when Times read it (relatime).
		st := info.Sys().(*syscall.Stat_t)
		atime := time.Unix(st.Atim.Sec, st.Atim.Nsec)
		if !mtime.Equal(StagedTime) || (!info.IsDir() && !atime.Equal(StagedTime)) {
			t.Errorf("%s: mtime %v, atime %v; want %v", rel, mtime.UTC(), atime.UTC(), StagedTime)
		}
	}
	if len(times) != 14 { // the top, 5 directories, 5 files, 4 links
		t.Errorf("walked %d entries, want 14", len(times))
	}
	for _, p := range []string{outFile, outside} {
		if info, err := os.Stat(p); err != nil || !info.ModTime().Equal(old) {
			t.Errorf("%s, outside the tree, reached through a link: mtime %v (%v), want %v untouched", p, info.ModTime(), err, old)
		}
	}
	if !StagedTime.Equal(time.Date(2011, 11, 11, 11, 11, 11, 0, time.UTC)) {
		t.Errorf("StagedTime = %v, want BuildStream's 2011-11-11 11:11:11 UTC", StagedTime)
	}
}

// A missing directory, or a link in its place, is an error naming it.
func TestSetStagedTimesErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	err := SetStagedTimes(missing)
	if err == nil || err.Error() != "setting the staged files' times: opening "+missing+": no such file or directory" {
		t.Errorf("missing directory: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if err := SetStagedTimes(link); err == nil || !strings.HasPrefix(err.Error(), "setting the staged files' times: opening "+link+": ") {
		t.Errorf("a link in place of the directory: %v, want a refusal to open it", err)
	}
}
