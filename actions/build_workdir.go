package actions

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
)

// Work directories kept between jobs. A build job works in a directory under the
// cache's tmp/ with sysroot/, build/, install/ and home/ (the commands' HOME on the
// host) in it. Made afresh and removed for every job, those directories were as many
// inodes allocated and freed per job, and on ext4 the inode allocator skips, one by
// one, every inode freed in the last minutes (recently_deleted): at 2,000 no-op
// builds that scan was a fifth of gantry's CPU time, and it grows with the number of
// jobs. So a job worker keeps its last build's work directory, emptied, and the next
// build it runs renames it to its own work directory's name: no inode is allocated or
// freed for it. What is kept is checked when it is taken, after every process of the
// job that left it is dead: only directories named as build makes them, mode 0755
// and empty, are used again; anything else is removed and the job starts from fresh
// directories, as before.

// workDirSubdirs are what build makes in a work directory.
var workDirSubdirs = []string{"sysroot", "build", "install", "home"}

// spareWorkDir is the work directory this process's last build job left emptied,
// or "". One job runs at a time in a worker; the mutex is for in-process tests.
var spareWorkDir struct {
	mu   sync.Mutex
	path string
}

// takeWorkDir makes dir a work directory, from the spare one when there is one
// that is clean and on the same cache, else as a fresh directory.
func takeWorkDir(dir string) error {
	spareWorkDir.mu.Lock()
	spare := spareWorkDir.path
	spareWorkDir.path = ""
	spareWorkDir.mu.Unlock()
	if spare != "" {
		if filepath.Dir(spare) == filepath.Dir(dir) && cleanWorkDir(spare) && syscall.Rename(spare, dir) == nil {
			// Over an empty directory made for the job, if there is one (which
			// os.Rename refuses to do).
			return nil
		}
		os.RemoveAll(spare)
	}
	// Fresh: a name no one uses, or an empty directory made for this job.
	if err := os.Mkdir(dir, 0o700); err != nil && !(errors.Is(err, fs.ErrExist) && emptyDir(dir)) {
		return fmt.Errorf("preparing the build directory %s: %w", dir, err)
	}
	return nil
}

// releaseWorkDir empties dir, the work directory of a job that has ended, and keeps
// it as the spare; a directory that cannot be emptied is removed.
func releaseWorkDir(dir string) {
	if emptyWorkDir(dir) != nil {
		os.RemoveAll(dir)
		return
	}
	spareWorkDir.mu.Lock()
	old := spareWorkDir.path
	spareWorkDir.path = dir
	spareWorkDir.mu.Unlock()
	if old != "" {
		os.RemoveAll(old)
	}
}

// DropSpareWorkDir removes the spare work directory: a worker calls it as it exits.
func DropSpareWorkDir() {
	spareWorkDir.mu.Lock()
	defer spareWorkDir.mu.Unlock()
	if spareWorkDir.path != "" {
		os.RemoveAll(spareWorkDir.path)
		spareWorkDir.path = ""
	}
}

// emptyWorkDir removes everything in dir but its empty subdirectories named in
// workDirSubdirs, and everything in those.
func emptyWorkDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !slices.Contains(workDirSubdirs, e.Name()) || !e.IsDir() {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			continue
		}
		inner, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		for _, x := range inner {
			if err := os.RemoveAll(filepath.Join(p, x.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// cleanWorkDir reports whether dir holds nothing but empty directories named in
// workDirSubdirs, with the mode build gives them: what a job left is only used again
// if nothing of it can reach the next job.
func cleanWorkDir(dir string) bool {
	if info, err := os.Lstat(dir); err != nil || info.Mode() != fs.ModeDir|0o700 {
		return false
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !slices.Contains(workDirSubdirs, e.Name()) {
			return false
		}
		p := filepath.Join(dir, e.Name())
		info, err := os.Lstat(p)
		if err != nil || info.Mode() != fs.ModeDir|0o755 || !emptyDir(p) {
			return false
		}
	}
	return true
}

// emptyDir reports whether the directory p has no entries.
func emptyDir(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return errors.Is(err, io.EOF)
}
