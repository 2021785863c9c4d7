package cache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// deadSession leaves in c the files of a session that died (kill -9): its lock
// file, which no one holds, and what it needed.
func deadSession(t *testing.T, c *Cache, id string, needs ...ArtifactRef) {
	t.Helper()
	dir := filepath.Join(c.Root, sessionsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, r := range needs {
		lines = append(lines, r.String()+"\n")
	}
	if err := os.WriteFile(filepath.Join(dir, id), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, id+needsSuffix), []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A cleanup keeps what a live session on the cache needs, whatever its age and the
// target, and says how much it kept; what a dead session needed goes, with its files;
// once the session ends, what it needed may go too.
func TestCleanupKeepsWhatLiveSessionsNeed(t *testing.T) {
	c := openTestCache(t)
	old := time.Now().Add(-48 * time.Hour)
	needed := commitSized(t, c, "needed.toml", 32<<10, old)
	orphaned := commitSized(t, c, "orphaned.toml", 32<<10, old)
	s, err := c.StartSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.End()
	if err := s.Need([]ArtifactRef{needed}); err != nil {
		t.Fatal(err)
	}
	deadSession(t, c, "1.dead", orphaned)
	rep, err := c.Cleanup(CleanupOptions{Target: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !cached(c, needed) || cached(c, orphaned) {
		t.Fatalf("after cleanup: needed %v, orphaned %v; want only the live session's need kept", cached(c, needed), cached(c, orphaned))
	}
	if rep.Live != 1 || rep.LiveBytes < 32<<10 || !rep.Short {
		t.Errorf("report: %d live artifacts (%d bytes), short %v; want 1 of at least 32K, short", rep.Live, rep.LiveBytes, rep.Short)
	}
	for _, name := range []string{"1.dead", "1.dead" + needsSuffix} {
		if _, err := os.Stat(filepath.Join(c.Root, sessionsDir, name)); !os.IsNotExist(err) {
			t.Errorf("the dead session's %s is still there (%v)", name, err)
		}
	}
	if c.Removals() != 1 {
		t.Errorf("removals = %d after one cleanup that removed something, want 1", c.Removals())
	}
	s.End()
	if _, err := c.Cleanup(CleanupOptions{Target: 1}); err != nil {
		t.Fatal(err)
	}
	if cached(c, needed) {
		t.Error("the need of a session that ended is still kept")
	}
}

// A session's own cleanup protects what the session needs, which it has also
// published: only what other live sessions need counts as kept for them.
func TestCleanupCountsOnlyOthersNeedsAsLive(t *testing.T) {
	c := openTestCache(t)
	old := time.Now().Add(-48 * time.Hour)
	own := commitSized(t, c, "own.toml", 32<<10, old)
	other := commitSized(t, c, "other.toml", 32<<10, old)
	s, err := c.StartSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.End()
	if err := s.Need([]ArtifactRef{own, other}); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Cleanup(CleanupOptions{Target: 1, Protect: func(a ArtifactRef) bool { return a == own }})
	if err != nil {
		t.Fatal(err)
	}
	if !cached(c, own) || !cached(c, other) {
		t.Fatalf("after cleanup: own %v, other %v; want both kept", cached(c, own), cached(c, other))
	}
	if rep.Live != 1 || rep.Protected != 2 {
		t.Errorf("report: %d live artifacts, %d protected; want 1 live (the other's) of 2 protected", rep.Live, rep.Protected)
	}
}

// A session's start removes at once the tmp/ entries of sessions that died, and
// never those of a live session (its lock proves it live), nor young ones of a
// process with no session.
func TestPrepareRemovesDeadSessionsTemp(t *testing.T) {
	c := openTestCache(t)
	live, err := c.StartSession()
	if err != nil {
		t.Fatal(err)
	}
	defer live.End()
	liveDir, err := c.TempDir("build")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(liveDir), live.ID+"-") {
		t.Fatalf("a live session's tmp entry is %s, want it named after the session %s", liveDir, live.ID)
	}
	deadSession(t, c, "2.dead")
	dead := filepath.Join(c.Root, tmpDir, "2.dead-build-x")
	noSession := filepath.Join(c.Root, tmpDir, "3.gone-write-y") // its session file is gone too
	pidOnly := filepath.Join(c.Root, tmpDir, "999999999-write-z")
	for _, d := range []string{dead, noSession, pidOnly} {
		if err := os.MkdirAll(filepath.Join(d, "install"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	other, err := At(c.Root) // another session starting on the cache
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Prepare(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{liveDir: true, dead: false, noSession: false, pidOnly: true,
		filepath.Join(c.Root, sessionsDir, "2.dead"): false, filepath.Join(c.Root, sessionsDir, live.ID): true} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s: present %v after another session's start, want %v", path, err == nil, want)
		}
	}
}
