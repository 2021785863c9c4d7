package source

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// StagedTime is the one modification (and access) time of every staged source file,
// BuildStream's (utils._set_deterministic_mtime): 2011-11-11 11:11:11 UTC. Copied files
// got the time of the copy, in copy order, so make saw configure.ac newer than
// aclocal.m4 and ran aclocal again; with one time for all, no file is newer than
// another, and a build does not depend on when or in which order it was staged.
var StagedTime = time.Unix(1321009871, 0).UTC()

// SetStagedTimes gives dir and everything below it StagedTime: files, directories
// (after what they hold, whose changes would move their times) and symbolic links
// (their own times, never their targets'). It follows no link: a link a source staged
// cannot lead it out of dir. A directory it cannot open or read is an error.
func SetStagedTimes(dir string) error {
	ts := []unix.Timespec{unix.NsecToTimespec(StagedTime.UnixNano()), unix.NsecToTimespec(StagedTime.UnixNano())}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("setting the staged files' times: opening %s: %w", dir, err)
	}
	if err := stampDir(os.NewFile(uintptr(fd), dir), ts); err != nil {
		return fmt.Errorf("setting the staged files' times in %s: %w", dir, err)
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dir, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting the staged files' times: %s: %w", dir, err)
	}
	return nil
}

// stampDir sets the times of everything in the directory d (closed on return): each
// entry by its name relative to d, a directory once what it holds is done. A call per
// entry and a read per directory, no path resolved from the top: cheap beside the copy
// that staged the file.
func stampDir(d *os.File, ts []unix.Timespec) error {
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	fd := int(d.Fd())
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("opening %s: %w", d.Name()+"/"+name, err)
			}
			if err := stampDir(os.NewFile(uintptr(sub), d.Name()+"/"+name), ts); err != nil {
				return err
			}
		}
		if err := unix.UtimesNanoAt(fd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %w", d.Name()+"/"+name, err)
		}
	}
	return nil
}
