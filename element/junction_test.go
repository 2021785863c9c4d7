package element

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
		return loadKeys(t, dir, cacheDir, cached)
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

// A junction's [config.options] layered by [[if]] blocks merge option by option: a
// block setting one option keeps the others the file set, so a parent passes each of
// its options on in its own block.
func TestJunctionOptionsMergeByOption(t *testing.T) {
	dir := writeProject(t, map[string]string{
		"project.toml": "name = \"app\"\n[options.fast]\ntype = \"bool\"\ndefault = true\n",
		"elements/base.toml": "kind = \"junction\"\n[[sources]]\nkind = \"local\"\npath = \"base\"\n" +
			"[config.options]\ndebug = true\nlevel = \"low\"\n" +
			"[[if]]\ncondition = \"fast\"\nconfig.options.level = \"high\"\n",
		"base/project.toml": "name = \"base\"\n[options.debug]\ntype = \"bool\"\nvariable = \"debug\"\n" +
			"[options.level]\ntype = \"enum\"\nvalues = [\"low\", \"high\"]\ndefault = \"low\"\nvariable = \"level\"\n",
		"base/elements/lib.toml": "kind = \"manual\"\n[config]\ninstall-commands = [\"echo %{debug} %{level}\"]\n",
	})
	g := mustGraph(t, dir, "base.toml:lib.toml")
	p, err := loadProjectWith(filepath.Join(dir, "base"), func(string) [][]OptionSetting {
		return [][]OptionSetting{{{Name: "debug", Value: "true"}, {Name: "level", Value: "high"}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := load(p, &Lock{}, []string{"lib.toml"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := g.Elements["base.toml:lib.toml"].Key, direct.Elements["lib.toml"].Key; got != want {
		t.Errorf("key through the junction %q, want %q: that of debug=true level=high (the block kept debug)", got, want)
	}
}

// junctionOptionFiles is a project app whose options arch and debug are exported as
// variables, and a junction base.toml (file: what follows its source) holding project
// base, whose lib.toml reads base's options arch and debug.
func junctionOptionFiles(file string) map[string]string {
	return map[string]string{
		"project.toml": "name = \"app\"\n" +
			"[options.arch]\ntype = \"arch\"\nvalues = [\"x86_64\", \"aarch64\"]\nvariable = \"arch\"\n" +
			"[options.debug]\ntype = \"bool\"\nvariable = \"debug\"\n",
		"elements/base.toml": "kind = \"junction\"\n[[sources]]\nkind = \"local\"\npath = \"base\"\n" + file,
		"base/project.toml": "name = \"base\"\n" +
			"[options.arch]\ntype = \"arch\"\nvalues = [\"x86_64\", \"aarch64\"]\nvariable = \"arch\"\n" +
			"[options.debug]\ntype = \"bool\"\nvariable = \"debug\"\n",
		"base/elements/lib.toml": "kind = \"manual\"\n[config]\ninstall-commands = [\"echo %{arch} %{debug}\"]\n",
	}
}

// graphWithOptions loads the graph of targets in dir with the top project's options
// set as --option would.
func graphWithOptions(dir string, settings []OptionSetting, targets ...string) (*Graph, error) {
	p, err := loadProjectWith(dir, layers(settings...))
	if err != nil {
		return nil, err
	}
	return load(p, &Lock{}, targets)
}

// A junction's [config.options] values expand variables, the parent's (its options'
// among them) and the junction file's own: the sub-project gets the values they expand
// to, and its keys are those of the values, however they are spelled.
func TestJunctionOptionsExpandVariables(t *testing.T) {
	settings := []OptionSetting{{Name: "arch", Value: "aarch64"}, {Name: "debug", Value: "true"}}
	direct, err := graphWithOptions(writeProject(t, junctionOptionFiles(""))+"/base", settings, "lib.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := direct.Elements["lib.toml"].Key
	for _, file := range []string{
		"[config.options]\narch = \"aarch64\"\ndebug = true\n",
		"[config.options]\narch = \"%{arch}\"\ndebug = \"%{debug}\"\n",
		"[variables]\nmachine = \"%{arch}\"\n[config.options]\narch = \"%{machine}\"\ndebug = \"%{debug}\"\n",
		"[config.options]\narch = \"x86_64\"\n[[if]]\ncondition = \"debug\"\nconfig.options = { arch = \"%{arch}\", debug = \"%{debug}\" }\n",
	} {
		g, err := graphWithOptions(writeProject(t, junctionOptionFiles(file)), settings, "base.toml:lib.toml")
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if got := g.Elements["base.toml:lib.toml"].Key; got != want {
			t.Errorf("%s: key through the junction %q, want %q (base loaded with arch=aarch64 debug=true)", file, got, want)
		}
	}
	// the parent's option values reach base through the variables
	other, err := graphWithOptions(writeProject(t, junctionOptionFiles("[config.options]\narch = \"%{arch}\"\n")),
		[]OptionSetting{{Name: "arch", Value: "x86_64"}}, "base.toml:lib.toml")
	if err != nil {
		t.Fatal(err)
	}
	if other.Elements["base.toml:lib.toml"].Key == want {
		t.Error("arch=x86_64 in the parent gives base's lib.toml the key of arch=aarch64")
	}
}

// A setting whose variables cannot be expanded, or whose value the sub-project refuses
// once expanded, is reported at its line in the junction's file (a [[if]] block's, when
// a block set it), with what it expanded to.
func TestJunctionOptionsExpandErrors(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"[config.options]\narch = \"%{arhc}\"\n",
			"elements/base.toml:6: option arch=%{arhc}: undefined variable %{arhc} (did you mean \"arch\"?)\n" +
				`a junction's option values expand this project's variables and those of the junction's file; an option is a variable when it declares one (variable = "NAME" in [options.NAME])`},
		{"[variables]\nmachine = \"x86-64\"\n[config.options]\narch = \"%{machine}\"\n",
			`elements/base.toml:8: option arch=%{machine} (expanded to "x86-64"): "x86-64" is not a value of option "arch" (did you mean "x86_64"?): expected one of x86_64, aarch64`},
		{"[config.options]\ndebug = \"%{arch}\"\n",
			`elements/base.toml:6: option debug=%{arch} (expanded to "aarch64"): option "debug" is a bool: expected true or false`},
		{"[config.options]\ndebug = true\n\n[[if]]\ncondition = 'arch == \"aarch64\"'\nconfig.options.arch = \"x86-64\"\n",
			`elements/base.toml:10: option arch=x86-64: "x86-64" is not a value of option "arch" (did you mean "x86_64"?): expected one of x86_64, aarch64`},
		{"[config.options]\narch = \"x86_64\"\n\n[[if]]\ncondition = \"not debug\"\n[if.config.options]\narch = \"%{arch}-1\"\n",
			`elements/base.toml:11: option arch=%{arch}-1 (expanded to "aarch64-1"): "aarch64-1" is not a value of option "arch" (did you mean "aarch64"?): expected one of x86_64, aarch64`},
	} {
		_, err := graphWithOptions(writeProject(t, junctionOptionFiles(c.file)), []OptionSetting{{Name: "arch", Value: "aarch64"}}, "base.toml:lib.toml")
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.file, err, c.want)
		}
	}
}
