package cache

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

// Build-once locks (docs/build-once.md): the local form of the build-once leases
// of gantry's server. Before a session builds an artifact it takes the artifact's
// build lock; a session that finds it held waits, holding no builder, until the
// holder is done, then reuses what the holder committed (or builds it, when the
// holder committed nothing: it died, or stopped).
//
// Every key's lock is one byte of a single file, building/keys, locked with an
// open file description lock (fcntl F_OFD_SETLK, Linux): the byte's offset is
// a hash of project, element and key. The kernel drops the lock when the last
// descriptor of the open file goes, so a holder killed with -9 frees it at once,
// and the lock file never grows (its size stays 0: a lock beyond the end of a
// file takes no space) nor multiplies: there is no file to remove per key, and
// so no race between removing a lock file and another process locking it.
// Two keys whose hashes meet on one byte would share a lock: with 2^62
// offsets, they do not.
const (
	buildingDir   = "building"
	buildLockFile = "keys"
)

// BuildLock is the build-once lock of one artifact, open but not necessarily
// held. Use it from one goroutine at a time; Close releases it.
type BuildLock struct {
	path string
	off  int64 // the key's byte in path
	fd   int   // -1 once closed, or handed to a goroutine still waiting (Lock)
}

// BuildLock opens the build-once lock of the artifact project/element/key,
// without taking it. It creates building/ when needed.
func (c *Cache) BuildLock(project, element, key string) (*BuildLock, error) {
	if err := validateRefName(project, element, key); err != nil {
		return nil, err
	}
	p := filepath.Join(c.Root, buildingDir, buildLockFile)
	fd, err := openFD(p, openLockFlags, 0o644)
	if os.IsNotExist(err) {
		if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			fd, err = openFD(p, openLockFlags, 0o644)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("opening the build-once lock of %s: %w", element, err)
	}
	return &BuildLock{path: p, off: buildLockOffset(project, element, key), fd: fd}, nil
}

// buildLockOffset is the byte of the lock file that stands for the artifact: the
// hash's first 62 bits, so that the byte and its end fit in an off_t.
func buildLockOffset(project, element, key string) int64 {
	h := sha256.Sum256([]byte(project + "\x00" + element + "\x00" + key))
	return int64(binary.BigEndian.Uint64(h[:8]) >> 2)
}

// TryLock takes the lock if no other holds it, and reports whether it did.
func (l *BuildLock) TryLock() (bool, error) {
	if l.fd < 0 {
		return false, fmt.Errorf("locking %s: the lock was closed", l.path)
	}
	ok, err := lockByte(l.fd, l.off, false)
	if err != nil {
		return false, fmt.Errorf("taking the build-once lock %s (byte %d): %w", l.path, l.off, err)
	}
	return ok, nil
}

// Lock waits until the lock is free and takes it, without polling: a goroutine
// waits in the kernel, which wakes it when the holder releases the lock or dies.
// When ctx ends first Lock returns its cause at once; the waiting goroutine then
// releases the lock as soon as it gets it, and l is closed.
func (l *BuildLock) Lock(ctx context.Context) error {
	if l.fd < 0 {
		return fmt.Errorf("locking %s: the lock was closed", l.path)
	}
	got := make(chan error, 1)
	fd, off := l.fd, l.off // the waiting goroutine's own copies: l.fd changes if ctx ends
	go func() {
		_, err := lockByte(fd, off, true)
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("waiting for the build-once lock %s (byte %d): %w", l.path, l.off, err)
		}
		return nil
	case <-ctx.Done():
		// The descriptor is closed only once the waiting call returns: closed
		// before, its number could be reused under the call.
		l.fd = -1
		go func() { <-got; closeFD(fd) }() // closing it drops the lock
		return fmt.Errorf("waiting for the build-once lock %s: %w", l.path, context.Cause(ctx))
	}
}

// Close releases the lock, if held, and closes it. Closing twice does nothing.
func (l *BuildLock) Close() {
	if l == nil || l.fd < 0 {
		return
	}
	closeFD(l.fd) // the last descriptor of the open file: the kernel drops its lock
	l.fd = -1
}
