package cache

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testtree"
)

// commitSample stores a small tree and log and commits an artifact for them.
func commitSample(t testing.TB, c *Cache, project, element, key string) *Artifact {
	t.Helper()
	src := t.TempDir()
	testtree.Write(t, src, map[string]string{
		"usr/bin/" + key: "exec:binary of " + element,
		"usr/share/doc":  "file:docs",
	}, nil)
	files, err := c.StoreTree(src)
	if err != nil {
		t.Fatal(err)
	}
	log, err := c.PutBlob([]byte("building " + element + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	started := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))
	a := &Artifact{
		Project:       project,
		Element:       element,
		Key:           key,
		Success:       true,
		Files:         files,
		Log:           log,
		Dependencies:  map[string]string{"base/sdk.toml": "k1", "lib.toml": "k2"},
		BuildDuration: 90*time.Second + 5*time.Millisecond,
		Started:       started,
		Finished:      started.Add(91 * time.Second),
	}
	if err := c.Commit(a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestCommitLookup(t *testing.T) {
	c := openTestCache(t)
	want := commitSample(t, c, "demo", "base/gcc.toml", "0123abcd")
	got, err := c.Lookup("demo", "base/gcc.toml", "0123abcd")
	if err != nil {
		t.Fatal(err)
	}
	// Times come back in UTC.
	want.Started, want.Finished = want.Started.UTC(), want.Finished.UTC()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Lookup = %+v\nwant %+v", got, want)
	}
	ref := filepath.Join(c.Root, "refs", "demo", "base", "gcc.toml", "0123abcd")
	if p, _ := c.RefPath("demo", "base/gcc.toml", "0123abcd"); p != ref {
		t.Errorf("RefPath = %s, want %s", p, ref)
	}
	data, err := os.ReadFile(ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseDigest(string(data)); err != nil {
		t.Errorf("ref content %q: %v", data, err)
	}
}

func TestCommitFailedArtifact(t *testing.T) {
	c := openTestCache(t)
	a := &Artifact{Project: "demo", Element: "app.toml", Key: "k", Error: "command exited with status 2", BuiltOn: "grpc://127.0.0.1:8980 (worker bot-3)"}
	if err := c.Commit(a); err != nil {
		t.Fatal(err)
	}
	got, err := c.Lookup("demo", "app.toml", "k")
	if err != nil {
		t.Fatal(err)
	}
	if got.Success || got.Error != a.Error || got.Files != DigestOf(nil) || !got.Log.IsZero() || got.BuiltOn != a.BuiltOn {
		t.Errorf("failed artifact read back as %+v", got)
	}
	var n int
	if err := c.WalkTree(got.Files, func(TreeEntry) error { n++; return nil }); err != nil || n != 0 {
		t.Errorf("files of a failed artifact: %d entries, %v", n, err)
	}
}

func TestCommitRefusesIncompleteArtifact(t *testing.T) {
	c := openTestCache(t)
	a := &Artifact{Project: "demo", Element: "app.toml", Key: "k", Success: true, Files: DigestOf([]byte("not stored"))}
	if err := c.Commit(a); err == nil {
		t.Fatal("Commit with a missing files tree succeeded")
	}
	a.Files = Digest{}
	a.Log = DigestOf([]byte("not stored either"))
	if err := c.Commit(a); err == nil {
		t.Fatal("Commit with a missing log succeeded")
	}
	if _, err := c.Lookup("demo", "app.toml", "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("refused artifact is visible: %v", err)
	}
}

func TestLookupMissing(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "app.toml", "k1")
	for _, args := range [][3]string{
		{"demo", "app.toml", "k2"},
		{"demo", "other.toml", "k1"},
		{"other", "app.toml", "k1"},
		{"demo", "app.toml/k1", "x"}, // a ref file where a directory would be
	} {
		_, err := c.Lookup(args[0], args[1], args[2])
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup%q = %v, want ErrNotFound", args, err)
		}
	}
}

// HasRefs is false only for a project of which the cache holds no ref (show then asks
// about none of its artifacts).
func TestHasRefs(t *testing.T) {
	c := openTestCache(t)
	if c.HasRefs("demo") {
		t.Error("a new cache has refs of demo")
	}
	commitSample(t, c, "demo", "base/gcc.toml", "k1")
	if !c.HasRefs("demo") || c.HasRefs("other") {
		t.Errorf("after a commit of demo: HasRefs demo %v, other %v; want true, false", c.HasRefs("demo"), c.HasRefs("other"))
	}
}

func TestLookupRejectsBadNames(t *testing.T) {
	c := openTestCache(t)
	for _, args := range [][3]string{
		{"", "app.toml", "k"}, {"demo", "", "k"}, {"demo", "app.toml", ""},
		{"..", "app.toml", "k"}, {"demo", "../../x", "k"}, {"demo", "a//b", "k"},
		{"demo", "app.toml", "../k"}, {"demo", "/abs", "k"},
	} {
		if _, err := c.Lookup(args[0], args[1], args[2]); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup%q = %v, want an invalid-name error", args, err)
		}
		if err := c.Commit(&Artifact{Project: args[0], Element: args[1], Key: args[2]}); err == nil {
			t.Errorf("Commit%q succeeded", args)
		}
	}
}

// The ref is written last: a record blob without a ref (a crash between the
// two) is not an artifact.
func TestRecordWithoutRefIsNotFound(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "app.toml", "k")
	ref, _ := c.RefPath("demo", "app.toml", "k")
	if err := os.Remove(ref); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup("demo", "app.toml", "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup without ref = %v, want ErrNotFound", err)
	}
	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Refs != 0 {
		t.Errorf("Verify = %+v, want clean with no refs", rep)
	}
}

func TestLookupCorruptRef(t *testing.T) {
	for name, damage := range map[string]func(t *testing.T, c *Cache, ref string){
		"garbage ref": func(t *testing.T, c *Cache, ref string) {
			if err := os.WriteFile(ref, []byte("garbage"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"missing record": func(t *testing.T, c *Cache, ref string) {
			data, _ := os.ReadFile(ref)
			d, _ := ParseDigest(string(data))
			if err := os.Remove(c.BlobPath(d)); err != nil {
				t.Fatal(err)
			}
		},
		"corrupt record": func(t *testing.T, c *Cache, ref string) {
			data, _ := os.ReadFile(ref)
			d, _ := ParseDigest(string(data))
			testtree.CorruptFile(t, c.BlobPath(d))
		},
		"record of another artifact": func(t *testing.T, c *Cache, ref string) {
			other, _ := c.RefPath("demo", "other.toml", "k")
			data, _ := os.ReadFile(other)
			if err := os.WriteFile(ref, data, 0o644); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := openTestCache(t)
			commitSample(t, c, "demo", "app.toml", "k")
			commitSample(t, c, "demo", "other.toml", "k")
			ref, _ := c.RefPath("demo", "app.toml", "k")
			damage(t, c, ref)
			_, err := c.Lookup("demo", "app.toml", "k")
			var cre *CorruptRefError
			if !errors.As(err, &cre) || cre.Ref != ref || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Lookup = %v, want a CorruptRefError for %s", err, ref)
			}
			if msg := err.Error(); !strings.Contains(msg, ref) || !strings.Contains(msg, "gantry cache verify") {
				t.Errorf("error %q should name the ref and suggest gantry cache verify", msg)
			}
			if found, _, err := c.Outcome("demo", "app.toml", "k"); found || !errors.As(err, &cre) || cre.Ref != ref {
				t.Errorf("Outcome = %v, %v; want not found and a CorruptRefError for %s", found, err, ref)
			}
			if rep, err := c.Verify(); err != nil || rep.Clean() {
				t.Errorf("Verify = %+v, %v; want problems", rep, err)
			}
		})
	}
}

func TestListAndDelete(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "base/gcc.toml", "k2")
	commitSample(t, c, "demo", "app.toml", "k1")
	commitSample(t, c, "demo", "base/gcc.toml", "k1")
	commitSample(t, c, "alpha", "x.toml", "k9")

	names := func(arts []*Artifact) []string {
		var out []string
		for _, a := range arts {
			out = append(out, a.Name())
		}
		return out
	}
	all, err := c.List("")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"alpha/x.toml/k9", "demo/app.toml/k1", "demo/base/gcc.toml/k1", "demo/base/gcc.toml/k2"}
	if got := names(all); !reflect.DeepEqual(got, want) {
		t.Errorf("List(\"\") = %q, want %q", got, want)
	}
	demo, err := c.List("demo")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(demo); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("List(demo) = %q, want %q", got, want[1:])
	}
	if none, err := c.List("nothing"); err != nil || len(none) != 0 {
		t.Errorf("List(nothing) = %v, %v", none, err)
	}

	if err := c.Delete("demo", "base/gcc.toml", "k1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete("demo", "base/gcc.toml", "k2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup("demo", "base/gcc.toml", "k1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup after Delete = %v, want ErrNotFound", err)
	}
	if err := c.Delete("demo", "base/gcc.toml", "k1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(filepath.Join(c.Root, "refs", "demo", "base")); !os.IsNotExist(err) {
		t.Errorf("emptied ref directory left behind: %v", err)
	}
	demo, err = c.List("demo")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(demo); !reflect.DeepEqual(got, want[1:2]) {
		t.Errorf("List after Delete = %q, want %q", got, want[1:2])
	}
	// Committing again after the directories were removed works.
	commitSample(t, c, "demo", "base/gcc.toml", "k3")
	if rep, err := c.Verify(); err != nil || !rep.Clean() {
		t.Errorf("Verify after Delete = %+v, %v", rep, err)
	}
}

func TestListReportsCorruptRefs(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "a.toml", "k")
	commitSample(t, c, "demo", "b.toml", "k")
	ref, _ := c.RefPath("demo", "a.toml", "k")
	if err := os.WriteFile(ref, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	arts, err := c.List("demo")
	if err == nil || !strings.Contains(err.Error(), ref) {
		t.Errorf("List error = %v, want one naming %s", err, ref)
	}
	if len(arts) != 1 || arts[0].Element != "b.toml" {
		t.Errorf("List returned %v, want the readable artifact", arts)
	}
}

// A successful artifact with a weak key is found by it: the latest one committed; a
// failed build, an artifact deleted since, or a weak ref that names an artifact without
// that weak key is not found. A cleanup prunes the weak refs of artifacts gone.
func TestLookupWeak(t *testing.T) {
	c := openTestCache(t)
	commit := func(key, weak string, success bool) {
		t.Helper()
		a := &Artifact{Project: "demo", Element: "app.toml", Key: key, WeakKey: weak, Success: success}
		if err := c.Commit(a); err != nil {
			t.Fatal(err)
		}
	}
	found := func(weak string) string {
		t.Helper()
		a, err := c.LookupWeak("demo", "app.toml", weak)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("LookupWeak(%s): %v, want ErrNotFound", weak, err)
			}
			return ""
		}
		return a.Key
	}
	if got := found("w1"); got != "" {
		t.Fatalf("empty cache: found %s", got)
	}
	commit("k1", "w1", true)
	if got := found("w1"); got != "k1" {
		t.Fatalf("found %q, want k1", got)
	}
	commit("k2", "w1", false) // a failed build leaves the weak ref
	if got := found("w1"); got != "k1" {
		t.Fatalf("after a failed build: found %q, want k1", got)
	}
	commit("k3", "w1", true)
	if got := found("w1"); got != "k3" {
		t.Fatalf("found %q, want the latest, k3", got)
	}
	if err := c.Delete("demo", "app.toml", "k3"); err != nil {
		t.Fatal(err)
	}
	if got := found("w1"); got != "" {
		t.Fatalf("artifact deleted: found %q", got)
	}
	commit("k3", "w2", true) // the weak ref w1 names k3, which now has another weak key
	if got := found("w1"); got != "" {
		t.Fatalf("found %q by a weak key it no longer has", got)
	}
	if got := found("w2"); got != "k3" {
		t.Fatalf("found %q, want k3", got)
	}
	// A cleanup prunes the weak refs whose artifact is gone, and only those.
	commit("k4", "w4", true)
	if err := c.Delete("demo", "app.toml", "k3"); err != nil {
		t.Fatal(err)
	}
	if err := c.pruneWeakRefs(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w1", "w2"} {
		p, _ := c.weakRefPath("demo", "app.toml", w)
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pruneWeakRefs left weak ref %s, whose artifact is gone: %v", w, err)
		}
	}
	if got := found("w4"); got != "k4" {
		t.Fatalf("pruneWeakRefs removed a live weak ref: found %q", got)
	}
	if _, err := c.LookupWeak("demo", "app.toml", "../x"); err == nil || !strings.Contains(err.Error(), `invalid cache key "../x"`) {
		t.Fatalf("bad weak key: %v", err)
	}
}

// A weak ref is a second name of its artifact's ref, in one directory per project: writing
// it makes no new inode, and no directory per element. A weak ref of a cache written
// before (weak/<project>/<element>/<weak key>, holding the key) is still found, and
// pruned once its artifact is gone.
func TestWeakRefIsALinkOfTheRef(t *testing.T) {
	c := openTestCache(t)
	for _, el := range []string{"app.toml", "sub/lib.toml"} {
		a := &Artifact{Project: "demo", Element: el, Key: "k1", WeakKey: "w1", Success: true}
		if err := c.Commit(a); err != nil {
			t.Fatal(err)
		}
		ref, _ := c.RefPath("demo", el, "k1")
		weak, _ := c.weakRefPath("demo", el, "w1")
		ri, err := os.Stat(ref)
		if err != nil {
			t.Fatal(err)
		}
		wi, err := os.Stat(weak)
		if err != nil {
			t.Fatalf("no weak ref for %s: %v", el, err)
		}
		if !os.SameFile(ri, wi) {
			t.Errorf("the weak ref of %s is a file of its own, not a link of its ref", el)
		}
		if filepath.Dir(weak) != filepath.Join(c.Root, "weak", "demo") {
			t.Errorf("weak ref of %s at %s, want it in weak/demo/", el, weak)
		}
		if got, err := c.LookupWeak("demo", el, "w1"); err != nil || got.Key != "k1" || got.Element != el {
			t.Errorf("LookupWeak(%s) = %+v, %v; want k1", el, got, err)
		}
	}
	if _, err := c.LookupWeak("demo", "other.toml", "w1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an element of the same weak key but another name: %v, want ErrNotFound", err)
	}

	// A cache written before.
	if err := c.Commit(&Artifact{Project: "demo", Element: "old.toml", Key: "k2", WeakKey: "w2", Success: true}); err != nil {
		t.Fatal(err)
	}
	p, _ := c.weakRefPath("demo", "old.toml", "w2")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	old := c.oldWeakRefPath("demo", "old.toml", "w2")
	if err := os.MkdirAll(filepath.Dir(old), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("k2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := c.LookupWeak("demo", "old.toml", "w2"); err != nil || got.Key != "k2" {
		t.Fatalf("LookupWeak through an old weak ref = %+v, %v; want k2", got, err)
	}
	if err := c.pruneWeakRefs(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("pruneWeakRefs removed a live old weak ref: %v", err)
	}
	if err := c.Delete("demo", "old.toml", "k2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete("demo", "app.toml", "k1"); err != nil {
		t.Fatal(err)
	}
	if err := c.pruneWeakRefs(); err != nil {
		t.Fatal(err)
	}
	gone, _ := c.weakRefPath("demo", "app.toml", "w1")
	for _, p := range []string{old, gone} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pruneWeakRefs left %s, whose artifact is gone: %v", p, err)
		}
	}
	if got, err := c.LookupWeak("demo", "sub/lib.toml", "w1"); err != nil || got.Key != "k1" {
		t.Errorf("pruneWeakRefs removed a live weak ref: %+v, %v", got, err)
	}
}
