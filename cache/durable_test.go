package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/internal/testtree"
)

// TestRefNeverOutlivesItsBlobs simulates a power loss after every step of several
// commits: what survives is every ref written and every blob written before the last
// syncfs (blobs are not fsynced one by one), whether stored as copies or moved in. No surviving ref may reach a blob that
// did not survive: the record, every directory and file of its tree, its log.
func TestRefNeverOutlivesItsBlobs(t *testing.T) {
	c := openTestCache(t)
	type event struct{ kind, path string }
	var mu sync.Mutex // StoreTree stores files from several goroutines
	var events []event
	c.trace = func(kind, path string) {
		mu.Lock()
		events = append(events, event{kind, path})
		mu.Unlock()
	}
	src := t.TempDir()
	reaches := map[string][]string{} // ref path -> the blob paths it reaches
	for i := range 4 {
		dir := filepath.Join(src, fmt.Sprint(i))
		spec := map[string]string{}
		for j := range 12 {
			// Some content is shared with the previous artifact: found present, not rewritten.
			spec[fmt.Sprintf("d%d/f%d", j%3, j)] = fmt.Sprintf("file:content %d %d", (i+j%2)/2*2, j)
		}
		// Odd builds are install roots under tmp/, moved in (TakeTree).
		store := c.StoreTree
		if i%2 == 1 {
			var err error
			if dir, err = c.TempDir("install"); err != nil {
				t.Fatal(err)
			}
			store = c.TakeTree
		}
		testtree.Write(t, dir, spec, nil)
		files, err := store(dir)
		if err != nil {
			t.Fatal(err)
		}
		log, err := c.PutBlob([]byte(fmt.Sprintf("log of build %d\n", i)))
		if err != nil {
			t.Fatal(err)
		}
		a := &Artifact{Project: "demo", Element: "app.toml", Key: fmt.Sprint("k", i), Success: true, Files: files, Log: log}
		if err := c.Commit(a); err != nil {
			t.Fatal(err)
		}
		ref, err := c.RefPath(a.Project, a.Element, a.Key)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(ref)
		if err != nil {
			t.Fatal(err)
		}
		record, err := ParseDigest(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		blobs := []string{c.BlobPath(record), c.BlobPath(files), c.BlobPath(log)}
		err = c.WalkTree(files, func(e TreeEntry) error {
			if e.Type != TypeSymlink {
				blobs = append(blobs, c.BlobPath(e.Digest))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		reaches[ref] = blobs
	}

	durable := map[string]bool{}
	var pending []string
	refs := 0
	for _, e := range events {
		switch e.kind {
		case eventBlob:
			pending = append(pending, e.path)
		case eventSync:
			for _, p := range pending {
				durable[p] = true
			}
			pending = nil
		case eventRef:
			refs++
			for _, p := range reaches[e.path] {
				if !durable[p] {
					t.Errorf("a crash right after ref %s was written would lose blob %s that it reaches", e.path, p)
				}
			}
		}
	}
	if refs != len(reaches) {
		t.Errorf("%d refs written, want %d", refs, len(reaches))
	}
}

// TestAttachLeavesTemp: a job attaches to its session's cache without scanning tmp/
// (its start-up cost must not grow with tmp/); Open is what cleans it.
func TestAttachLeavesTemp(t *testing.T) {
	c := openTestCache(t)
	stray := filepath.Join(c.tmpPath(), fmt.Sprintf("%d-build-x", deadPID(t)))
	if err := os.Mkdir(stray, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * staleTempAge)
	if err := os.Chtimes(stray, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(c.Root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Errorf("Attach touched tmp/: %v", err)
	}
	if _, err := Open(c.Root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); err == nil {
		t.Error("Open left a stray tmp/ entry of a dead process older than an hour")
	}
	if _, err := Attach(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "no tmp/ directory") {
		t.Errorf("Attach to a directory that is no cache: %v, want an error saying so", err)
	}
}

// TestVolatileImportDurableBeforeRef: a blob received without an fsync of its
// own (a pull's, CommitVolatile) is in place at once and made durable by the
// Commit of the artifact naming it, before that artifact's ref.
func TestVolatileImportDurableBeforeRef(t *testing.T) {
	c := openTestCache(t)
	var events []string
	c.trace = func(kind, path string) { events = append(events, kind+" "+path) }
	data := []byte("a pulled file\n")
	d := DigestOf(data)
	u, err := c.StartBlobImport(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := u.CommitVolatile(); err != nil {
		t.Fatal(err)
	}
	if !c.HasBlob(d) {
		t.Fatalf("blob %s not in place after CommitVolatile", d)
	}
	dir := &repb.Directory{Files: []*repb.FileNode{{Name: "f", Digest: d.Proto()}}}
	root, err := c.PutDirectory(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := &Artifact{Project: "demo", Element: "app.toml", Key: "k", Success: true, Files: root}
	if err := c.Commit(a); err != nil {
		t.Fatal(err)
	}
	blob, synced := -1, -1
	for i, e := range events {
		switch {
		case e == eventBlob+" "+c.BlobPath(d):
			blob = i
		case strings.HasPrefix(e, eventSync+" ") && blob >= 0 && synced < 0:
			synced = i
		case strings.HasPrefix(e, eventRef+" "):
			if blob < 0 || synced < 0 {
				t.Fatalf("ref written before the imported blob was made durable: events %q", events)
			}
			return
		}
	}
	t.Fatalf("no ref written: events %q", events)
}
