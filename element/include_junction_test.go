package element

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// includeJunctionFiles is a project app whose app.toml and project.toml include through
// the junction base.toml (local, sub/base) and through base's junction core.toml.
func includeJunctionFiles() map[string]string {
	junction := func(path string) string {
		return "kind = \"junction\"\n[[sources]]\nkind = \"local\"\npath = \"" + path + "\"\n"
	}
	return map[string]string{
		"project.toml":                "name = \"app\"\ninclude = [\"base.toml:inc/project.toml\"]\n[variables]\ngreeting = \"app\"\n",
		"elements/base.toml":          junction("sub/base"),
		"elements/app.toml":           "kind = \"manual\"\ninclude = [\"base.toml:inc/flags.toml\", \"base.toml:core.toml:inc/core.toml\"]\n[variables]\nown = \"app\"\n[config]\ninstall-commands = [\"echo %{level} %{common} %{core} %{shared}\"]\n",
		"elements/other.toml":         "kind = \"manual\"\n[config]\ninstall-commands = [\"echo other\"]\n",
		"sub/base/project.toml":       "name = \"base\"\n[variables]\ngreeting = \"base\"\n",
		"sub/base/inc/project.toml":   "[variables]\nshared = \"base's\"\n",
		"sub/base/inc/flags.toml":     "include = [\"inc/common.toml\"]\ndepends = [\"base.toml:lib.toml\"]\n[variables]\nlevel = \"flags %{greeting}\"\nown = \"flags\"\n",
		"sub/base/inc/common.toml":    "[variables]\ncommon = \"base\"\n",
		"sub/base/elements/lib.toml":  "kind = \"stack\"\n",
		"sub/base/elements/core.toml": junction("core"),
		"sub/base/core/project.toml":  "name = \"core\"\n",
		"sub/base/core/inc/core.toml": "[variables]\ncore = \"core\"\n",
	}
}

// A JUNCTION:PATH include reads PATH from the project the junction holds, its own
// includes from that project too; nested junctions; project.toml's too (read in a
// second pass); the including file wins; variables resolve as the element's.
func TestJunctionIncludeLayering(t *testing.T) {
	g := mustGraph(t, writeProject(t, includeJunctionFiles()), "app.toml")
	e := g.Elements["app.toml"]
	vars := e.Variables(e.project, keyPaths())
	for k, want := range map[string]string{
		"level":  "flags app", // %{greeting} is the including project's
		"own":    "app",       // the including file wins
		"common": "base",      // included by base's inc/flags.toml, from base
		"core":   "core",      // through base's junction core.toml
		"shared": "base's",    // project.toml's include through base.toml
	} {
		got, err := vars.Expand("%{" + k + "}")
		if err != nil || got != want {
			t.Errorf("%%{%s} = %q (%v), want %q", k, got, err, want)
		}
	}
	if _, ok := g.Elements["base.toml:lib.toml"]; !ok || len(e.Depends) != 1 {
		t.Errorf("depends = %q: the included depends should load base.toml:lib.toml", e.Depends)
	}
}

// An override of the junction an include goes through applies, as to a dependency name.
func TestJunctionIncludeThroughOverride(t *testing.T) {
	files := includeJunctionFiles()
	files["elements/base.toml"] += "[config.overrides]\n\"core.toml\" = \"core.toml\"\n"
	files["elements/core.toml"] = "kind = \"junction\"\n[[sources]]\nkind = \"local\"\npath = \"core\"\n"
	files["core/project.toml"] = "name = \"core\"\n"
	files["core/inc/core.toml"] = "[variables]\ncore = \"the parent's core\"\n"
	g := mustGraph(t, writeProject(t, files), "app.toml")
	e := g.Elements["app.toml"]
	if got := e.vars["core"]; got != "the parent's core" {
		t.Errorf("core = %q, want the parent's core's file", got)
	}
}

// The parse cache reuses an element's parse while the files it included through a
// junction are unchanged and the junction holds the same project; a change to either
// changes the key as a load without the cache does. An element whose junction is not
// loaded yet in its round is still answered from the cache.
func TestJunctionIncludeParseCache(t *testing.T) {
	dir := writeProject(t, includeJunctionFiles())
	cacheDir := t.TempDir()
	load := func(cached bool) (string, *ParseCache) {
		t.Helper()
		keys, pc := loadKeys(t, dir, cacheDir, cached)
		return keys["app.toml"], pc
	}
	want, _ := load(false)
	if got, _ := load(true); got != want {
		t.Fatalf("cold: key %s, want %s", got, want)
	}
	got, pc := load(true)
	if got != want || pc.hits.Load() != 2 {
		t.Fatalf("warm: key %s (want %s), %d files from the cache (want 2)", got, want, pc.hits.Load())
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// a change to a file included through base's own include
	write("sub/base/inc/common.toml", "[variables]\ncommon = \"changed\"\n")
	changed, _ := load(false)
	if got, _ := load(true); got != changed || got == want {
		t.Fatalf("after a change to sub/base/inc/common.toml: key through the cache %s, want %s (before %s)", got, changed, want)
	}
	// the junction holding another project with the same files, but for one
	for name, text := range includeJunctionFiles() {
		if rest, ok := strings.CutPrefix(name, "sub/base/"); ok {
			write("sub/base2/"+rest, text)
		}
	}
	write("sub/base2/inc/common.toml", "[variables]\ncommon = \"base2\"\n")
	write("elements/base.toml", "kind = \"junction\"\n[[sources]]\nkind = \"local\"\npath = \"sub/base2\"\n")
	moved, _ := load(false)
	if got, _ := load(true); got != moved || got == changed {
		t.Fatalf("after moving the junction: key through the cache %s, want %s", got, moved)
	}
}

// Each error of a JUNCTION:PATH include, at the include's line.
func TestJunctionIncludeErrors(t *testing.T) {
	for _, c := range []struct{ name, app, want string }{
		{"no such junction", `include = ["bse.toml:inc/flags.toml"]`,
			`elements/app.toml:2: key "include": "bse.toml:inc/flags.toml": project app has no junction bse.toml (did you mean "base.toml"?)`},
		{"not a junction", `include = ["other.toml:inc/flags.toml"]`,
			`elements/app.toml:2: key "include": "other.toml:inc/flags.toml": other.toml is not a junction (kind "manual")`},
		{"no such file", `include = ["base.toml:inc/flag.toml"]`,
			`elements/app.toml:2: key "include": included file "base.toml:inc/flag.toml" does not exist in project base (no file sub/base/inc/flag.toml) (did you mean "base.toml:inc/flags.toml"?)`},
		{"a bad junction name", `include = ["base:inc/flags.toml"]`,
			`elements/app.toml:2: key "include": "base:inc/flags.toml": element name "base" must end in .toml`},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := includeJunctionFiles()
			files["elements/app.toml"] = "kind = \"manual\"\n" + c.app + "\n"
			_, err := loadGraph(t, writeProject(t, files), "app.toml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want %s", err, c.want)
			}
		})
	}
}

// A sub-project's element includes through the sub-project's own junction; an override
// of an element that includes through junctions reads only its kind.
func TestJunctionIncludeInSubProject(t *testing.T) {
	files := includeJunctionFiles()
	files["sub/base/elements/lib.toml"] = "kind = \"manual\"\ninclude = [\"core.toml:inc/core.toml\"]\n"
	files["sub/base/elements/zz.toml"] = "kind = \"manual\"\ninclude = [\"core.toml:inc/core.toml\"]\n"
	files["elements/base.toml"] += "[config.overrides]\n\"zz.toml\" = \"other.toml\"\n"
	g := mustGraph(t, writeProject(t, files), "app.toml")
	if got := g.Elements["base.toml:lib.toml"].vars["core"]; got != "core" {
		t.Errorf("base.toml:lib.toml: core = %q, want the value of base's core's file", got)
	}
}
