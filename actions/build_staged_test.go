package actions

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
)

// commitDep commits a successful artifact of element holding one file.
func commitDep(t *testing.T, c *cache.Cache, element, key, content string) *cache.Artifact {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := c.StoreTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := &cache.Artifact{Project: "p", Element: element, Key: key, Success: true, Files: files}
	if err := c.Commit(a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestStagingFromDigests: the planning process fills a build spec with each
// dependency's digests, looking each artifact up once per session; the job
// stages from them without reading the records again (here, a record blob
// removed after planning is never missed), falls back to the cache when a ref
// names another record since, and still finds a damaged file blob and takes the
// heal path.
func TestStagingFromDigests(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := commitDep(t, c, "base.toml", "k1", "base")
	lib := commitDep(t, c, "lib.toml", "k2", "lib")
	spec := &buildSpec{Project: "p", Element: "app.toml", Stage: []stagedArtifact{{Element: "base.toml", Key: "k1"}, {Element: "lib.toml", Key: "k2"}}}
	var staged stagedDigests
	staged.Fill(c, spec)
	for i, want := range []*cache.Artifact{base, lib} {
		if s := spec.Stage[i]; s.Record != want.Record || s.Files != want.Files {
			t.Fatalf("Fill gave %s %+v, want record %s files %s", s.Element, s, want.Record, want.Files)
		}
	}

	// The records are not read again: not by the next spec's Fill, not by the job.
	for _, a := range []*cache.Artifact{base, lib} {
		if err := os.Remove(c.BlobPath(a.Record)); err != nil {
			t.Fatal(err)
		}
	}
	again := &buildSpec{Project: "p", Element: "other.toml", Stage: []stagedArtifact{{Element: "base.toml", Key: "k1"}}}
	staged.Fill(c, again)
	if again.Stage[0].Files != base.Files {
		t.Errorf("a second spec staging base got %+v, want its files %s from the first lookup", again.Stage[0], base.Files)
	}
	deps, err := lookupDependencies(c, spec)
	if err != nil {
		t.Fatalf("staging from digests read the records: %v", err)
	}
	if deps[0].Files != base.Files || deps[1].Files != lib.Files {
		t.Errorf("lookupDependencies = %s, %s; want %s, %s", deps[0].Files, deps[1].Files, base.Files, lib.Files)
	}

	// lib is built again (a heal, a retry): its ref names another record, which the
	// job reads instead of the stale digests.
	lib2 := commitDep(t, c, "lib.toml", "k2", "lib, rebuilt")
	deps, err = lookupDependencies(c, spec)
	if err != nil {
		t.Fatal(err)
	}
	if deps[1].Files != lib2.Files {
		t.Errorf("staged lib's files %s from stale digests, want the current artifact's %s", deps[1].Files, lib2.Files)
	}

	// A damaged file blob is still found while staging: the heal path.
	if err := os.Remove(c.BlobPath(cache.DigestOf([]byte("base")))); err != nil {
		t.Fatal(err)
	}
	err = c.Checkout(deps[0].Files, t.TempDir(), cache.CheckoutOptions{})
	var blob *cache.BlobError
	if !errors.As(err, &blob) || !blob.Missing {
		t.Errorf("staging base with its file blob missing = %v, want a missing *cache.BlobError (the heal path)", err)
	}
}

// BenchmarkLookupDependencies is a job finding the 50 artifacts it stages:
// "lookup" reads, hashes and decodes each record (as jobs did before digests were passed), "digests"
// checks each ref against the digests in its spec.
func BenchmarkLookupDependencies(b *testing.B) {
	c, err := cache.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("content"), 0o644); err != nil {
		b.Fatal(err)
	}
	files, err := c.StoreTree(dir)
	if err != nil {
		b.Fatal(err)
	}
	spec := &buildSpec{Project: "p", Element: "app.toml"}
	for i := range 50 {
		name := fmt.Sprintf("dep%02d.toml", i)
		a := &cache.Artifact{Project: "p", Element: name, Key: "k", Success: true, Files: files,
			Dependencies: map[string]string{"base.toml": "k0", "lib.toml": "k1"}}
		if err := c.Commit(a); err != nil {
			b.Fatal(err)
		}
		spec.Stage = append(spec.Stage, stagedArtifact{Element: name, Key: "k"})
	}
	withDigests := *spec
	withDigests.Stage = slices.Clone(spec.Stage)
	var staged stagedDigests
	staged.Fill(c, &withDigests)
	for _, s := range []*buildSpec{spec, &withDigests} {
		name := map[bool]string{true: "lookup", false: "digests"}[s == spec]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := lookupDependencies(c, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStageNoOpDependencies stages 40 dependencies whose artifacts are empty
// trees, as most builds of a generated no-op graph do, into a fresh sysroot: the
// job's Cache reading every Directory blob again ("read each time") or once
// (RememberDirectories, what a build job does).
func BenchmarkStageNoOpDependencies(b *testing.B) {
	c, err := cache.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	spec := &buildSpec{Project: "p", Element: "app.toml", Kind: "manual", Sandbox: "auto"}
	for i := range 40 {
		name := fmt.Sprintf("dep%02d.toml", i)
		if err := c.Commit(&cache.Artifact{Project: "p", Element: name, Key: "k", Success: true}); err != nil {
			b.Fatal(err)
		}
		spec.Stage = append(spec.Stage, stagedArtifact{Element: name, Key: "k"})
	}
	var staged stagedDigests
	staged.Fill(c, spec)
	for _, remember := range []bool{false, true} {
		b.Run(map[bool]string{false: "read each time", true: "remember"}[remember], func(b *testing.B) {
			for b.Loop() {
				jc, err := cache.Attach(c.Root)
				if err != nil {
					b.Fatal(err)
				}
				if remember {
					jc.RememberDirectories()
				}
				deps, err := lookupDependencies(jc, spec)
				if err != nil {
					b.Fatal(err)
				}
				// What stageDependencies does, without a job's reporter.
				links, sysroot := stageLinks(jc, spec, deps), b.TempDir()
				for _, a := range deps {
					if err := jc.Checkout(a.Files, sysroot, cache.CheckoutOptions{Hardlink: links}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// TestStagingWhatABuildMadeAvailable: a build job says its artifact's files are in
// the cache before it writes the ref (Built); the session passes them to the builds
// that stage it, which stage those files with no ref to look up yet. What cannot be
// read is ignored: the job then looks the artifact up as before.
func TestStagingWhatABuildMadeAvailable(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("lib"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := c.StoreTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	var staged stagedDigests
	staged.Built("p", "lib.toml", "k2", Built{Files: files}.encode())
	staged.Built("p", "bad.toml", "k3", []byte(`{"files": 3}`))
	spec := &buildSpec{Project: "p", Element: "app.toml", Stage: []stagedArtifact{{Element: "lib.toml", Key: "k2"}}}
	staged.Fill(c, spec)
	if s := spec.Stage[0]; !s.Pending || s.Files != files {
		t.Fatalf("Fill gave %+v, want lib's files %s, pending", s, files)
	}
	deps, err := lookupDependencies(c, spec)
	if err != nil {
		t.Fatalf("staging a dependency whose ref is not written yet: %v", err)
	}
	if deps[0].Files != files || !deps[0].Success {
		t.Errorf("lookupDependencies = %+v, want lib's files %s", deps[0], files)
	}
	if err := c.Checkout(deps[0].Files, t.TempDir(), cache.CheckoutOptions{}); err != nil {
		t.Errorf("checking lib's files out: %v", err)
	}

	bad := &buildSpec{Project: "p", Element: "app.toml", Stage: []stagedArtifact{{Element: "bad.toml", Key: "k3"}}}
	staged.Fill(c, bad)
	if s := bad.Stage[0]; s.Pending || !s.Files.IsZero() {
		t.Errorf("Fill after unreadable Built data gave %+v, want nothing known", s)
	}
	if _, err := lookupDependencies(c, bad); !errors.Is(err, cache.ErrNotFound) {
		t.Errorf("staging bad.toml with nothing known and no ref = %v, want not found", err)
	}
}

// A dependency whose artifact is gone since the session planned with it (a cleanup
// in another process removed it) takes the heal path, not the element's failure: a
// *DamagedDependencyError naming it, with the cache's count of cleanups that removed
// something, by which the scheduler tells a race from a fault that would repeat.
func TestStagingAVanishedDependencyHeals(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lib := commitDep(t, c, "lib.toml", "k2", "lib")
	spec := &buildSpec{Project: "p", Element: "app.toml", Stage: []stagedArtifact{{Element: "lib.toml", Key: "k2"}}}
	var staged stagedDigests
	staged.Fill(c, spec)
	if _, err := c.Cleanup(cache.CleanupOptions{Remove: []cache.ArtifactRef{{Project: "p", Element: "lib.toml", Key: lib.Key}}}); err != nil {
		t.Fatal(err)
	}
	_, err = lookupDependencies(c, spec)
	var damaged *DamagedDependencyError
	if !errors.As(err, &damaged) || damaged.Element != "lib.toml" || damaged.Removals != 1 {
		t.Fatalf("staging lib.toml removed by a cleanup = %v, want a DamagedDependencyError for lib.toml after 1 removal", err)
	}
}

// TestStagedTouchedOncePerSession: the first build of a session that stages an
// artifact records its use (its ref's time, cleanup's LRU order); the session's later
// builds that stage it do not touch it again. An artifact the session could not look
// up is touched by every job, as before, until a lookup finds it.
func TestStagedTouchedOncePerSession(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	commitDep(t, c, "base.toml", "k1", "base")
	ref, err := c.RefPath("p", "base.toml", "k1")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	aged := func() {
		t.Helper()
		if err := os.Chtimes(ref, old, old); err != nil {
			t.Fatal(err)
		}
	}
	touched := func() bool {
		t.Helper()
		fi, err := os.Stat(ref)
		if err != nil {
			t.Fatal(err)
		}
		return !fi.ModTime().Equal(old)
	}
	var staged stagedDigests
	specs := make([]*buildSpec, 3)
	for i := range specs {
		specs[i] = &buildSpec{Project: "p", Element: fmt.Sprintf("app%d.toml", i),
			Stage: []stagedArtifact{{Element: "base.toml", Key: "k1"}, {Element: "gone.toml", Key: "k9"}}}
		staged.Fill(c, specs[i])
	}
	for i, spec := range specs {
		aged()
		touchStaged(c, spec)
		if got, want := touched(), i == 0; got != want {
			t.Errorf("build %d of the session: base touched = %t, want %t", i, got, want)
		}
		if !spec.Stage[1].Touch {
			t.Errorf("build %d of the session: an artifact not found at planning is not touched by its job", i)
		}
	}
}
