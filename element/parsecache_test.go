package element

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/fileid"
)

// cachedKeys loads app.toml from dir through a parse cache kept in cacheDir, saves it,
// and returns the keys and how many element files the cache answered for.
func cachedKeys(t *testing.T, dir, cacheDir string) (map[string]string, int64) {
	t.Helper()
	g, pc, err := loadThroughCache(dir, cacheDir, "app.toml")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for name, e := range g.Elements {
		keys[name] = e.Key
	}
	return keys, pc.hits.Load()
}

// loadThroughCache loads targets from dir through a parse cache kept in cacheDir that
// remembers files however fresh (these tests edit at once), and saves it.
func loadThroughCache(dir, cacheDir string, targets ...string) (*Graph, *ParseCache, error) {
	p, err := loadProject(dir)
	if err != nil {
		return nil, nil, err
	}
	lock, err := LoadLock(dir)
	if err != nil {
		return nil, nil, err
	}
	pc := OpenParseCache(cacheDir, dir)
	pc.racy = -time.Hour
	g, err := LoadCached(p, lock, targets, pc)
	if err != nil {
		return nil, pc, err
	}
	return g, pc, pc.Save()
}

// An element whose key memo was made under the project's current settings is not
// resolved while it loads (keyMemo.Context); settings that changed since make it
// resolve again, so that a variable it uses and the project no longer defines is the
// load's error, as without the cache. Its config, when asked for (the key's input),
// is the one a load without the cache resolves.
func TestParseCacheResolvesWhenSettingsChange(t *testing.T) {
	files := with(with(baseFiles, "project.toml", replace(baseFiles["project.toml"], `prefix = "/usr"`, "prefix = \"/usr\"\nflags = \"-g\"")),
		"elements/lib.toml", replace(baseFiles["elements/lib.toml"], "PREFIX=%{prefix}", "PREFIX=%{prefix} FLAGS=%{flags}"))
	dir := writeProject(t, files)
	cacheDir := t.TempDir()
	if _, _, err := loadThroughCache(dir, cacheDir, "app.toml"); err != nil {
		t.Fatal(err)
	}
	g, pc, err := loadThroughCache(dir, cacheDir, "app.toml")
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(len(g.Elements)); pc.keys.Load() != n {
		t.Fatalf("%d keys reused of %d: the test needs the memo", pc.keys.Load(), n)
	}
	fresh := mustGraph(t, dir, "app.toml")
	for name, e := range g.Elements {
		if got, want := string(g.KeyInput(e)), string(fresh.KeyInput(fresh.Elements[name])); got != want {
			t.Errorf("%s: key input through the cache\n%s\nwithout it\n%s", name, got, want)
		}
	}
	path := filepath.Join(dir, "project.toml")
	writeFile(t, path, replace(files["project.toml"], "flags = \"-g\"\n", ""))
	p, err := loadProject(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, want := load(p, &Lock{}, []string{"app.toml"})
	if want == nil || !strings.Contains(want.Error(), "flags") {
		t.Fatalf("a load without the cache: %v; want an error naming the variable", want)
	}
	if _, _, err := loadThroughCache(dir, cacheDir, "app.toml"); err == nil || err.Error() != want.Error() {
		t.Errorf("a load through the cache: %v; want %v", err, want)
	}
}

// Save forgets the files this load did not look up once they changed or were removed,
// and keeps those unchanged (a load of some targets keeps what a load of all learnt).
func TestParseCacheForgetsRemovedFiles(t *testing.T) {
	dir := writeProject(t, baseFiles)
	cacheDir := t.TempDir()
	if _, _, err := loadThroughCache(dir, cacheDir, "app.toml", "other.toml", "unrelated.toml"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "elements", "unrelated.toml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "elements", "other.toml"), "kind = \"stack\"\ndescription = \"changed\"\n")
	// Loading lib.toml, edited, writes the cache; app.toml and tool.toml are unchanged.
	writeFile(t, filepath.Join(dir, "elements", "lib.toml"), replace(baseFiles["elements/lib.toml"], "make -j", "make -k -j"))
	if _, _, err := loadThroughCache(dir, cacheDir, "lib.toml"); err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range OpenParseCache(cacheDir, dir).files {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{"elements/app.toml", "elements/lib.toml", "elements/tool.toml"}; !slices.Equal(names, want) {
		t.Errorf("the cache holds %v, want %v", names, want)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Whatever changes between two loads, a load through the parse cache (and the keys it
// remembers, keyMemo) gives the keys a load without it gives: element files edited, the
// project's variables and environment, local sources, dependencies, gantry.lock,
// workspaces opened and closed; a dependency's new key reaches its dependants. Each change is made in place in a project
// the cache has seen in full, and the files nobody touched are still answered by it.
func TestParseCacheNeverGivesStaleKeys(t *testing.T) {
	app := baseFiles["elements/app.toml"]
	lib := baseFiles["elements/lib.toml"]
	unpinned := replace(app, "ref = \"aaaa\"\n", "")
	cases := []struct {
		name   string
		before map[string]string // the project as first loaded (baseFiles if nil)
		after  map[string]string // files written in place before the second load
	}{
		{"element edited", nil, map[string]string{"elements/lib.toml": replace(lib, "make -j", "make -k -j")}},
		{"element kind", nil, map[string]string{"elements/app.toml": replace(app, `kind = "manual"`, `kind = "make"`)}},
		{"element variable", nil, map[string]string{"elements/app.toml": replace(app, `opt = "-O2"`, `opt = "-O3"`)}},
		{"dependency added", nil, map[string]string{"elements/app.toml": replace(app, `build-depends = ["tool.toml"]`, `build-depends = ["tool.toml", "other.toml"]`)}},
		{"project variable", nil, map[string]string{"project.toml": replace(baseFiles["project.toml"], `prefix = "/usr"`, `prefix = "/opt"`)}},
		{"project environment", nil, map[string]string{"project.toml": replace(baseFiles["project.toml"], `LC_ALL = "C"`, `LC_ALL = "POSIX"`)}},
		{"local source file", nil, map[string]string{"files/lib/lib.c": "int lib2;\n"}},
		{"local source file added", nil, map[string]string{"files/tool/bin/other": "x"}},
		{"gantry.lock ref", with(baseFiles, "elements/app.toml", unpinned),
			map[string]string{"gantry.lock": "[refs]\n\"app.toml\" = [\"bbbb\"]\n"}},
		{"local source same size", nil, map[string]string{"files/lib/lib.c": "int lix;\n"}},
		{"workspace opened", with(baseFiles, "ws/lib/lib.c", "int lib;\n"),
			map[string]string{WorkspacesFile: `{"version": 1, "workspaces": [{"element": "lib.toml", "directory": "$DIR/ws/lib"}]}`}},
		{"workspace closed", with(with(baseFiles, "ws/lib/lib.c", "int lib;\n"), WorkspacesFile,
			`{"version": 1, "workspaces": [{"element": "lib.toml", "directory": "$DIR/ws/lib"}]}`),
			map[string]string{WorkspacesFile: `{"version": 1, "workspaces": []}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.before
			if before == nil {
				before = baseFiles
			}
			if tc.name == "gantry.lock ref" {
				before = with(before, "gantry.lock", "[refs]\n\"app.toml\" = [\"aaaa\"]\n")
			}
			dir := writeProject(t, before)
			if ws, ok := before[WorkspacesFile]; ok {
				writeFile(t, filepath.Join(dir, WorkspacesFile), strings.ReplaceAll(ws, "$DIR", dir))
			}
			cacheDir := t.TempDir()
			first, _ := cachedKeys(t, dir, cacheDir)
			// Each file is written in place and its modification time put back: only
			// the content (or, for an element file, the change time) tells.
			for path, content := range tc.after {
				path = filepath.Join(dir, path)
				old, err := os.Stat(path)
				writeFile(t, path, strings.ReplaceAll(content, "$DIR", dir))
				if err == nil {
					if err := os.Chtimes(path, old.ModTime(), old.ModTime()); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, hits := cachedKeys(t, dir, cacheDir)
			want := map[string]string{}
			for name, e := range mustGraph(t, dir, "app.toml").Elements {
				want[name] = e.Key
			}
			for name, k := range want {
				if got[name] != k {
					t.Errorf("%s: key through the parse cache %.12s, without it %.12s", name, got[name], k)
				}
			}
			if len(got) != len(want) {
				t.Errorf("elements through the parse cache %v, without it %v", got, want)
			}
			changed := 0
			for name := range want {
				if first[name] != want[name] {
					changed++
				}
			}
			if changed == 0 {
				t.Errorf("the change changed no key: the case tests nothing")
			}
			if hits == 0 {
				t.Errorf("the parse cache answered for no file: the case tests nothing")
			}
		})
	}
}

// A project loaded again unchanged reuses every key it computed (keyMemo) and parses no
// file; keys are those a load without the cache computes.
func TestParseCacheReusesKeysOfAnUnchangedProject(t *testing.T) {
	dir := writeProject(t, baseFiles)
	cacheDir := t.TempDir()
	first, _ := cachedKeys(t, dir, cacheDir)
	p, _ := loadProject(dir)
	lock, _ := LoadLock(dir)
	pc := OpenParseCache(cacheDir, dir)
	g, err := LoadCached(p, lock, []string{"app.toml"}, pc)
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(len(g.Elements)); pc.hits.Load() != n || pc.keys.Load() != n {
		t.Errorf("%d elements: %d parses and %d keys reused, want all", n, pc.hits.Load(), pc.keys.Load())
	}
	for name, e := range g.Elements {
		if e.Key == "" || e.Key != first[name] {
			t.Errorf("%s: key %.12s, the first load's %.12s", name, e.Key, first[name])
		}
	}
}

// An edit that keeps the file's size and puts its modification time back is still seen:
// the change time (and for an editor that renames, the inode) tells the versions apart.
func TestParseCacheSeesSameSizeEditWithMtimeRestored(t *testing.T) {
	dir := writeProject(t, baseFiles)
	cacheDir := t.TempDir()
	path := filepath.Join(dir, "elements", "lib.toml")
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := cachedKeys(t, dir, cacheDir)
	edited := replace(baseFiles["elements/lib.toml"], "PREFIX", "PREFIY") // the same size
	if len(edited) != len(baseFiles["elements/lib.toml"]) {
		t.Fatal("the edit must keep the size")
	}
	writeFile(t, path, edited)
	if err := os.Chtimes(path, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	got, hits := cachedKeys(t, dir, cacheDir)
	if hits == 0 {
		t.Fatal("the parse cache answered for no file")
	}
	if got["lib.toml"] == first["lib.toml"] {
		t.Errorf("lib.toml edited in place (same size, mtime restored) kept its key %.12s: a stale parse was used", got["lib.toml"])
	}
}

// A file changed within the racy window of the cache's writing is not remembered: a
// second edit in the same timestamp tick could leave size and times unchanged.
func TestParseCacheForgetsRacilyCleanFiles(t *testing.T) {
	dir := writeProject(t, baseFiles)
	cacheDir := t.TempDir()
	load := func() *ParseCache {
		p, _ := loadProject(dir)
		lock, _ := LoadLock(dir)
		pc := OpenParseCache(cacheDir, dir) // the real window: the files were just written
		if _, err := LoadCached(p, lock, []string{"app.toml"}, pc); err != nil {
			t.Fatal(err)
		}
		if err := pc.Save(); err != nil {
			t.Fatal(err)
		}
		return pc
	}
	load()
	if pc := load(); pc.hits.Load() != 0 {
		t.Errorf("files written just now were answered from the cache %d times", pc.hits.Load())
	}
}

// A damaged cache file, or one another gantry build wrote, is an empty cache.
func TestParseCacheIgnoresDamagedAndForeignFiles(t *testing.T) {
	dir := writeProject(t, baseFiles)
	cacheDir := t.TempDir()
	want, _ := cachedKeys(t, dir, cacheDir)
	pc := OpenParseCache(cacheDir, dir)
	if len(pc.files) == 0 {
		t.Fatal("the cache remembered nothing")
	}
	data, err := os.ReadFile(pc.path)
	if err != nil {
		t.Fatal(err)
	}
	for name, damaged := range map[string][]byte{
		"truncated": data[:len(data)/2],
		"garbage":   []byte(strings.Repeat("x", 100)),
	} {
		if err := os.WriteFile(pc.path, damaged, 0o644); err != nil {
			t.Fatal(err)
		}
		if n := len(OpenParseCache(cacheDir, dir).files); n != 0 {
			t.Errorf("%s cache file: %d entries read", name, n)
		}
		got, hits := cachedKeys(t, dir, cacheDir)
		if hits != 0 || got["app.toml"] != want["app.toml"] {
			t.Errorf("%s cache file: %d hits, app.toml key %.12s, want 0 and %.12s", name, hits, got["app.toml"], want["app.toml"])
		}
	}
	other := OpenParseCache(cacheDir, dir)
	other.stamp = "another gantry build"
	other.racy = -time.Hour
	other.dirty.Store(true)
	if err := other.Save(); err != nil {
		t.Fatal(err)
	}
	if n := len(OpenParseCache(cacheDir, dir).files); n != 0 {
		t.Errorf("a cache another build wrote: %d entries read", n)
	}
}

// The parse cache's hand-written codec reads back every field of parsedFile and keyMemo:
// fill sets each field (found by reflection, so a field added to parsedFile, keyMemo,
// source.Spec or Config but not to the codec fails here), and any prefix of the bytes is an error, not a
// panic or a partial cache.
func TestParseCacheCodecRoundTrips(t *testing.T) {
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		n++
		switch v.Kind() {
		case reflect.String:
			v.SetString(fmt.Sprintf("s%d", n))
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int64:
			v.SetInt(int64(-n))
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
			for i := range 2 {
				fill(v.Index(i))
			}
		case reflect.Map:
			v.Set(reflect.MakeMap(v.Type()))
			for range 2 {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				fill(k)
				fill(e)
				v.SetMapIndex(k, e)
			}
		case reflect.Struct:
			for i := range v.NumField() {
				fill(v.Field(i))
			}
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		default:
			t.Fatalf("the codec test cannot fill a %s: teach it and the codec", v.Type())
		}
	}
	full := &cachedFile{ID: fileid.ID{Size: 1, Mtime: 2, Ctime: -3, Ino: 4, Dev: 5}}
	fill(reflect.ValueOf(&full.Parsed).Elem())
	fill(reflect.ValueOf(&full.Key).Elem())
	for i := range full.Parsed.Sources {
		// Not the file's: loading resolves them from project.toml's aliases and the
		// mirrors (resolveSources), after the parse cache answered.
		full.Parsed.Sources[i].Upstream, full.Parsed.Sources[i].Mirrors = "", nil
	}
	for i := range full.Parsed.Config.Options {
		// Not the file's either: a junction's option values are expanded when its
		// project is loaded (junctionSettings).
		full.Parsed.Config.Options[i].Written = ""
	}
	full.Includes = []includedFile{{Name: "a.toml", ID: fileid.ID{Size: 6, Mtime: 7}}, {Name: "b/c.toml", ID: fileid.ID{Ino: 8, Dev: 9}, Via: "base.toml:", Root: "/abs/base"}}
	files := map[string]*cachedFile{"full.toml": full, "empty.toml": {Parsed: &parsedFile{}}}
	data := encodeToString(t, files)
	stamp, got, err := decodeParseCache(data)
	if err != nil || stamp != "stamp" || len(got) != len(files) {
		t.Fatalf("decoded %q, %v, %d entries; want %d", stamp, err, len(got), len(files))
	}
	for name, want := range files {
		c := got[name]
		if c == nil || !c.decode() || c.id() != want.ID || !reflect.DeepEqual(c.Parsed, want.Parsed) || c.Key != want.Key || !reflect.DeepEqual(c.Includes, want.Includes) {
			t.Fatalf("%s decoded as %#v\nwant %#v", name, c, want)
		}
	}
	// Entries read are written back as read; one whose stored form is damaged is a miss.
	_, again, err := decodeParseCache(encodeToString(t, got))
	if err != nil || again["full.toml"] == nil || again["full.toml"].raw != got["full.toml"].raw {
		t.Fatalf("read, written and read again: %v, %#v", err, again["full.toml"])
	}
	// An entry this load made is kept in its stored form (head) and reads back as
	// made, with the key memo given it afterwards; so does one read whose key is
	// computed again (rememberKey), the rest of it as read.
	made := newCachedFile(full.ID, full.Parsed, full.Options, full.Kinds, full.Includes)
	if !made.decode() || !reflect.DeepEqual(made.Parsed, full.Parsed) {
		t.Fatalf("an entry made decoded as %#v", made.Parsed)
	}
	rekeyed := got["full.toml"]
	newKey := keyMemo{Inputs: "i2", Key: "k2", Context: "c2", Weak: "w2", RunKey: "r2", RunNames: "n2", RunWeak: "rw2"}
	var pc ParseCache
	made.Key = full.Key
	pc.rememberKey(rekeyed, rekeyed.ID, &newKey)
	_, again, err = decodeParseCache(encodeToString(t, map[string]*cachedFile{"made.toml": made, "rekeyed.toml": rekeyed}))
	for name, key := range map[string]keyMemo{"made.toml": full.Key, "rekeyed.toml": newKey} {
		c := again[name]
		if err != nil || c == nil || !c.decode() || c.id() != full.ID || !reflect.DeepEqual(c.Parsed, full.Parsed) || c.Key != key || !reflect.DeepEqual(c.Includes, full.Includes) {
			t.Fatalf("%s written and read again: %v, %#v", name, err, c)
		}
	}
	damaged := &cachedFile{raw: got["full.toml"].raw[:len(got["full.toml"].raw)-1]}
	if damaged.decode() {
		t.Error("an entry one byte short decoded")
	}
	for i := range len(data) {
		if _, _, err := decodeParseCache(data[:i]); err == nil {
			t.Fatalf("%d of %d bytes decoded without an error", i, len(data))
		}
	}
}

// An element file that is a symbolic link staying inside the project loads as its
// target does, with and without the parse cache (files are read without following
// links first, then through the project's os.Root).
func TestElementFileLinkedInsideTheProject(t *testing.T) {
	plain := writeProject(t, baseFiles)
	files := maps.Clone(baseFiles)
	files["elements/real/lib.toml"] = files["elements/lib.toml"]
	delete(files, "elements/lib.toml")
	dir := writeProject(t, files)
	if err := os.Symlink("real/lib.toml", filepath.Join(dir, "elements", "lib.toml")); err != nil {
		t.Fatal(err)
	}
	want := mustGraph(t, plain, "app.toml").Elements["lib.toml"].Key
	if got := mustGraph(t, dir, "app.toml").Elements["lib.toml"].Key; got != want {
		t.Errorf("lib.toml through a link: key %.12s, want %.12s", got, want)
	}
	cacheDir := t.TempDir()
	for range 2 {
		if got, _ := cachedKeys(t, dir, cacheDir); got["lib.toml"] != want {
			t.Errorf("lib.toml through a link, parse cache: key %.12s, want %.12s", got["lib.toml"], want)
		}
	}
}

// encodeToString is encodeParseCache's output for files.
func encodeToString(t *testing.T, files map[string]*cachedFile) string {
	t.Helper()
	var b strings.Builder
	if err := encodeParseCache(&b, "stamp", files); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// blockWriter records the size of each write.
type blockWriter struct {
	strings.Builder
	writes []int
}

func (w *blockWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	return w.Builder.Write(p)
}

// A large cache is written a block at a time, not gathered whole in memory first (a
// cold load of 100,000 elements gathered 25 MB), and an entry Save marked drop is left
// out of the count and the entries alike.
func TestParseCacheEncodesInBlocks(t *testing.T) {
	files := map[string]*cachedFile{}
	for i := range 4 * saveBlock / 200 {
		files[fmt.Sprintf("e%d.toml", i)] = &cachedFile{Parsed: &parsedFile{Kind: "manual", Description: strings.Repeat("d", 200)}, drop: i%3 == 0}
	}
	var w blockWriter
	if err := encodeParseCache(&w, "stamp", files); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) < 4 || slices.Max(w.writes) > saveBlock {
		t.Errorf("%d bytes written as %d writes of at most %d bytes; want blocks of about %d", w.Len(), len(w.writes), slices.Max(w.writes), saveBlock)
	}
	_, got, err := decodeParseCache(w.String())
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range files {
		if _, ok := got[name]; ok == c.drop {
			t.Fatalf("%s (drop %v) decoded: %v", name, c.drop, ok)
		}
	}
}
