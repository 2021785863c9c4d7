package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The CACHE token across processes (DESIGN.md §3, §5) is a pair of flock(2)
// locks in the cache directory. The kernel drops a process's locks when it
// dies, so kill -9 never leaves a stale lock.
//
//   - lockFile is the token itself: held shared by every process or job that
//     stages from or commits to the cache, exclusively by cleanup, gc, artifact
//     delete and verify --repair.
//   - turnFile is a turnstile: an exclusive locker takes it exclusively before
//     waiting for lockFile, and shared lockers pass through it (shared) before
//     taking lockFile. While an exclusive locker waits, no new shared holder
//     gets in, so the exclusive request cannot starve under a steady stream
//     of builds, as with the in-process pool's exclusive interest.
const (
	lockFile = "lock"
	turnFile = "lock.turn"
)

// LockMode says how a Lock holds the cache.
type LockMode int

const (
	Shared    LockMode = iota // staging, committing, checking out
	Exclusive                 // cleanup: no one else stages or commits
)

func (m LockMode) String() string {
	if m == Exclusive {
		return "exclusive"
	}
	return "shared"
}

// Lock is a held cache lock. Release it with Unlock.
type Lock struct {
	f    *os.File
	Mode LockMode
}

// Unlock releases the lock. Unlocking twice does nothing.
func (l *Lock) Unlock() {
	if l != nil && l.f != nil {
		l.f.Close() // closing the descriptor drops the flock
		l.f = nil
	}
}

// Lock takes the cache lock in mode, waiting as long as another process holds
// it in a conflicting mode. When it has to wait it first calls waiting (which
// may be nil) with what it waits for, so that the user is told instead of
// seeing a silent hang. It gives up when ctx ends.
func (c *Cache) Lock(ctx context.Context, mode LockMode, waiting func(string)) (*Lock, error) {
	told := false
	tell := func() {
		if waiting != nil && !told {
			told = true
			waiting(fmt.Sprintf("waiting for the cache lock (%s) of %s: another gantry process is cleaning or using the cache", mode, c.Root))
		}
	}
	how := unix.LOCK_SH
	if mode == Exclusive {
		how = unix.LOCK_EX
	}
	turn, err := c.flock(ctx, turnFile, how, tell)
	if err != nil {
		return nil, err
	}
	defer turn.Close() // passed: the turnstile is only held while waiting
	f, err := c.flock(ctx, lockFile, how, tell)
	if err != nil {
		return nil, err
	}
	return &Lock{f: f, Mode: mode}, nil
}

// TryLock takes the cache lock in mode if no one holds it in a conflicting
// mode, and returns nil, nil otherwise.
func (c *Cache) TryLock(mode LockMode) (*Lock, error) {
	how := unix.LOCK_SH
	if mode == Exclusive {
		how = unix.LOCK_EX
	}
	f, err := c.openLockFile(lockFile)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("locking the cache %s: %w", c.Root, err)
	}
	return &Lock{f: f, Mode: mode}, nil
}

// openLockFile opens a lock file with plain system calls: os.OpenFile would
// try, and fail, to add the regular file to the poller (four system calls
// more), and every build job locks the cache twice.
func (c *Cache) openLockFile(name string) (*os.File, error) {
	p := filepath.Join(c.Root, name)
	fd, err := openFD(p, unix.O_RDWR|unix.O_CREAT, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the cache lock: %w", err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// openFD opens path with open(2) and O_CLOEXEC, retrying when interrupted, for
// a file used with plain system calls. Errors are *os.PathError, as os.Open's.
func openFD(path string, flag int, perm uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flag|unix.O_CLOEXEC, perm)
		if err == nil {
			return fd, nil
		}
		if err != unix.EINTR {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
	}
}

// flock opens name and locks it with how, calling tell before it blocks.
func (c *Cache) flock(ctx context.Context, name string, how int, tell func()) (*os.File, error) {
	f, err := c.openLockFile(name)
	if err != nil {
		return nil, err
	}
	err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return nil, fmt.Errorf("locking the cache %s: %w", c.Root, err)
	}
	tell()
	got := make(chan error, 1)
	go func() { got <- unix.Flock(int(f.Fd()), how) }()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("locking the cache %s: %w", c.Root, err)
		}
		return f, nil
	case <-ctx.Done():
		// Closing the descriptor drops the lock should the blocked call still
		// get it; the goroutine ends with it.
		go func() { <-got; f.Close() }()
		return nil, fmt.Errorf("waiting for the cache lock of %s: %w", c.Root, context.Cause(ctx))
	}
}
