package cache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"github.com/gantry-build/gantry/internal/fileid"
)

// loads/ holds what loading and planning remember between sessions: a parse cache per
// project checkout (element's ParseCache, named by a digest of the project's root) and
// an outcome memo per project (outcomes.<project>). Neither is needed for correctness,
// and nothing removes a checkout's or project's file when it goes away, so a session
// marks each file it reads as used (its modification time, at most once a day:
// ReadLoadsFile) and `cache gc` removes those unused for loadsMaxAge (leftovers).

// outcomeMemoPrefix starts the name of a project's outcome memo in loads/.
const outcomeMemoPrefix = "outcomes."

// loadsMaxAge: a loads/ file no session has read for this long is removed by `cache gc`.
const loadsMaxAge = 30 * 24 * time.Hour

// loadsUseStep: a loads/ file read is marked used when its mark is older than this.
const loadsUseStep = 24 * time.Hour

// ReadLoadsFile reads a file of loads/ and marks it used: its modification time is set
// to now when it is older than loadsUseStep (one stat per read; one utimes a day). The
// contents are returned as a string made from the buffer they were read into, without
// a copy (bincode's readers return parts of it): the file of a 10,000-element project's
// parse cache is 2.4 MB.
func ReadLoadsFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return "", err
	}
	if now := time.Now(); now.Sub(fi.ModTime()) > loadsUseStep {
		_ = os.Chtimes(path, time.Time{}, now) // only costs an early removal if it fails
	}
	// data is not used again, and nothing else refers to it: the string is immutable.
	return unsafe.String(unsafe.SliceData(data), len(data)), nil
}

// WriteLoadsFile writes a file of loads/ atomically: a temporary file in its directory,
// then a rename. write writes the contents to the temporary file (unbuffered: it
// writes in blocks of its own), given "now" by the filesystem's own clock (the
// temporary file's change time), against which entries are judged racily clean
// (fileid.ID.Racy). what names the file in errors ("the element parse cache").
func WriteLoadsFile(path, what string, write func(w io.Writer, now int64) error) error {
	err := os.MkdirAll(filepath.Dir(path), 0o755)
	var tmp *os.File
	if err == nil {
		tmp, err = os.CreateTemp(filepath.Dir(path), ".tmp-*")
	}
	if err != nil {
		return fmt.Errorf("saving %s: %w", what, err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	err = write(tmp, fileid.Now(tmp))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("saving %s %s: %w", what, path, err)
	}
	return nil
}

// staleLoads lists the files of loads/ unused for loadsMaxAge, and temporary files
// left by a save that crashed (older than staleTempAge).
func (c *Cache) staleLoads() ([]string, error) {
	return staleEntries(LoadsDir(c.Root), 0, loadsMaxAge, ".tmp-")
}

// staleEntries lists the entries of dir (none when it does not exist) of type kind (0
// for regular files, fs.ModeDir for directories) last modified maxAge ago, or
// staleTempAge ago for those whose name starts with tempPrefix (what a crashed write
// left).
func staleEntries(dir string, kind fs.FileMode, maxAge time.Duration, tempPrefix string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var paths []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || info.Mode().Type() != kind {
			continue
		}
		age := time.Since(info.ModTime())
		if age >= maxAge || strings.HasPrefix(e.Name(), tempPrefix) && age >= staleTempAge {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	return paths, nil
}
