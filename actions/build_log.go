package actions

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gantry-build/gantry/cache"
)

// logReadWhole is the largest job log stored from memory (storeLog); a larger one is
// streamed.
const logReadWhole = 1 << 20

// storeLog stores the job log at path as a blob and returns its digest. A log is new
// content, so cache.PutFile would hash the file, look for the blob, then copy the file
// and hash it again; a log of up to logReadWhole bytes is instead read once and stored
// from memory (hashed once, written once). The blob is the same either way.
func storeLog(c *cache.Cache, path string) (cache.Digest, error) {
	data, err := readSmallFile(path, logReadWhole)
	if err != nil {
		return cache.Digest{}, fmt.Errorf("storing file %s: %w", path, err)
	}
	if data == nil {
		return c.PutFile(path)
	}
	return c.PutBlob(data)
}

// readSmallFile returns the content of the regular file at path if it holds at most
// max bytes, and nil (with no error) if it holds more. It reads with plain system
// calls (an *os.File asks the poller about a regular file each time it is opened).
func readSmallFile(path string, max int64) ([]byte, error) {
	fd, err := openRetry(path, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("not a regular file")
	}
	if st.Size > max {
		return nil, nil
	}
	data := make([]byte, 0, st.Size+1) // +1: the read that finds the end needs room
	for {
		n, err := unix.Read(fd, data[len(data):cap(data)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, err
		case n == 0:
			return data, nil
		}
		data = data[:len(data)+n]
		if int64(len(data)) > max {
			return nil, nil // it grew: streamed
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
}

// openRetry opens path read-only with flags, again when a signal interrupts it.
func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
