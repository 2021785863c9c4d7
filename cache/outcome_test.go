package cache

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/fileid"
	"github.com/gantry-build/gantry/internal/testtree"
)

// The outcome memo answers for a ref only while the ref names the record it saw: a ref
// rewritten (a failure built again) or deleted is seen at once.
func TestOutcomeMemoFollowsTheRef(t *testing.T) {
	c := openTestCache(t)
	commitFailed(t, c, "app.toml", "k")
	outcome := func(want string) {
		t.Helper()
		m := c.OpenOutcomeMemo("demo")
		found, success, err := c.OutcomeMemoized(m, "demo", "app.toml", "k")
		got := map[bool]string{true: "success", false: "failure"}[success]
		if !found {
			got = "missing"
		}
		if err != nil || got != want {
			t.Fatalf("OutcomeMemoized = %s, %v; want %s", got, err, want)
		}
		if err := m.Save(); err != nil {
			t.Fatal(err)
		}
	}
	outcome("failure")
	outcome("failure")                          // from the memo
	commitSample(t, c, "demo", "app.toml", "k") // built again, successfully
	outcome("success")
	if err := c.Delete("demo", "app.toml", "k"); err != nil {
		t.Fatal(err)
	}
	outcome("missing")
}

// commitFailed commits a failed build of demo's element at key ("exit status 1"; its
// ref named a successful one first).
func commitFailed(t *testing.T, c *Cache, element, key string) {
	t.Helper()
	failed := commitSample(t, c, "demo", element, key)
	failed.Success, failed.Error = false, "exit status 1"
	if err := c.Commit(failed); err != nil {
		t.Fatal(err)
	}
}

// A memo answers without reading the record (that is its point: the record's digest
// fixes what it says); a damaged record is then left to `cache verify` and to whoever
// uses the artifact, which Outcome without the memo, like Lookup, reports at once.
// A damaged memo file is an empty memo.
func TestOutcomeMemoSkipsTheRecord(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "app.toml", "k")
	m := c.OpenOutcomeMemo("demo")
	if found, _, err := c.OutcomeMemoized(m, "demo", "app.toml", "k"); !found || err != nil {
		t.Fatalf("OutcomeMemoized = %v, %v", found, err)
	}
	if err := m.Save(); err != nil {
		t.Fatal(err)
	}
	refPath, ref, err := c.readRef("demo", "app.toml", "k")
	if err != nil {
		t.Fatal(err)
	}
	rd, _, err := c.recordBlob(ref)
	if err != nil {
		t.Fatal(err)
	}
	testtree.CorruptFile(t, c.BlobPath(rd))
	if found, success, err := c.OutcomeMemoized(c.OpenOutcomeMemo("demo"), "demo", "app.toml", "k"); !found || !success || err != nil {
		t.Errorf("OutcomeMemoized after the record was damaged = %v, %v, %v; want the memo's answer", found, success, err)
	}
	if found, _, err := c.Outcome("demo", "app.toml", "k"); found || err == nil {
		t.Errorf("Outcome of a damaged record = %v, %v; want a CorruptRefError for %s", found, err, refPath)
	}
	if err := os.WriteFile(m.path, []byte("not a memo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if found, _, err := c.OutcomeMemoized(c.OpenOutcomeMemo("demo"), "demo", "app.toml", "k"); found || err == nil {
		t.Errorf("with a damaged memo file = %v, %v; want the record read (and found damaged)", found, err)
	}
}

// Saving keeps the entries of elements this session did not ask about, and only the
// latest key of those it did.
func TestOutcomeMemoKeepsOtherElements(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "app.toml", "k1")
	commitSample(t, c, "demo", "lib.toml", "k1")
	memoize(t, c, "k1", "app.toml", "lib.toml")
	commitSample(t, c, "demo", "app.toml", "k2") // app.toml changed; lib.toml not asked about
	memoize(t, c, "k2", "app.toml")
	if ids, want := memoIDs(c), []string{"app.toml@k2", "lib.toml@k1"}; !slices.Equal(ids, want) {
		t.Errorf("memo entries %v, want %v", ids, want)
	}
}

// memoize asks a fresh memo of demo about the artifacts of elements at key, each of
// which must be cached, and saves it: a session that asked about them.
func memoize(t *testing.T, c *Cache, key string, elements ...string) {
	t.Helper()
	m := c.OpenOutcomeMemo("demo")
	for _, e := range elements {
		if found, _, err := c.OutcomeMemoized(m, "demo", e, key); !found || err != nil {
			t.Fatalf("%s %s: %v, %v", e, key, found, err)
		}
	}
	if err := m.Save(); err != nil {
		t.Fatal(err)
	}
}

// memoIDs lists the entries of demo's memo file as element@key.
func memoIDs(c *Cache) []string {
	var ids []string
	for element, e := range c.OpenOutcomeMemo("demo").old {
		ids = append(ids, element+"@"+e.Key)
	}
	slices.Sort(ids)
	return ids
}

// The memo is bounded by the cache: an entry of an element the session did not ask
// about is dropped when the memo is next written if its artifact is gone (an element
// deleted from the project, its artifact removed by gc or the quota), so memo files
// do not grow with every element a project ever had.
func TestOutcomeMemoForgetsRemovedArtifacts(t *testing.T) {
	c := openTestCache(t)
	for _, e := range []string{"app.toml", "lib.toml", "old.toml"} {
		commitSample(t, c, "demo", e, "k1")
	}
	memoize(t, c, "k1", "app.toml", "lib.toml", "old.toml")
	if err := c.Delete("demo", "old.toml", "k1"); err != nil {
		t.Fatal(err)
	}
	commitSample(t, c, "demo", "app.toml", "k2")
	memoize(t, c, "k2", "app.toml")
	if ids, want := memoIDs(c), []string{"app.toml@k2", "lib.toml@k1"}; !slices.Equal(ids, want) {
		t.Errorf("memo entries %v, want %v (old.toml's artifact is gone)", ids, want)
	}
}

// A memo stats refs through the project's refs directory, opened with the memo. When
// that directory is removed (Delete removes emptied parents) and made again by a
// commit while the memo is open, the ref is found and read again, never answered
// from the removed directory or the memo's identity.
func TestOutcomeMemoRefsDirectoryMadeAgain(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "app.toml", "k")
	m := c.OpenOutcomeMemo("demo")
	m.racy = -time.Hour
	if found, success, err := c.OutcomeMemoized(m, "demo", "app.toml", "k"); !found || !success || err != nil {
		t.Fatalf("first: %v, %v, %v", found, success, err)
	}
	if err := m.Save(); err != nil {
		t.Fatal(err)
	}
	m = c.OpenOutcomeMemo("demo") // holds refs/demo open
	if found, success, err := c.OutcomeMemoized(m, "demo", "app.toml", "k"); !found || !success || err != nil || m.stat.Load() != 1 {
		t.Fatalf("unchanged: %v, %v, %v (from the identity: %d); want success from the identity", found, success, err, m.stat.Load())
	}
	if err := c.Delete("demo", "app.toml", "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.Root, refsDir, "demo")); !os.IsNotExist(err) {
		t.Fatalf("refs/demo after its last artifact was deleted: %v; the test needs it removed", err)
	}
	if found, _, err := c.OutcomeMemoized(m, "demo", "app.toml", "k"); found || err != nil {
		t.Errorf("deleted: found %v, %v; want missing", found, err)
	}
	commitFailed(t, c, "app.toml", "k")
	if found, success, err := c.OutcomeMemoized(m, "demo", "app.toml", "k"); !found || success || err != nil {
		t.Errorf("committed again as a failure: %v, %v, %v; want a failure", found, success, err)
	}
}

// The memo answers from a ref's identity (one stat) only while the ref file is the one
// it read: a ref replaced (a new inode), rewritten in place with the same size and its
// modification time put back (the change time differs), or deleted is read again. A
// ref changed within the racy window of the memo's writing is remembered without its
// identity.
func TestOutcomeMemoStatsRefsItRead(t *testing.T) {
	c := openTestCache(t)
	commitFailed(t, c, "app.toml", "k")
	failedRef, err := os.ReadFile(refPathOf(t, c))
	if err != nil {
		t.Fatal(err)
	}
	// outcome asks with a fresh memo and saves it; stat says whether it answered from the
	// ref's identity.
	outcome := func(racy time.Duration) (got string, stat bool) {
		t.Helper()
		m := c.OpenOutcomeMemo("demo")
		m.racy = racy
		found, success, err := c.OutcomeMemoized(m, "demo", "app.toml", "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Save(); err != nil {
			t.Fatal(err)
		}
		got = map[bool]string{true: "success", false: "failure"}[success]
		if !found {
			got = "missing"
		}
		return got, m.stat.Load() == 1
	}
	check := func(what string, racy time.Duration, want string, wantStat bool) {
		t.Helper()
		if got, stat := outcome(racy); got != want || stat != wantStat {
			t.Errorf("%s: outcome %s (from the identity: %v); want %s (%v)", what, got, stat, want, wantStat)
		}
	}
	check("first", fileid.RacyWindow, "failure", false)
	check("a ref just written (racy)", fileid.RacyWindow, "failure", false)
	check("remembered at last", -time.Hour, "failure", false)
	check("unchanged", -time.Hour, "failure", true)

	commitSample(t, c, "demo", "app.toml", "k") // replaced: built again, successfully
	check("replaced", -time.Hour, "success", false)
	check("unchanged again", -time.Hour, "success", true)

	// The failed record's digest written over the ref in place, its times put back.
	refPath := refPathOf(t, c)
	fi, err := os.Stat(refPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(failedRef) != int(fi.Size()) {
		t.Fatalf("refs of %d and %d bytes: the test needs the same size", len(failedRef), fi.Size())
	}
	f, err := os.OpenFile(refPath, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(failedRef, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(refPath, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	check("rewritten in place, mtime restored", -time.Hour, "failure", false)

	if err := c.Delete("demo", "app.toml", "k"); err != nil {
		t.Fatal(err)
	}
	check("deleted", -time.Hour, "missing", false)
}

func refPathOf(t *testing.T, c *Cache) string {
	t.Helper()
	p, err := c.RefPath("demo", "app.toml", "k")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The memo's codec reads back every field of an entry, and a damaged or truncated file,
// or one of another version, is an error (an empty memo), never a partial one.
func TestOutcomeMemoCodecRoundTrips(t *testing.T) {
	entries := map[string]memoEntry{
		"app.toml": {Key: "k1", Record: "sha256:ab/12", Success: true, Ref: fileid.ID{Size: 1, Mtime: -2, Ctime: 3, Ino: 4, Dev: 5}},
		"lib.toml": {Key: "k2", Record: "sha256:cd/34"},
	}
	data := encodeOutcomeMemo(entries)
	got, err := decodeOutcomeMemo(string(data))
	if err != nil || !reflect.DeepEqual(got, entries) {
		t.Fatalf("decoded %v, %v; want %v", got, err, entries)
	}
	for i := range len(data) {
		if _, err := decodeOutcomeMemo(string(data[:i])); err == nil {
			t.Fatalf("%d of %d bytes decoded without an error", i, len(data))
		}
	}
	other := bytes.Replace(data, []byte(outcomeMemoMagic+"\x04"), []byte(outcomeMemoMagic+"\x03"), 1)
	if _, err := decodeOutcomeMemo(string(other)); err == nil {
		t.Error("a memo of another version decoded without an error")
	}
}
