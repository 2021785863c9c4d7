package actions

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
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
	names, _, err := dirNames(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		p := filepath.Join(dir, name)
		var inner []string
		if slices.Contains(workDirSubdirs, name) {
			inner, _, err = dirNames(p) // fails on anything but a directory: removed
		}
		if !slices.Contains(workDirSubdirs, name) || err != nil {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			continue
		}
		for _, x := range inner {
			if err := os.RemoveAll(filepath.Join(p, x)); err != nil {
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
	names, mode, err := dirNames(dir)
	if err != nil || mode != unix.S_IFDIR|0o700 {
		return false
	}
	for _, name := range names {
		if !slices.Contains(workDirSubdirs, name) {
			return false
		}
		inner, mode, err := dirNames(filepath.Join(dir, name))
		if err != nil || mode != unix.S_IFDIR|0o755 || len(inner) > 0 {
			return false
		}
	}
	return true
}

// emptyDir reports whether the directory p has no entries.
func emptyDir(p string) bool {
	names, _, err := dirNames(p)
	return err == nil && len(names) == 0
}

// dirNames returns the names in the directory p (not following a symlink at p) and
// its mode (type and permission bits, as stat(2) gives them). It reads with plain
// system calls: os.ReadDir and os.Open register each directory with the poller, four
// more calls for each of the ten directories a build job's work directory is checked
// and emptied through.
func dirNames(p string) (names []string, mode uint32, err error) {
	fd, err := openRetry(p, unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, 0, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	var buf [4096]byte
	for {
		n, err := unix.Getdents(fd, buf[:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, 0, &os.PathError{Op: "getdents", Path: p, Err: err}
		case n == 0:
			return names, st.Mode, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}
