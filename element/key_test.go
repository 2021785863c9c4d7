package element

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var baseFiles = map[string]string{
	"project.toml": "name = \"demo\"\n[variables]\nprefix = \"/usr\"\n[environment]\nLC_ALL = \"C\"\n[pools]\nlic = 1\n",
	"elements/lib.toml": `kind = "manual"
[[sources]]
kind = "local"
path = "files/lib"
[config]
build-commands = ["make -j%{max-jobs} PREFIX=%{prefix}"]
`,
	"elements/app.toml": `kind = "manual"
description = "the app"
depends = ["lib.toml"]
build-depends = ["tool.toml"]
[variables]
opt = "-O2"
[environment]
CFLAGS = "%{opt}"
[[sources]]
kind = "tar"
url = "https://example.com/app.tar.gz"
ref = "aaaa"
[config]
install-commands = ["make DESTDIR=%{install-root} install"]
`,
	"elements/tool.toml":      "kind = \"import\"\n[[sources]]\nkind = \"local\"\npath = \"files/tool\"\n",
	"elements/other.toml":     "kind = \"stack\"\n",
	"files/lib/lib.c":         "int lib;\n",
	"files/tool/bin/tool":     "#!/bin/sh\n",
	"elements/unrelated.toml": "kind = \"stack\"\n",
}

func keysOf(t *testing.T, files map[string]string) map[string]string {
	t.Helper()
	dir := writeProject(t, files)
	g := mustGraph(t, dir, "app.toml")
	out := map[string]string{}
	for name, e := range g.Elements {
		out[name] = e.Key
	}
	return out
}

func with(files map[string]string, path, content string) map[string]string {
	out := maps.Clone(files)
	out[path] = content
	return out
}

// Every change that affects a build changes the key of the element and everything above.
func TestKeyChangesWhenBuildInputsChange(t *testing.T) {
	base := keysOf(t, baseFiles)
	app := baseFiles["elements/app.toml"]
	lib := baseFiles["elements/lib.toml"]
	cases := []struct {
		name     string
		files    map[string]string
		changed  []string // elements whose key must change
		constant []string // elements whose key must not change
	}{
		{"kind", with(baseFiles, "elements/app.toml", replace(app, `kind = "manual"`, `kind = "make"`)), []string{"app.toml"}, []string{"lib.toml"}},
		{"command", with(baseFiles, "elements/lib.toml", replace(lib, "make -j", "make -k -j")), []string{"lib.toml", "app.toml"}, []string{"tool.toml"}},
		{"element variable used by env", with(baseFiles, "elements/app.toml", replace(app, `opt = "-O2"`, `opt = "-O3"`)), []string{"app.toml"}, []string{"lib.toml"}},
		{"project variable", with(baseFiles, "project.toml", replace(baseFiles["project.toml"], `prefix = "/usr"`, `prefix = "/opt"`)), []string{"lib.toml", "app.toml"}, []string{"tool.toml"}},
		{"project environment", with(baseFiles, "project.toml", replace(baseFiles["project.toml"], `LC_ALL = "C"`, `LC_ALL = "C.UTF-8"`)), []string{"lib.toml", "app.toml", "tool.toml"}, nil},
		{"source ref", with(baseFiles, "elements/app.toml", replace(app, `ref = "aaaa"`, `ref = "bbbb"`)), []string{"app.toml"}, []string{"lib.toml"}},
		{"source url", with(baseFiles, "elements/app.toml", replace(app, "app.tar.gz", "app2.tar.gz")), []string{"app.toml"}, nil},
		{"local file content", with(baseFiles, "files/lib/lib.c", "int lib2;\n"), []string{"lib.toml", "app.toml"}, []string{"tool.toml"}},
		{"local file added", with(baseFiles, "files/lib/extra.h", ""), []string{"lib.toml", "app.toml"}, nil},
		{"build-only dependency", with(baseFiles, "files/tool/bin/tool", "#!/bin/sh\necho\n"), []string{"tool.toml", "app.toml"}, []string{"lib.toml"}},
		{"dependency added", with(baseFiles, "elements/app.toml", replace(app, `build-depends = ["tool.toml"]`, `build-depends = ["tool.toml", "other.toml"]`)), []string{"app.toml"}, []string{"lib.toml"}},
		{"dependency type", with(baseFiles, "elements/app.toml", replace(app, `build-depends = ["tool.toml"]`, `runtime-depends = ["tool.toml"]`)), []string{"app.toml"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := keysOf(t, tc.files)
			for _, n := range tc.changed {
				if got[n] == base[n] {
					t.Errorf("%s: key did not change", n)
				}
			}
			for _, n := range tc.constant {
				if got[n] != base[n] {
					t.Errorf("%s: key changed but should not", n)
				}
			}
		})
	}
}

// Nothing that leaves the build unchanged changes a key.
func TestKeyStableWhenNothingRelevantChanges(t *testing.T) {
	base := keysOf(t, baseFiles)
	app := baseFiles["elements/app.toml"]
	reordered := `description = "the app"
# a comment
build-depends = [ "tool.toml" ]

depends = ["lib.toml"]
kind = "manual"

[environment]
CFLAGS    =    "%{opt}"

[variables]
opt = "-O2"
unused = "x"

[config]
install-commands = ["make DESTDIR=%{install-root} install"]

[[sources]]
ref = "aaaa"
url = "https://example.com/app.tar.gz"
kind = "tar"
`
	cases := []struct {
		name  string
		files map[string]string
	}{
		{"key order, comments, whitespace, unused variable", with(baseFiles, "elements/app.toml", reordered)},
		{"description", with(baseFiles, "elements/app.toml", replace(app, "the app", "the best app"))},
		{"unrelated element", with(baseFiles, "elements/unrelated.toml", "kind = \"stack\"\ndescription = \"changed\"\n")},
		{"pool", with(baseFiles, "elements/app.toml", replace(app, "kind = \"manual\"", "kind = \"manual\"\npool = \"lic\""))},
		{"default targets", with(baseFiles, "project.toml", "default-targets = [\"other.toml\"]\n"+baseFiles["project.toml"])},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := keysOf(t, tc.files)
			for _, n := range []string{"app.toml", "lib.toml", "tool.toml"} {
				if got[n] != base[n] {
					t.Errorf("%s: key changed", n)
				}
			}
		})
	}
}

func TestKeyIgnoresMaxJobsAndFileModesOtherThanExec(t *testing.T) {
	dir := writeProject(t, baseFiles)
	g1 := mustGraph(t, dir, "app.toml")
	if err := os.Chmod(filepath.Join(dir, "files/lib/lib.c"), 0o600); err != nil {
		t.Fatal(err)
	}
	g2 := mustGraph(t, dir, "app.toml")
	if g1.Elements["lib.toml"].Key != g2.Elements["lib.toml"].Key {
		t.Error("permission bits other than exec changed the key")
	}
	if err := os.Chmod(filepath.Join(dir, "files/lib/lib.c"), 0o755); err != nil {
		t.Fatal(err)
	}
	g3 := mustGraph(t, dir, "app.toml")
	if g1.Elements["lib.toml"].Key == g3.Elements["lib.toml"].Key {
		t.Error("making a file executable did not change the key")
	}
}

func TestNoRefGivesNoKeyUpTheGraph(t *testing.T) {
	files := with(baseFiles, "elements/lib.toml", "kind = \"manual\"\n[[sources]]\nkind = \"git\"\nurl = \"https://example.com/lib.git\"\ntrack = \"main\"\n")
	dir := writeProject(t, files)
	g := mustGraph(t, dir, "app.toml")
	if !g.Elements["lib.toml"].NoRef || g.Elements["lib.toml"].Key != "" {
		t.Fatal("lib.toml without ref should have no key")
	}
	if g.Elements["app.toml"].Key != "" {
		t.Error("app.toml depends on a no-ref element but has a key")
	}
	if g.Elements["tool.toml"].Key == "" {
		t.Error("tool.toml is unaffected but lost its key")
	}
	// The lock file supplies the ref.
	os.WriteFile(filepath.Join(dir, LockFile), []byte("[refs]\n\"lib.toml\" = [\"0123abcd\"]\n"), 0o644)
	g = mustGraph(t, dir, "app.toml")
	if g.Elements["lib.toml"].Key == "" || g.Elements["app.toml"].Key == "" {
		t.Error("ref from gantry.lock not used")
	}
}

// replace replaces the first old in s, and panics when old is absent so that a case
// which no longer applies to its input cannot pass silently.
func replace(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic("replace: " + old + " not found")
	}
	return strings.Replace(s, old, new, 1)
}

// SetRefs then ComputeKey, in dependency order, give the keys a fresh load with the same
// refs in gantry.lock gives; a pinned ref is never replaced.
func TestSetRefsGivesTheKeysOfALockedLoad(t *testing.T) {
	files := with(baseFiles, "elements/lib.toml", "kind = \"manual\"\n[[sources]]\nkind = \"git\"\nurl = \"https://example.com/lib.git\"\ntrack = \"main\"\n")
	dir := writeProject(t, files)
	g := mustGraph(t, dir, "app.toml")
	if err := g.SetRefs(g.Elements["lib.toml"], []string{"0123abcd"}); err != nil {
		t.Fatal(err)
	}
	if err := g.SetRefs(g.Elements["app.toml"], []string{"ffff"}); err != nil { // pinned inline: "aaaa"
		t.Fatal(err)
	}
	for _, e := range g.Order {
		g.ComputeKey(e)
	}
	os.WriteFile(filepath.Join(dir, LockFile), []byte("[refs]\n\"lib.toml\" = [\"0123abcd\"]\n"), 0o644)
	want := mustGraph(t, dir, "app.toml")
	for name, e := range want.Elements {
		if e.Key == "" || g.Elements[name].Key != e.Key {
			t.Errorf("%s: key %q after SetRefs, %q from the lock", name, g.Elements[name].Key, e.Key)
		}
	}
	if r := g.Elements["app.toml"].Sources[0].Ref; r != "aaaa" {
		t.Errorf("pinned ref replaced by %q", r)
	}
}

// The encoding of key inputs is pinned: a change of any byte would change every key and
// rebuild every artifact, so it must come with a new keyVersion. (Characters that
// encoding/json escapes, <>&, are in the config on purpose.)
func TestKeyEncodingIsPinned(t *testing.T) {
	files := with(baseFiles, "elements/app.toml", `kind = "manual"
depends = ["lib.toml"]
build-depends = ["tool.toml"]
[environment]
CFLAGS = "-O2 <&>"
[[sources]]
kind = "tar"
url = "https://example.com/app.tar.gz"
ref = "aaaa"
[config]
build-commands = ["a && b > c < d", "é \"q\""]
`)
	files["files/lib/lib.c"] = "int lib;\n"
	dir := writeProject(t, files)
	// keyVersion 2 (the fixed build environment) and 3 (runtime-only dependencies out
	// of keys) changed every key; a hermetic build (--sandbox bwrap) has keys of its own
	// for the elements that run commands.
	want := map[bool]map[string]string{
		false: {
			"app.toml":  "153590b2b5e89441c60d257ee0ddbb38064864276df931f2273c5f4c18189e2c",
			"lib.toml":  "932f9b93b824c625c5e13a50a728270b876a23bf806e7516a9578b76bda5c929",
			"tool.toml": "b304633583b5c019fdb2724206e95db4fb554ea41e9684184f5c5967ebfdedb7",
		},
		true: {
			"app.toml":  "55e6486640016c666fe09621baf415c7d23989d8dd592d50590c8a85659cee83",
			"lib.toml":  "c45c20e8d3d3c566ecfed4030a9505d2fd60894f304dc73006abece2fc9d497f",
			"tool.toml": "b304633583b5c019fdb2724206e95db4fb554ea41e9684184f5c5967ebfdedb7", // runs no commands
		},
	}
	weakWant := map[bool]string{false: "c055279316d8b90953e2816d559bff1c6238894b392611659e1e6b65e868344c", true: "1ced084108a44ca1d4d225eac6f4f637b99326ce8bf74fe0a7fae6d5f1f6ac22"}
	for _, hermetic := range []bool{false, true} {
		p, err := loadProject(dir)
		if err != nil {
			t.Fatal(err)
		}
		p.Hermetic = hermetic
		g, err := load(p, &Lock{Entries: map[string][]string{}}, []string{"app.toml"})
		if err != nil {
			t.Fatal(err)
		}
		for name, k := range want[hermetic] {
			if got := g.Elements[name].Key; got != k {
				t.Errorf("hermetic %v: key of %s = %s, want %s", hermetic, name, got, k)
			}
		}
		if got, want := g.Elements["app.toml"].WeakKey, weakWant[hermetic]; got != want {
			t.Errorf("hermetic %v: weak key of app.toml = %s, want %s", hermetic, got, want)
		}
	}
}

// ComputeKey's hand-written encoding is the bytes json.Marshal writes for keyInput, for
// names and keys encoding/json escapes (HTML characters, quotes, control characters,
// invalid UTF-8, U+2028), dependencies out of order or named twice, and nil or empty
// source lists: a difference would change every key.
func TestKeyInputEncoding(t *testing.T) {
	odd := []string{"plain.toml", "a<b>&c.toml", "lt<", "gt>", "amp&", `q"uo\te.toml`, "tab\there", "caf\u00e9.toml", "bad\xffutf8", "line\u2028sep", "del\x7f", "ctl\x01\x1f", ""}
	config := &Resolved{Commands: map[string][]string{"build": {"make <all> && echo \"done\""}},
		Env: map[string]string{"Z": "1", "A": "\u00e9"}}
	for i, name := range odd {
		deps := []*Element{{Name: odd[(i+3)%len(odd)], Key: name}, {Name: name, Key: "k" + name}, {Name: odd[(i+3)%len(odd)], Key: name}}
		for j, sources := range [][]string{nil, {}, {name, "abc"}} {
			sandbox := []string{"", hermeticSandbox, name}[j]
			want, err := json.Marshal(keyInput{Version: keyVersion, Kind: name, Sandbox: sandbox, Config: config, Sources: sources,
				BuildDeps: depKeys(deps[:1+i%3])})
			if err != nil {
				t.Fatal(err)
			}
			configJSON, err := json.Marshal(config)
			if err != nil {
				t.Fatal(err)
			}
			got := appendKeyInput(nil, name, sandbox, configJSON, sources, func(n string) string { return n }, deps[:1+i%3], func(d *Element) string { return d.Key })
			if string(got) != string(want) {
				t.Errorf("name %q, sources %#v:\n got %s\nwant %s", name, sources, got, want)
			}
		}
	}
}

func depKeys(deps []*Element) map[string]string {
	m := map[string]string{}
	for _, d := range deps {
		m[d.Name] = d.Key
	}
	return m
}

// Select with every dependency of the graph's own targets is the whole graph, dependencies
// first, as the walk from any other list of the same targets finds it; other selections
// are walked.
func TestSelectAll(t *testing.T) {
	dir := writeProject(t, map[string]string{
		"project.toml":         "name = \"sel\"\n",
		"elements/a.toml":      "kind = \"stack\"\ndepends = [\"lib.toml\"]\nbuild-depends = [\"tool.toml\"]\n",
		"elements/b.toml":      "kind = \"stack\"\nruntime-depends = [\"lib.toml\", \"data.toml\"]\n",
		"elements/lib.toml":    "kind = \"stack\"\nbuild-depends = [\"tool.toml\"]\n",
		"elements/tool.toml":   "kind = \"stack\"\n",
		"elements/data.toml":   "kind = \"stack\"\n",
		"elements/unused.toml": "kind = \"stack\"\n",
	})
	g := mustGraph(t, dir, "a.toml", "b.toml")
	names := joinElementNames
	all := g.Select(g.Targets, DepsAll)
	if got, want := names(all), names(g.Order); got != want || len(all) != 5 {
		t.Errorf("Select(targets, all) = %s, want %s (5 elements)", got, want)
	}
	walked := g.Select([]*Element{g.Elements["b.toml"], g.Elements["a.toml"], g.Elements["b.toml"]}, DepsAll)
	if got := names(walked); got != names(all) {
		t.Errorf("Select(b, a, b; all) = %s, want %s", got, names(all))
	}
	if got := names(g.Select(g.Targets, DepsRun)); got != "lib.toml a.toml data.toml b.toml" {
		t.Errorf("Select(targets, run) = %s", got)
	}
}

func joinElementNames(list []*Element) string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.Name
	}
	return strings.Join(out, " ")
}

// The parse cache's key memo (keys, weak keys and run digests) never gives a hermetic
// load (--sandbox bwrap) the keys of a host load, nor the other way round: the sandbox is one of the project's settings the
// memo is kept with (keyContext). The e2e tests cannot see it: their element files are
// too fresh to be memoized.
func TestKeyMemoKeepsTheSandbox(t *testing.T) {
	dir := writeProject(t, baseFiles)
	cacheDir := t.TempDir()
	load := func(hermetic, cached bool) (map[string]string, int64) {
		t.Helper()
		p, err := loadProject(dir)
		if err != nil {
			t.Fatal(err)
		}
		p.Hermetic = hermetic
		lock := &Lock{Entries: map[string][]string{}}
		var pc *ParseCache
		if cached {
			pc = OpenParseCache(cacheDir, dir)
			pc.racy = -time.Hour
		}
		g, err := LoadCached(p, lock, []string{"app.toml"}, pc)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{}
		for name, e := range g.Elements {
			keys[name] = e.Key + " " + e.WeakKey + " " + e.run.key + " " + e.run.names + " " + e.run.weak
		}
		if !cached {
			return keys, 0
		}
		if err := pc.Save(); err != nil {
			t.Fatal(err)
		}
		return keys, pc.keys.Load()
	}
	for _, order := range [][]bool{{false, true, false}, {true, false, true}} {
		for _, hermetic := range order {
			want, _ := load(hermetic, false)
			got, _ := load(hermetic, true)
			if !maps.Equal(got, want) {
				t.Errorf("hermetic %v after %v: keys through the parse cache %v, want %v", hermetic, order, got, want)
			}
		}
	}
	got, reused := load(true, true)
	if reused == 0 {
		t.Fatal("no key reused: the test needs the memo")
	}
	if want, _ := load(true, false); !maps.Equal(got, want) {
		t.Errorf("keys reused from the memo %v, want %v", got, want)
	}
	host, _ := load(false, false)
	if hermetic, _ := load(true, false); strings.Fields(host["app.toml"])[0] == strings.Fields(hermetic["app.toml"])[0] {
		t.Fatal("app.toml has one key on the host and under bwrap")
	}
}

var runtimeFiles = map[string]string{
	"project.toml":       "name = \"rt\"\n",
	"elements/rd.toml":   "kind = \"import\"\n[[sources]]\nkind = \"local\"\npath = \"files/rd\"\n",
	"elements/rd2.toml":  "kind = \"stack\"\n",
	"elements/b.toml":    "kind = \"manual\"\nruntime-depends = [\"rd.toml\"]\n[config]\nbuild-commands = [\"true\"]\n",
	"elements/a.toml":    "kind = \"manual\"\nbuild-depends = [\"b.toml\"]\n[config]\nbuild-commands = [\"true\"]\n",
	"elements/c.toml":    "kind = \"compose\"\nbuild-depends = [\"b.toml\"]\n",
	"elements/d.toml":    "kind = \"stack\"\nruntime-depends = [\"b.toml\"]\n",
	"elements/all.toml":  "kind = \"stack\"\ndepends = [\"a.toml\", \"c.toml\", \"d.toml\", \"rd2.toml\"]\n",
	"files/rd/share/rd":  "1\n",
	"files/rd/share/rd2": "2\n",
}

// strongAndWeak are the key and weak key of every element of a project of files.
func strongAndWeak(t *testing.T, files map[string]string) (keys, weak map[string]string) {
	t.Helper()
	g := mustGraph(t, writeProject(t, files), "all.toml")
	keys, weak = map[string]string{}, map[string]string{}
	for name, e := range g.Elements {
		if e.Key == "" || e.WeakKey == "" || e.WeakKey == e.Key || e.StrictKey != e.Key {
			t.Fatalf("%s: key %q, weak key %q, strict key %q", name, e.Key, e.WeakKey, e.StrictKey)
		}
		keys[name], weak[name] = e.Key, e.WeakKey
	}
	return keys, weak
}

// An element's own runtime-only dependencies are not in its key (BuildStream's
// semantics): editing rd.toml leaves b.toml's key, and changes the key of what builds on
// b.toml, which stages rd.toml with it. A weak key holds only the names of what a build
// stages: it changes with an element's own inputs and with the set of staged names, but
// not with a staged element's content, except for compose (a strict rebuild).
func TestRuntimeOnlyDependenciesLeaveTheKey(t *testing.T) {
	baseKeys, baseWeak := strongAndWeak(t, runtimeFiles)
	b := runtimeFiles["elements/b.toml"]
	cases := []struct {
		name                  string
		files                 map[string]string
		keyChanged, keySame   []string
		weakChanged, weakSame []string
	}{
		{"runtime-only dependency edited", with(runtimeFiles, "files/rd/share/rd", "one\n"),
			[]string{"rd.toml", "a.toml", "c.toml"}, []string{"b.toml", "d.toml", "rd2.toml"},
			[]string{"rd.toml", "c.toml"}, []string{"b.toml", "a.toml", "d.toml"}},
		{"runtime-only dependency added", with(runtimeFiles, "elements/b.toml", replace(b, `["rd.toml"]`, `["rd.toml", "rd2.toml"]`)),
			[]string{"a.toml", "c.toml"}, []string{"b.toml", "d.toml", "rd.toml"},
			[]string{"a.toml", "c.toml"}, []string{"b.toml", "d.toml"}},
		{"own input edited", with(runtimeFiles, "elements/b.toml", replace(b, `["true"]`, `["true", "true"]`)),
			[]string{"b.toml", "a.toml", "c.toml"}, []string{"rd.toml", "d.toml"},
			[]string{"b.toml", "c.toml"}, []string{"a.toml", "d.toml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keys, weak := strongAndWeak(t, tc.files)
			for _, check := range []struct {
				what          string
				got, base     map[string]string
				changed, same []string
			}{{"key", keys, baseKeys, tc.keyChanged, tc.keySame}, {"weak key", weak, baseWeak, tc.weakChanged, tc.weakSame}} {
				for _, n := range check.changed {
					if check.got[n] == check.base[n] {
						t.Errorf("%s: %s did not change", n, check.what)
					}
				}
				for _, n := range check.same {
					if check.got[n] != check.base[n] {
						t.Errorf("%s: %s changed", n, check.what)
					}
				}
			}
		})
	}
}

// A load without weak keys (Project.NoWeakKeys) gives every element the key a load
// with them gives, and remembers no weak key that a later load with them would reuse
// as empty.
func TestKeysWithoutWeakKeys(t *testing.T) {
	dir := writeProject(t, runtimeFiles)
	cacheDir := t.TempDir()
	load := func(noWeak, cached bool) map[string]*Element {
		t.Helper()
		g, _ := loadSaved(t, dir, cacheDir, "all.toml", cached, func(p *Project) { p.NoWeakKeys = noWeak })
		return g.Elements
	}
	want := load(false, false)
	all := func(e *Element) string {
		return e.Key + " " + e.WeakKey + " " + e.run.key + " " + e.run.names + " " + e.run.weak
	}
	for _, noWeak := range []bool{true, false, true, false} {
		got := load(noWeak, true)
		for name, w := range want {
			e := got[name]
			if w.Key == "" || w.WeakKey == "" {
				t.Fatalf("%s: no key or weak key: %q %q", name, w.Key, w.WeakKey)
			}
			if e.Key != w.Key || e.run.key != w.run.key {
				t.Errorf("no weak keys %v: %s key %s run key %s, want %s %s", noWeak, name, e.Key, e.run.key, w.Key, w.run.key)
			}
			if !noWeak && all(e) != all(w) {
				t.Errorf("after a load without weak keys: %s keys %s, want %s", name, all(e), all(w))
			}
		}
	}
	if e := load(true, false)["b.toml"]; e.WeakKey != "" || e.run.names != "" || e.run.weak != "" {
		t.Errorf("b.toml without weak keys: weak key %q, run digests %q %q, want none", e.WeakKey, e.run.names, e.run.weak)
	}
}
