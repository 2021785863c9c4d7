package element

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// junctionFiles is a project app whose app.toml depends on an element of the project
// a junction holds (base), which depends on one of a project its own junction holds
// (core): nesting, each with its own variables.
func junctionFiles() map[string]string {
	manual := func(deps, cmd string) string {
		return "kind = \"manual\"\ndepends = [" + deps + "]\n[config]\ninstall-commands = [\"" + cmd + "\"]\n"
	}
	junction := func(path string) string {
		return "kind = \"junction\"\n[[sources]]\nkind = \"local\"\npath = \"" + path + "\"\n"
	}
	return map[string]string{
		"project.toml":                     "name = \"app\"\n[variables]\nwho = \"app\"\n",
		"elements/app.toml":                manual(`"base.toml:lib.toml"`, "echo %{who}"),
		"elements/base.toml":               junction("sub/base"),
		"sub/base/project.toml":            "name = \"base\"\n[variables]\nwho = \"base\"\n",
		"sub/base/elements/lib.toml":       manual(`"util.toml", "core.toml:zlib.toml"`, "echo %{who} %{element-name}"),
		"sub/base/elements/util.toml":      manual("", "echo %{project-name}"),
		"sub/base/elements/core.toml":      junction("core"),
		"sub/base/core/project.toml":       "name = \"core\"\n",
		"sub/base/core/elements/zlib.toml": manual("", "echo %{element-name} %{project-name}"),
	}
}

func TestJunctionNamesAndKeys(t *testing.T) {
	dir := writeProject(t, junctionFiles())
	g := mustGraph(t, dir, "app.toml")
	var names []string
	for _, e := range g.Order {
		names = append(names, e.Name)
	}
	want := []string{"base.toml:util.toml", "base.toml:core.toml:zlib.toml", "base.toml:lib.toml", "app.toml"}
	if !slices.Equal(names, want) {
		t.Fatalf("order = %q, want %q", names, want)
	}
	if f := g.Elements["base.toml:core.toml:zlib.toml"].File; f != "sub/base/core/elements/zlib.toml" {
		t.Errorf("File = %q, want the path from the top project's root", f)
	}
	// Each sub-project element has the key a direct load of its project gives.
	base := mustGraph(t, filepath.Join(dir, "sub/base"), "lib.toml")
	core := mustGraph(t, filepath.Join(dir, "sub/base/core"), "zlib.toml")
	for _, c := range []struct {
		through string
		direct  *Element
	}{
		{"base.toml:lib.toml", base.Elements["lib.toml"]},
		{"base.toml:util.toml", base.Elements["util.toml"]},
		{"base.toml:core.toml:zlib.toml", core.Elements["zlib.toml"]},
		{"base.toml:core.toml:zlib.toml", base.Elements["core.toml:zlib.toml"]},
	} {
		if e := g.Elements[c.through]; e.Key == "" || e.Key != c.direct.Key {
			t.Errorf("%s: key %q through the junction, %q directly", c.through, e.Key, c.direct.Key)
		} else if e.WeakKey != c.direct.WeakKey || e.run != c.direct.run {
			t.Errorf("%s: weak key %q and run digests %v through the junction, %q and %v directly", c.through, e.WeakKey, e.run, c.direct.WeakKey, c.direct.run)
		}
	}
}

// A sub-project's element files are in the parse cache (by their absolute path) with
// their keys, and a key memo holds only while the sub-project's own settings are
// unchanged: a variable changed in its project.toml changes its elements' keys through
// the cache as without it.
func TestJunctionParseCache(t *testing.T) {
	dir := writeProject(t, junctionFiles())
	cacheDir := t.TempDir()
	load := func(cached bool) (map[string]string, *ParseCache) {
		t.Helper()
		p, err := loadProject(dir)
		if err != nil {
			t.Fatal(err)
		}
		var pc *ParseCache
		if cached {
			pc = OpenParseCache(cacheDir, dir)
			pc.racy = -time.Hour
		}
		g, err := LoadCached(p, &Lock{Entries: map[string][]string{}}, []string{"app.toml"}, pc)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{}
		for name, e := range g.Elements {
			keys[name] = e.Key
		}
		if err := pc.Save(); err != nil {
			t.Fatal(err)
		}
		return keys, pc
	}
	want, _ := load(false)
	if got, pc := load(true); !maps.Equal(got, want) || pc.hits.Load() != 0 {
		t.Fatalf("cold: keys %v (want %v), %d hits", got, want, pc.hits.Load())
	}
	got, pc := load(true)
	if !maps.Equal(got, want) {
		t.Fatalf("warm: keys %v, want %v", got, want)
	}
	if h, k := pc.hits.Load(), pc.keys.Load(); h != 4 || k != 4 {
		t.Errorf("warm: %d files and %d keys from the cache, want every element's (4; junction files are read each time)", h, k)
	}
	if _, ok := pc.files[filepath.ToSlash(filepath.Join(dir, "sub/base/core/elements/zlib.toml"))]; !ok {
		t.Errorf("the sub-project's zlib.toml is not remembered by its absolute path")
	}
	// the sub-project's settings reach its keys through the cache
	if err := os.WriteFile(filepath.Join(dir, "sub/base/project.toml"), []byte("name = \"base\"\n[variables]\nwho = \"changed\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want, _ = load(false)
	got, _ = load(true)
	if !maps.Equal(got, want) {
		t.Fatalf("after a change to the sub-project: keys through the cache %v, want %v", got, want)
	}
}

// An overridden dependency is the parent's element, and enters the key under the name
// the depending file gives it.
func TestJunctionOverrideKeys(t *testing.T) {
	files := junctionFiles()
	files["elements/base.toml"] += "[config.overrides]\n\"util.toml\" = \"tools.toml\"\n"
	files["elements/tools.toml"] = "kind = \"manual\"\n[config]\ninstall-commands = [\"echo tools\"]\n"
	g := mustGraph(t, writeProject(t, files), "app.toml")
	if _, ok := g.Elements["base.toml:util.toml"]; ok {
		t.Error("base.toml:util.toml loaded: the override should replace it")
	}
	lib := g.Elements["base.toml:lib.toml"]
	if lib.BuildDeps[0] != g.Elements["tools.toml"] {
		t.Fatalf("lib.toml's first dependency is %s, want tools.toml", lib.BuildDeps[0].Name)
	}
	if in := string(g.KeyInput(lib)); !strings.Contains(in, `"util.toml": "`+g.Elements["tools.toml"].Key+`"`) {
		t.Errorf("key input names the override's element otherwise than the file does:\n%s", in)
	}
}
