package cache

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Live sessions on one cache. Each gantry session that builds on a cache has a
// file sessions/<id>, locked exclusively (flock) for the session's life, and
// beside it sessions/<id>.needs, the artifacts it still needs (to stage, to
// deliver, to push), one "project/element/key" a line. The kernel drops the lock
// when the session dies, kill -9 too: a session file nobody holds belongs to a
// dead session, and whoever finds it removes it with its needs.
//
// The id, "<pid>.<nonce>", also prefixes the tmp/ entries of the session and of
// its jobs (they get it from SessionEnv), so that an entry's owner is proven
// live by its held lock, not only by a process of that pid existing: pids are
// reused, and another pid namespace sharing the cache sees none of ours.
//
// Cleanup (gc, quota) keeps every artifact a live session needs.

const (
	sessionsDir  = "sessions"
	needsSuffix  = ".needs"
	sessionIDSep = "."
)

// SessionEnv is the environment variable through which a session's jobs name
// their tmp/ entries after the session (Attach reads it).
const SessionEnv = "GANTRY_CACHE_SESSION"

// Session is this process's entry in sessions/. End it when the session ends.
type Session struct {
	c  *Cache
	ID string
	f  *os.File // holds the flock
}

// StartSession registers a live session on the cache and makes c name its tmp/
// entries after it. Call it before c is shared between goroutines.
func (c *Cache) StartSession() (*Session, error) {
	dir := filepath.Join(c.Root, sessionsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("registering the session in %s: %w", dir, err)
	}
	for range 100 {
		id := strconv.Itoa(os.Getpid()) + sessionIDSep + strconv.FormatUint(rand.Uint64(), 36)
		p := filepath.Join(dir, id)
		fd, err := openFD(p, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("registering the session in %s: %w", dir, err)
		}
		f := os.NewFile(uintptr(fd), p)
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("registering the session in %s: locking %s: %w", dir, p, err)
		}
		// Between the create and the lock, another process may have found the
		// file unlocked, taken it for a dead session's and removed it: then
		// start again under another id.
		if !namesFile(f, p) {
			f.Close()
			continue
		}
		c.owner = id
		return &Session{c: c, ID: id, f: f}, nil
	}
	return nil, fmt.Errorf("registering the session in %s: no free name found", dir)
}

// namesFile reports whether path still names the file f has open.
func namesFile(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// Need publishes the artifacts the session still needs, replacing what it
// published before. It writes one small file, not synced: it dies with the
// session anyway.
func (s *Session) Need(refs []ArtifactRef) error {
	var b bytes.Buffer
	for _, r := range refs {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	p := filepath.Join(s.c.Root, sessionsDir, s.ID+needsSuffix)
	if err := s.c.writeFileAtomic(p, b.Bytes(), 0o644, volatile); err != nil {
		return fmt.Errorf("publishing what the session needs: %w", err)
	}
	return nil
}

// End removes the session's files and releases its lock. Ending twice does
// nothing.
func (s *Session) End() {
	if s == nil || s.f == nil {
		return
	}
	dir := filepath.Join(s.c.Root, sessionsDir)
	os.Remove(filepath.Join(dir, s.ID+needsSuffix))
	os.Remove(filepath.Join(dir, s.ID))
	s.f.Close()
	s.f = nil
}

// sessionID reports whether id has the form of a session's id.
func sessionID(id string) bool {
	pid, nonce, ok := strings.Cut(id, sessionIDSep)
	n, err := strconv.Atoi(pid)
	return ok && err == nil && n > 0 && nonce != "" && !strings.ContainsAny(nonce, "./-")
}

// sessionLive reports whether the session id holds its lock. A session found
// dead loses its files (remove), so that the next look is one failed open.
func (c *Cache) sessionLive(id string, remove bool) bool {
	dir := filepath.Join(c.Root, sessionsDir)
	p := filepath.Join(dir, id)
	fd, err := openFD(p, unix.O_RDONLY, 0)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) // unreadable: take it as live
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true // held (or not lockable: take it as live)
	}
	if !namesFile(f, p) {
		return false // removed meanwhile: dead all the same
	}
	if remove {
		// Holding its lock: a session being created under this id cannot take
		// it before the file is gone (see StartSession).
		os.Remove(filepath.Join(dir, id+needsSuffix))
		os.Remove(p)
	}
	return false
}

// liveNeeds returns the artifacts live sessions on the cache need; with
// remove, it removes the files of dead sessions.
func (c *Cache) liveNeeds(remove bool) (map[ArtifactRef]bool, error) {
	needs := map[ArtifactRef]bool{}
	err := c.sweepSessions(remove, func(p string) error { return readNeeds(p, needs) })
	return needs, err
}

// sweepSessions calls live with the needs file of each live session (it may
// not exist yet); with remove, it removes the files of dead ones.
func (c *Cache) sweepSessions(remove bool, live func(needs string) error) error {
	dir := filepath.Join(c.Root, sessionsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing the live sessions in %s: %w", dir, err)
	}
	// Each session once, though it has two files.
	ids := map[string]bool{}
	for _, e := range entries {
		if id, _ := strings.CutSuffix(e.Name(), needsSuffix); sessionID(id) {
			ids[id] = true
		}
	}
	for id := range ids {
		needs := filepath.Join(dir, id+needsSuffix)
		switch {
		case !c.sessionLive(id, remove):
			if remove {
				// Its lock file is made first and removed last: a needs file
				// without one is a dead session's.
				os.Remove(needs)
			}
		case live != nil:
			if err := live(needs); err != nil {
				return err
			}
		}
	}
	return nil
}

// readNeeds adds the artifacts of a needs file to needs. A file not there (not
// written yet, or its session ended meanwhile) adds nothing.
func readNeeds(p string, needs map[ArtifactRef]bool) error {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading what a live session needs: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		project, rest, ok := strings.Cut(line, "/")
		i := strings.LastIndexByte(rest, '/')
		if !ok || i < 0 {
			continue
		}
		needs[ArtifactRef{Project: project, Element: rest[:i], Key: rest[i+1:]}] = true
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading what a live session needs from %s: %w", p, err)
	}
	return nil
}

// removalsFile counts the cleanups that removed something from the cache.
const removalsFile = "removals"

// Removals is how many cleanups have removed artifacts or blobs from the cache
// so far. A session that finds a dependency's artifact gone compares it with
// the count when it last rebuilt that dependency: a higher count says a
// cleanup in another process took it, a race to heal again; the same count, a
// fault that would only repeat.
func (c *Cache) Removals() uint64 {
	data, err := os.ReadFile(filepath.Join(c.Root, sessionsDir, removalsFile))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// countRemoval adds one to Removals. The caller holds the exclusive lock.
func (c *Cache) countRemoval() error {
	dir := filepath.Join(c.Root, sessionsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("counting the removal: %w", err)
	}
	n := strconv.FormatUint(c.Removals()+1, 10) + "\n"
	return c.writeFileAtomic(filepath.Join(dir, removalsFile), []byte(n), 0o644, volatile)
}
