package actions

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// newWorkDir makes a work directory under tmp as a build job leaves it: the
// session's fresh directory with build's three subdirectories.
func newWorkDir(t *testing.T, tmp, name string) string {
	t.Helper()
	dir := filepath.Join(tmp, name)
	if err := takeWorkDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, s := range workDirSubdirs {
		if err := os.MkdirAll(filepath.Join(dir, s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	info, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

// A worker's next build job works in the directories the last one left, emptied:
// no directory is made or removed for it (the inodes are the same).
func TestWorkDirKeptForTheNextJob(t *testing.T) {
	t.Cleanup(DropSpareWorkDir)
	tmp := t.TempDir()
	first := newWorkDir(t, tmp, "1-build-a")
	if err := os.WriteFile(filepath.Join(first, "install", "out"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(first, "build", "obj", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	sysroot := inode(t, filepath.Join(first, "sysroot"))
	releaseWorkDir(first)

	second := filepath.Join(tmp, "1-build-b")
	if err := os.Mkdir(second, 0o700); err != nil { // as the session makes it
		t.Fatal(err)
	}
	if err := takeWorkDir(second); err != nil {
		t.Fatal(err)
	}
	if got := inode(t, filepath.Join(second, "sysroot")); got != sysroot {
		t.Errorf("the second job's sysroot is a new directory (inode %d, the first job's was %d)", got, sysroot)
	}
	for _, s := range workDirSubdirs {
		if !emptyDir(filepath.Join(second, s)) {
			t.Errorf("%s is not empty: what the first job left reached the second", s)
		}
	}
	if _, err := os.Lstat(first); !os.IsNotExist(err) {
		t.Errorf("the first job's work directory is still there: %v", err)
	}
	releaseWorkDir(second)
	DropSpareWorkDir()
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("tmp/ holds %d entries after the worker dropped its spare, want none", len(entries))
	}
}

// What a job's leftover process writes after the job released its work directory,
// or a mode a command changed, never reaches the next job: the spare is removed and
// the next job gets fresh directories.
func TestWorkDirNotKeptWhenTouchedAfterTheJob(t *testing.T) {
	for name, touch := range map[string]func(dir string) error{
		"file written": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "sysroot", "late"), []byte("x"), 0o644)
		},
		"mode changed": func(dir string) error { return os.Chmod(filepath.Join(dir, "install"), 0o777) },
		"entry added":  func(dir string) error { return os.Mkdir(filepath.Join(dir, "other"), 0o755) },
		"symlink":      func(dir string) error { return os.Symlink("/", filepath.Join(dir, "other")) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Cleanup(DropSpareWorkDir)
			tmp := t.TempDir()
			first := newWorkDir(t, tmp, "1-build-a")
			releaseWorkDir(first)
			if err := touch(first); err != nil {
				t.Fatal(err)
			}
			second := filepath.Join(tmp, "1-build-b")
			if err := takeWorkDir(second); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(first); !os.IsNotExist(err) {
				t.Errorf("the touched spare is still there: %v", err)
			}
			entries, err := os.ReadDir(second)
			if err != nil || len(entries) != 0 {
				t.Fatalf("the second job's work directory holds %v (%v), want a fresh empty directory", entries, err)
			}
		})
	}
}

// The session names a build's work directory and makes nothing; the job makes it,
// and never works in a directory that holds something already.
func TestWorkDirMadeByTheJob(t *testing.T) {
	t.Cleanup(DropSpareWorkDir)
	DropSpareWorkDir()
	tmp := t.TempDir()
	named := filepath.Join(tmp, "1-build-a")
	if err := takeWorkDir(named); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Lstat(named); err != nil || !info.IsDir() {
		t.Fatalf("the job did not make its work directory: %v", err)
	}
	used := filepath.Join(tmp, "1-build-b")
	if err := os.MkdirAll(filepath.Join(used, "install"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := takeWorkDir(used); err == nil || !strings.Contains(err.Error(), used) {
		t.Errorf("a work directory that holds something was taken (error %v, want one naming it)", err)
	}
}
