// Package cache is gantry's local content-addressed artifact cache.
//
// Layout under Root:
//
//	cas/ab/abcdef…                   blobs named by SHA-256, fanned out by the first two hex characters
//	exec/ab/abcdef…                  executable twins: copies of blobs with mode 0555, for linked staging (twin.go)
//	refs/<project>/<element>/<key>   "hash/size" of an artifact record blob (element names may contain "/")
//	weak/<project>/<hash>            weak refs: hard links to refs, by element and weak key (weak.go)
//	sources/                         fetched sources (owned by package source)
//	logs/                            build logs being written
//	tmp/                             temporary files and directories, on the same filesystem
//	sessions/<id>[.needs]            live sessions: a lock each, and what each still needs (session.go)
//	stats                            learned build durations (JSON)
//
// Invariants, which make it safe for several gantry processes to use one cache
// at once and for any of them to be killed at any instant:
//   - Everything is written to a file with no name (O_TMPFILE, on Linux) linked
//     into place, or to a fresh temporary name under tmp/ renamed into place, so a
//     reader never sees a partial file (an install root's files, under tmp/
//     already, are renamed in themselves: see TakeTree). See newFile.
//     Blobs are made durable together, before the ref that reaches them (see
//     durable.go).
//   - A blob's content never changes once it is in cas/: blobs are read-only
//     (mode 0444) and are hard-linked only where nothing writes through the link
//     (see CheckoutOptions.Hardlink). Writing the same blob twice renames
//     identical content over itself, which is harmless; a blob found damaged is
//     removed (see integrity.go). Staging a build's dependencies relies on this:
//     it checks a blob's type, size and mode, not its content.
//   - An artifact's ref is written last, after every blob it reaches is
//     durable (one syncfs), so an artifact is visible only when complete; the
//     ref and its directory are fsynced. Deleting a ref leaves the blobs for
//     garbage collection.
//   - Entries under tmp/ are named "<session>-<pattern>-<random>" after the
//     session whose lock proves them live (session.go), or "<pid>-…" by a
//     process with no session, so that an entry whose owner has exited is
//     recognisably stray; Open removes those of dead sessions at once, the
//     others an hour old whose process has exited.
//
// A Cache holds no mutable state (StartSession names its owner before it is
// shared) and may be used from several goroutines.
package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	CASDir     = "cas" // the blobs, by digest
	refsDir    = "refs"
	weakDir    = "weak" // weak refs: links to refs, by element and weak key (weak.go)
	sourcesDir = "sources"
	logsDir    = "logs"
	tmpDir     = "tmp"
	statsFile  = "stats"
	loadsDir   = "loads"

	// staleTempAge is how old an abandoned tmp/ entry must be before Open
	// removes it.
	staleTempAge = time.Hour
)

// LoadsDir is where, under the cache directory root, gantry keeps what loading a
// project can reuse (element.ParseCache): one small file per project checkout, never
// needed for correctness. It does not open the cache.
func LoadsDir(root string) string { return filepath.Join(root, loadsDir) }

// SourcesDirOf is the source cache of the cache at root (SourcesDir), without opening it.
func SourcesDirOf(root string) string { return filepath.Join(root, sourcesDir) }

// Cache is a local cache directory. Its methods are safe for concurrent use,
// also by several processes sharing the directory.
type Cache struct {
	Root string // absolute path of the cache directory

	pid int // prefixes our tmp/ entries so that others can tell they are live
	// owner, once set (StartSession, Attach), prefixes them instead: the id of
	// the session whose lock proves them live (session.go).
	owner string
	// trace, set only by tests, follows what is made durable when (durable.go).
	trace func(event, path string)
	// dirs, once RememberDirectories was called, holds the Directory blobs this
	// Cache has read and checked (tree.go).
	dirs *dirMemo
	// twinBytes counts the executable twins this Cache made (twin.go).
	twinBytes atomic.Int64
}

// Open prepares the cache at root, creating the layout if needed, and removes
// entries of tmp/ that crashed processes left behind more than an hour ago.
func Open(root string) (*Cache, error) {
	c, err := At(root)
	if err == nil {
		err = c.Prepare()
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// At is the cache at root, the disk untouched: a command reads what a cache may
// already hold (the outcome memo, the build durations: absent where there is no cache)
// while its project loads, and calls Prepare only once the project loaded, so that a
// project that does not load leaves no cache directory behind. Nothing may be written
// through it before Prepare.
func At(root string) (*Cache, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("opening cache %s: %w", root, err)
	}
	return &Cache{Root: abs, pid: os.Getpid()}, nil
}

// Prepare creates the layout of the cache At gave, if needed, and removes entries of
// tmp/ that crashed processes left behind more than an hour ago.
func (c *Cache) Prepare() error {
	if err := c.MakeLayout(); err != nil {
		return err
	}
	// Best effort: a cache with some old garbage in tmp/ is still usable.
	_, _ = c.cleanTemp(staleTempAge)
	_ = c.sweepSessions(true, nil)
	return nil
}

// MakeLayout creates the layout of the cache At gave, if needed, and removes
// nothing: `cache gc` lists, counts and removes what crashed processes left
// itself (CleanupOptions.Leftovers), or with --dry-run removes nothing.
func (c *Cache) MakeLayout() error {
	for _, d := range []string{CASDir, refsDir, sourcesDir, logsDir, tmpDir} {
		if err := os.MkdirAll(filepath.Join(c.Root, d), 0o755); err != nil {
			return fmt.Errorf("opening cache %s: %w", c.Root, err)
		}
	}
	return nil
}

// Attach opens the cache at root for a job of a session: the gantry process that
// started the job has opened it (Open), so the layout exists and tmp/ was cleaned;
// a job's start-up does not scan tmp/ again, however many entries it holds.
func Attach(root string) (*Cache, error) {
	c, err := At(root)
	if err != nil {
		return nil, err
	}
	if id := os.Getenv(SessionEnv); sessionID(id) {
		c.owner = id // the session that started the job holds the lock
	}
	if !c.Made() {
		return nil, fmt.Errorf("opening cache %s: it has no %s/ directory (is it a gantry cache? `gantry build` sets one up)", c.Root, tmpDir)
	}
	return c, nil
}

// Made reports whether the cache has been made (Prepare): its tmp/ directory, the last
// Prepare makes, exists. A command that only reads writes nothing into a cache not made
// yet, not even loads/, so that it leaves no cache behind.
func (c *Cache) Made() bool {
	fi, err := os.Stat(c.tmpPath())
	return err == nil && fi.IsDir()
}

// SourcesDir is where fetched sources are kept.
func (c *Cache) SourcesDir() string { return SourcesDirOf(c.Root) }

// LogsDir is where build logs are written before they are stored as blobs.
func (c *Cache) LogsDir() string { return filepath.Join(c.Root, logsDir) }

func (c *Cache) tmpPath() string { return filepath.Join(c.Root, tmpDir) }

// tempPattern names tmp/ entries "<pid>-<pattern>-*" (see the package doc).
func (c *Cache) tempPattern(pattern string) string {
	pattern = strings.Map(func(r rune) rune {
		if r == '*' || r == '/' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, pattern)
	if pattern == "" {
		pattern = "tmp"
	}
	owner := c.owner
	if owner == "" {
		owner = strconv.Itoa(c.pid)
	}
	return owner + "-" + pattern + "-*"
}

// TempDir creates a fresh directory under tmp/, on the cache's filesystem so
// that its contents can be renamed into the cache. The caller removes it.
func (c *Cache) TempDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp(c.tmpPath(), c.tempPattern(pattern))
	if err != nil {
		return "", fmt.Errorf("creating temporary directory in %s: %w", c.tmpPath(), err)
	}
	return dir, nil
}

// TempName returns a fresh name under tmp/ ("<pid>-<pattern>-<random>") and makes
// nothing: for a directory that a job makes (or renames into place) and removes, so
// that the session allocates and frees no inode for it.
func (c *Cache) TempName(pattern string) string {
	name := strings.Replace(c.tempPattern(pattern), "*", strconv.FormatUint(rand.Uint64(), 36), 1)
	return filepath.Join(c.tmpPath(), name)
}

// tempFile creates a fresh file under tmp/, mode 0600, as os.CreateTemp does
// but with plain system calls (see openFD): every blob and ref written goes
// through one.
func (c *Cache) tempFile(pattern string) (*os.File, error) {
	for range 10000 {
		name := c.TempName(pattern)
		fd, err := openFD(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("creating temporary file in %s: %w", c.tmpPath(), err)
		}
		return os.NewFile(uintptr(fd), name), nil
	}
	return nil, fmt.Errorf("creating temporary file in %s: no free name found", c.tmpPath())
}

// writeFileAtomic writes data to dst through a temporary file: fsync (unless
// volatile), chmod, rename. With dirSynced it also fsyncs dst's directory so that the
// rename itself is durable.
func (c *Cache) writeFileAtomic(dst string, data []byte, perm fs.FileMode, d durability) error {
	return c.writePlaced(dst, data, perm, d, false)
}

// writeFileLinked is writeFileAtomic through a file with no name where the filesystem
// has them (newFile): for what every build job writes, its blobs.
func (c *Cache) writeFileLinked(dst string, data []byte, perm fs.FileMode, d durability) error {
	return c.writePlaced(dst, data, perm, d, true)
}

// writePlaced writes data to a new file (writeNew) and places it at dst.
func (c *Cache) writePlaced(dst string, data []byte, perm fs.FileMode, d durability, unnamed bool) error {
	f, err := c.writeNew(dst, data, perm, d, unnamed)
	if err != nil {
		return err
	}
	return c.place(f, dst, d)
}

// newFile is a file written for a place in the cache, not there yet: a file with no
// name in the directory it goes to (O_TMPFILE), placed with one link(2), or where the
// filesystem has no such files, one under a temporary name in tmp/, placed with a
// rename(2). Either way a reader never sees it partial.
type newFile struct {
	f   *os.File
	tmp string // the temporary name, "" for a file with none
}

// createNew opens a new file for a place in dir (see newFile), mode 0600: with no name
// when unnamed and the filesystem allows, else under a temporary name.
func (c *Cache) createNew(dir string, unnamed bool) (*newFile, error) {
	if unnamed {
		f, err := openUnnamed(dir, 0o600)
		if errors.Is(err, fs.ErrNotExist) && os.MkdirAll(dir, 0o755) == nil {
			f, err = openUnnamed(dir, 0o600)
		}
		if err == nil {
			return &newFile{f: f}, nil
		}
	}
	f, err := c.tempFile("write")
	if err != nil {
		return nil, err
	}
	return &newFile{f: f, tmp: f.Name()}, nil
}

// discard closes nf and removes its temporary name, if any.
func (nf *newFile) discard() {
	nf.f.Close()
	if nf.tmp != "" {
		os.Remove(nf.tmp)
	}
}

// writeNew writes data to a new file for dst (createNew) with mode perm, fsynced
// unless d is volatile; dst names it in errors.
func (c *Cache) writeNew(dst string, data []byte, perm fs.FileMode, d durability, unnamed bool) (*newFile, error) {
	nf, err := c.createNew(filepath.Dir(dst), unnamed)
	if err != nil {
		return nil, err
	}
	err = func() error {
		if _, err := nf.f.Write(data); err != nil {
			return err
		}
		if err := syncFile(nf.f, d); err != nil {
			return err
		}
		return nf.f.Chmod(perm)
	}()
	if err != nil {
		nf.discard()
		return nil, fmt.Errorf("writing %s: %w", dst, err)
	}
	return nf, nil
}

// place puts nf at dst, replacing what is there, closes it and, with dirSynced, fsyncs
// dst's directory. nf is removed if it cannot be placed.
func (c *Cache) place(nf *newFile, dst string, d durability) error {
	var err error
	if nf.tmp != "" {
		err = nf.f.Close()
		if err == nil {
			err = renameInto(nf.tmp, dst)
		}
		if err != nil {
			os.Remove(nf.tmp)
			return err
		}
	} else {
		err = c.linkInto(nf.f, dst)
		if cerr := nf.f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if d == dirSynced {
		if err := syncDirectory(filepath.Dir(dst)); err != nil {
			return err
		}
	}
	return nil
}

// linkInto names the unnamed file f dst (linkUnnamed), creating dst's directory if
// needed (a concurrent Delete may remove an emptied one), and replacing what is there:
// through a second name under tmp/, renamed over it (renameInto).
func (c *Cache) linkInto(f *os.File, dst string) error {
	var err error
	for range 4 {
		err = linkUnnamed(f, dst)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, fs.ErrExist):
			tmp := c.TempName("write")
			if err := linkUnnamed(f, tmp); err != nil {
				return fmt.Errorf("moving a new file to %s: %w", dst, err)
			}
			if err := renameInto(tmp, dst); err != nil {
				os.Remove(tmp)
				return err
			}
			return nil
		case errors.Is(err, fs.ErrNotExist):
			if merr := os.MkdirAll(filepath.Dir(dst), 0o755); merr != nil {
				return fmt.Errorf("creating directory for %s: %w", dst, merr)
			}
		default:
			return err
		}
	}
	return err
}

// renameInto renames src to dst, creating dst's directory if needed. It
// retries because a concurrent Delete may remove an emptied directory between
// our MkdirAll and Rename. It makes one rename(2) when dst's directory exists
// (os.Rename stats dst first): it runs once per file of an install root.
//
// A directory where the file should go (a blob, a ref, an action cache entry) is
// damage: nothing of gantry's puts one there, and left alone it would fail every
// write of that name (every build of that element) until `cache verify --repair`.
// It is removed and the rename made again.
func renameInto(src, dst string) error {
	var err error
	for range 4 {
		err = syscall.Rename(src, dst)
		if errors.Is(err, syscall.EISDIR) {
			if rerr := removeAll(dst); rerr != nil {
				return fmt.Errorf("moving %s to %s: a directory is in its place and cannot be removed: %w", src, dst, rerr)
			}
			continue
		}
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		if _, serr := os.Lstat(src); serr != nil {
			break // the source is gone: retrying cannot help
		}
		if merr := os.MkdirAll(filepath.Dir(dst), 0o755); merr != nil {
			return fmt.Errorf("creating directory for %s: %w", dst, merr)
		}
	}
	if err != nil {
		return fmt.Errorf("moving %s to %s: %w", src, dst, err)
	}
	return nil
}

// syncDirectory fsyncs dir, with plain system calls (see openFD): every build
// job's ref write ends with it.
func syncDirectory(dir string) error {
	fd, err := openFD(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, &os.PathError{Op: "sync", Path: dir, Err: err})
	}
	return nil
}

// tempOwner parses the pid prefix of a tmp/ entry name.
func tempOwner(name string) (int, bool) {
	prefix, _, ok := strings.Cut(name, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(prefix)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// strayTemp reports whether the tmp/ entry name was left behind, and whether
// that is proven: the session whose id prefixes it holds its lock no more
// (session.go). An entry named after a pid alone (a process with no session)
// is left behind when no process of that pid runs, which a pid reused, or one
// in another pid namespace, can hide; a name that follows neither form is left
// behind too. live remembers the sessions already asked about.
func (c *Cache) strayTemp(name string, live map[string]bool) (stray, proven bool) {
	if id, _, _ := strings.Cut(name, "-"); sessionID(id) {
		alive, ok := live[id]
		if !ok {
			alive = c.sessionLive(id, false)
			live[id] = alive
		}
		return !alive, true
	}
	pid, ok := tempOwner(name)
	if !ok {
		return true, false
	}
	return !processAlive(pid), false
}

// StrayTemp lists entries of tmp/ (as paths) whose owning process has exited,
// typically left by a crash. They are harmless: nothing refers to them.
func (c *Cache) StrayTemp() ([]string, error) {
	stray, _, err := c.strayTemps()
	return stray, err
}

// strayTemps is StrayTemp, and says for each entry whether its owner is proven
// dead (strayTemp).
func (c *Cache) strayTemps() (stray []string, proven []bool, err error) {
	entries, err := os.ReadDir(c.tmpPath())
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s: %w", c.tmpPath(), err)
	}
	live := map[string]bool{}
	for _, e := range entries {
		if s, p := c.strayTemp(e.Name(), live); s {
			stray = append(stray, filepath.Join(c.tmpPath(), e.Name()))
			proven = append(proven, p)
		}
	}
	return stray, proven, nil
}

// cleanTemp removes stray entries of tmp/ (see StrayTemp) and returns their
// paths: at once those of a session proven dead, the others once last
// modified at least minAge ago. Entries of live sessions and processes are
// never removed, whatever their age: a build may be suspended for hours.
func (c *Cache) cleanTemp(minAge time.Duration) ([]string, error) {
	stray, proven, err := c.strayTemps()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for i, p := range stray {
		info, err := os.Lstat(p)
		if err != nil {
			continue // removed concurrently
		}
		if !proven[i] && time.Since(info.ModTime()) < minAge {
			continue
		}
		if err := removeAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}

// removeAll is os.RemoveAll that also copes with read-only directories, as
// left by builds that chmod their install trees.
func removeAll(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}
