package cache

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Group commit. Every commit needs a syncfs(2) that began after its blobs were written;
// one that another process began later than that serves as well as its own. The
// processes of a cache share two counters in building/syncs, mapped in memory: started,
// the number of syncfs calls begun, and done, the number of the latest one finished.
// A commit reads started (its blobs are written), wants syncfs number started+1 or a
// later one, and takes the file's lock: when done has reached that number, a syncfs that
// began after its writes has finished, and it makes none; else it begins the next one
// itself, holding the lock. While one process flushes, the commits that finish meanwhile
// queue on the lock, and the first of them flushes for them all.
//
// A process killed holding the lock frees it (flock); one killed in its syncfs leaves
// done behind started, and the next commit flushes itself. Counters that make no sense
// (done beyond started: a damaged file) never excuse a flush.
const syncsFile = "syncs"

// groupSync makes everything written before it durable, by a syncfs of its own or one
// another process began after it was called; where the counters cannot be had, by a
// syncfs of its own.
func (c *Cache) groupSync() error {
	fd, counters, err := c.openSyncCounters()
	if err != nil {
		return c.flush()
	}
	defer unix.Close(fd)
	defer unix.Munmap(counters)
	started := (*atomic.Uint64)(unsafe.Pointer(&counters[0]))
	done := (*atomic.Uint64)(unsafe.Pointer(&counters[8]))
	want := started.Load() + 1
	c.note(eventSyncWait, c.Root)
	if err := flockFD(fd, unix.LOCK_EX); err != nil {
		return c.flush()
	}
	defer flockFD(fd, unix.LOCK_UN)
	if d, s := done.Load(), started.Load(); d >= want && d <= s {
		c.note(eventSyncShared, c.Root)
		return nil
	}
	n := started.Add(1)
	if err := c.flush(); err != nil {
		return err
	}
	done.Store(n)
	return nil
}

// openSyncCounters opens building/syncs, making it if needed, and maps its counters.
func (c *Cache) openSyncCounters() (int, []byte, error) {
	p := filepath.Join(c.Root, buildingDir, syncsFile)
	fd, err := openFD(p, unix.O_RDWR|unix.O_CREAT, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			fd, err = openFD(p, unix.O_RDWR|unix.O_CREAT, 0o644)
		}
	}
	if err != nil {
		return -1, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	if st.Size < 16 { // new: zeroes, as many processes as make it at once
		if err := unix.Ftruncate(fd, 16); err != nil {
			unix.Close(fd)
			return -1, nil, err
		}
	}
	m, err := unix.Mmap(fd, 0, 16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, m, nil
}

// flockFD is flock(2), again when interrupted.
func flockFD(fd, how int) error {
	for {
		if err := unix.Flock(fd, how); err != unix.EINTR {
			return err
		}
	}
}
