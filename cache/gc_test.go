package cache

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testtree"
)

// commitSized commits a successful artifact of element holding one file of n bytes
// (content derived from name) and a file shared by every artifact, last used at used.
func commitSized(t *testing.T, c *Cache, element string, n int, used time.Time) ArtifactRef {
	t.Helper()
	dir := t.TempDir()
	testtree.Write(t, dir, map[string]string{
		"own":    "file:" + strings.Repeat(element, n/len(element)+1)[:n],
		"shared": "file:the same in every artifact",
	}, nil)
	files, err := c.StoreTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref := ArtifactRef{Project: "p", Element: element, Key: "k-" + strings.TrimSuffix(element, ".toml")}
	if err := c.Commit(&Artifact{Project: ref.Project, Element: ref.Element, Key: ref.Key, Success: true, Files: files}); err != nil {
		t.Fatal(err)
	}
	p, _ := c.RefPath(ref.Project, ref.Element, ref.Key)
	if err := os.Chtimes(p, used, used); err != nil {
		t.Fatal(err)
	}
	return ref
}

func cached(c *Cache, r ArtifactRef) bool {
	_, err := c.Lookup(r.Project, r.Element, r.Key)
	return err == nil
}

// Cleanup removes the least recently used artifacts first until the target is met,
// never a protected one, then every blob nothing reaches; the cache stays verifiable.
func TestCleanupLRU(t *testing.T) {
	c := openTestCache(t)
	now := time.Now()
	oldest := commitSized(t, c, "a.toml", 64<<10, now.Add(-4*time.Hour))
	protected := commitSized(t, c, "b.toml", 64<<10, now.Add(-3*time.Hour))
	middle := commitSized(t, c, "c.toml", 64<<10, now.Add(-2*time.Hour))
	newest := commitSized(t, c, "d.toml", 64<<10, now.Add(-time.Hour))
	orphan, err := c.PutBlob([]byte("nothing refers to me"))
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.Usage()
	if err != nil {
		t.Fatal(err)
	}
	// Freeing two artifacts' own files (64K each) reaches the target; b is older than
	// c but protected, so a and c go.
	target := before - 100<<10
	rep, err := c.Cleanup(CleanupOptions{Target: target, Protect: func(r ArtifactRef) bool { return r == protected }})
	if err != nil {
		t.Fatal(err)
	}
	if cached(c, oldest) || cached(c, middle) || !cached(c, protected) || !cached(c, newest) {
		t.Fatalf("after cleanup: a=%v b=%v c=%v d=%v, want only b and d", cached(c, oldest), cached(c, protected), cached(c, middle), cached(c, newest))
	}
	if len(rep.Artifacts) != 2 || rep.Artifacts[0].ArtifactRef != oldest || rep.Protected != 1 || rep.Short {
		t.Fatalf("report %+v", rep)
	}
	if c.HasBlob(orphan) {
		t.Fatal("the unreferenced blob survived the cleanup")
	}
	after, err := c.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if after > target {
		t.Fatalf("usage %d after cleanup, want at most %d", after, target)
	}
	vr, err := c.Verify()
	if err != nil || !vr.Clean() {
		t.Fatalf("verify after cleanup: %v %v", err, vr.Problems)
	}
	// The shared file is still there for b and d.
	for _, r := range []ArtifactRef{protected, newest} {
		a, _ := c.Lookup(r.Project, r.Element, r.Key)
		if err := c.Checkout(a.Files, t.TempDir(), CheckoutOptions{}); err != nil {
			t.Fatalf("checkout of %s after cleanup: %v", r, err)
		}
	}
}

// A dry run says what would go and removes nothing; a target below what is protected
// is reported as not reached.
func TestCleanupDryRunAndShort(t *testing.T) {
	c := openTestCache(t)
	a := commitSized(t, c, "a.toml", 32<<10, time.Now().Add(-time.Hour))
	b := commitSized(t, c, "b.toml", 32<<10, time.Now())
	rep, err := c.Cleanup(CleanupOptions{Target: 1, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !cached(c, a) || !cached(c, b) || len(rep.Artifacts) != 2 || rep.Freed <= 64<<10 {
		t.Fatalf("dry run removed something or reported %+v", rep)
	}
	rep, err = c.Cleanup(CleanupOptions{Target: 1, Protect: func(r ArtifactRef) bool { return r == b }})
	if err != nil {
		t.Fatal(err)
	}
	if cached(c, a) || !cached(c, b) || !rep.Short {
		t.Fatalf("report %+v; a cached %v, b cached %v", rep, cached(c, a), cached(c, b))
	}
}

// OlderThan removes artifacts unused for that long; Touch counts as a use.
func TestCleanupOlderThanAndTouch(t *testing.T) {
	c := openTestCache(t)
	old := commitSized(t, c, "old.toml", 100, time.Now().Add(-10*24*time.Hour))
	used := commitSized(t, c, "used.toml", 100, time.Now().Add(-10*24*time.Hour))
	if err := c.Touch(used.Project, used.Element, used.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cleanup(CleanupOptions{OlderThan: 7 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if cached(c, old) || !cached(c, used) {
		t.Fatalf("old cached %v, used cached %v: want only the touched one", cached(c, old), cached(c, used))
	}
}

// Removing one artifact by name frees what only it used, not what others share.
func TestCleanupRemoveFreesOwnBlobs(t *testing.T) {
	c := openTestCache(t)
	a := commitSized(t, c, "a.toml", 10<<10, time.Now())
	b := commitSized(t, c, "b.toml", 10<<10, time.Now())
	blobs := countBlobs(t, c)
	rep, err := c.Cleanup(CleanupOptions{Remove: []ArtifactRef{a}})
	if err != nil {
		t.Fatal(err)
	}
	// a's record, root Directory and own file go; the shared file stays for b.
	if got := countBlobs(t, c); got != blobs-3 || rep.Blobs != 3 || cached(c, a) || !cached(c, b) {
		t.Fatalf("blobs %d -> %d, report %+v", blobs, got, rep)
	}
}

// Leftovers: tmp/ entries of dead processes go, a live process's stay.
func TestCleanupLeftovers(t *testing.T) {
	c := openTestCache(t)
	dead := filepath.Join(c.tmpPath(), fmt.Sprintf("%d-build-1", deadPID(t)))
	live, err := c.TempDir("build-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dead, 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Cleanup(CleanupOptions{Leftovers: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); err == nil || len(rep.Leftovers) != 1 {
		t.Fatalf("the dead process's work dir survived: %+v", rep)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("our own work dir was removed: %v", err)
	}
}

// Repair drops refs whose blobs are missing or corrupt and removes corrupt blobs;
// the cache is clean afterwards and the healthy artifact untouched.
func TestRepair(t *testing.T) {
	c := openTestCache(t)
	broken := commitSized(t, c, "broken.toml", 100, time.Now())
	healthy := commitSized(t, c, "healthy.toml", 100, time.Now())
	a, _ := c.Lookup(broken.Project, broken.Element, broken.Key)
	dir, err := c.ReadDirectory(a.Files)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range dir.Files {
		if f.Name == "own" {
			testtree.CorruptFile(t, c.BlobPath(DigestFromProto(f.Digest)))
		}
	}
	rep, err := c.Verify()
	if err != nil || rep.Clean() {
		t.Fatalf("verify found nothing: %v", err)
	}
	done, err := c.Repair(rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 2 || !strings.HasPrefix(done[0], "dropped artifact p/broken.toml/") || !strings.HasPrefix(done[1], "removed corrupt blob") {
		t.Fatalf("repairs %q", done)
	}
	if rep, err := c.Verify(); err != nil || !rep.Clean() {
		t.Fatalf("verify after repair: %v %v", err, rep.Problems)
	}
	if cached(c, broken) || !cached(c, healthy) {
		t.Fatal("repair dropped the wrong artifact")
	}
}

// The lock: exclusive excludes shared and the other way round; a waiting exclusive
// locker keeps new shared lockers out (no starvation) and says it waits; closing the
// descriptor (as the kernel does for a dead process) releases it.
func TestLockSharedExclusive(t *testing.T) {
	c := openTestCache(t)
	ctx := context.Background()
	s1, err := c.Lock(ctx, Shared, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := c.TryLock(Exclusive); l != nil {
		t.Fatal("exclusive lock taken while a shared one is held")
	}
	waiting := make(chan string, 1)
	got := make(chan *Lock)
	go func() {
		l, err := c.Lock(ctx, Exclusive, func(msg string) { waiting <- msg })
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case msg := <-waiting:
		if !strings.Contains(msg, "waiting for the cache lock (exclusive)") {
			t.Fatalf("waiting message %q", msg)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exclusive locker did not say it waits")
	}
	// A new shared locker now waits behind the exclusive one.
	sharedWaits := make(chan string, 1)
	shared := make(chan *Lock)
	go func() {
		l, _ := c.Lock(ctx, Shared, func(msg string) { sharedWaits <- msg })
		shared <- l
	}()
	select {
	case <-sharedWaits:
	case <-shared:
		t.Fatal("a shared lock was taken while an exclusive locker waited")
	case <-time.After(5 * time.Second):
		t.Fatal("the shared locker neither waited nor got the lock")
	}
	s1.Unlock()
	ex := <-got
	select {
	case <-shared:
		t.Fatal("shared lock taken while the exclusive one is held")
	default:
	}
	ex.Unlock()
	(<-shared).Unlock()
	if l, _ := c.TryLock(Exclusive); l == nil {
		t.Fatal("lock still held after every holder released it")
	} else {
		l.Unlock()
	}
}

// A lock wait ends with the context.
func TestLockCancel(t *testing.T) {
	c := openTestCache(t)
	ex, err := c.Lock(context.Background(), Exclusive, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Lock(ctx, Shared, nil); err == nil {
		t.Fatal("a cancelled wait took the lock")
	}
}

// While a ref cannot be read (damaged, or from a newer gantry), the blobs it may reach
// look unreferenced: cleanup leaves them alone and says why.
func TestCleanupKeepsOrphansBesideUnreadableRefs(t *testing.T) {
	c := openTestCache(t)
	orphan, err := c.PutBlob([]byte("perhaps reached by the unreadable ref"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.RefPath("p", "future.toml", "k")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	missing := DigestOf([]byte("a record this cache does not have"))
	if err := os.WriteFile(p, []byte(missing.String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Cleanup(CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.HasBlob(orphan) || len(rep.Problems) != 1 || rep.Blobs != 0 {
		t.Fatalf("report %+v; orphan kept: %v", rep, c.HasBlob(orphan))
	}
}

// A cleanup's arithmetic holds: what it says it freed is part of what the cache took
// before, and what it says is left is what the cache takes after it, also when a
// leftover of a dead session holds hard links to blobs that stay (a build root staged
// with links), which free nothing.
func TestCleanupArithmeticWithLinkedLeftovers(t *testing.T) {
	c := openTestCache(t)
	const n = 64 << 10
	commitSized(t, c, "a.toml", n, time.Now())
	own := strings.Repeat("a.toml", n/len("a.toml")+1)[:n]
	blob := c.blobPathOf(fmt.Sprintf("%x", sha256.Sum256([]byte(own))))
	// A dead session's build root: a sysroot of links to the artifact's blobs,
	// and an install root of its own.
	left := filepath.Join(c.Root, tmpDir, "999999999.dead-build-x")
	for _, d := range []string{"sysroot", "install"} {
		if err := os.MkdirAll(filepath.Join(left, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 8 {
		if err := os.Link(blob, filepath.Join(left, "sysroot", fmt.Sprint("own", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(left, "install", "out"), make([]byte, 8<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Cleanup(CleanupOptions{Leftovers: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leftovers) != 1 || len(rep.Artifacts) != 0 {
		t.Fatalf("removed %d artifacts and leftovers %v, want the one leftover only", len(rep.Artifacts), rep.Leftovers)
	}
	after, err := c.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Freed <= 0 || rep.Freed > rep.Before || rep.After != rep.Before-rep.Freed || rep.After != after {
		t.Fatalf("cleanup says %d freed, %d → %d; the cache takes %d after it", rep.Freed, rep.Before, rep.After, after)
	}
	if _, err := os.Stat(blob); err != nil {
		t.Fatalf("the linked blob went with the leftover: %v", err)
	}
}
