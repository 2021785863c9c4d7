package element

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The layering rules, weakest first: kind preset, [kinds.NAME] defaults, included files
// (each over what it includes, in the order written), the element file, [[if]] blocks.
// Tables merge key by key, the later layer winning; a list is replaced unless written
// { prepend, append }, which composes it with the list the layers before made.
func TestIncludeLayering(t *testing.T) {
	options := "[options.debug]\ntype = \"bool\"\ndefault = true\n"
	for _, c := range []struct {
		name    string
		project string // appended to project.toml
		files   map[string]string
		app     string // elements/app.toml after kind = "autotools"
		vars    map[string]string
		deps    []string
		build   []string // build-commands
		conf    []string // configure-commands
	}{
		{name: "the including file wins on scalars",
			files: map[string]string{"a.toml": "[variables]\nx = \"a\"\ny = \"a\"\n"},
			app:   "include = [\"a.toml\"]\n[variables]\ny = \"app\"\n",
			vars:  map[string]string{"x": "a", "y": "app"}},
		{name: "a later include wins over an earlier one",
			files: map[string]string{"a.toml": "[variables]\nx = \"a\"\n", "b.toml": "[variables]\nx = \"b\"\n"},
			app:   "include = [\"a.toml\", \"b.toml\"]\n",
			vars:  map[string]string{"x": "b"}},
		{name: "a nested include is weaker than the file including it",
			files: map[string]string{"a.toml": "include = [\"sub/b.toml\"]\n[variables]\nx = \"a\"\n", "sub/b.toml": "[variables]\nx = \"b\"\nz = \"b\"\n"},
			app:   "include = [\"a.toml\"]\n",
			vars:  map[string]string{"x": "a", "z": "b"}},
		{name: "a list is replaced by default",
			files: map[string]string{"a.toml": "depends = [\"d1.toml\"]\n[config]\nbuild-commands = [\"inc\"]\n"},
			app:   "include = [\"a.toml\"]\ndepends = [\"d2.toml\"]\n[config]\nbuild-commands = [\"app\"]\n",
			deps:  []string{"d2.toml"}, build: []string{"app"}},
		{name: "append and prepend compose with the include's list",
			files: map[string]string{"a.toml": "depends = [\"d1.toml\"]\n[config]\nbuild-commands = [\"inc\"]\n"},
			app:   "include = [\"a.toml\"]\ndepends = { prepend = [\"d0.toml\"], append = [\"d2.toml\"] }\n[config]\nbuild-commands = { append = [\"app\"] }\n",
			deps:  []string{"d0.toml", "d1.toml", "d2.toml"}, build: []string{"inc", "app"}},
		{name: "an include composes with the include before it",
			files: map[string]string{"a.toml": "depends = [\"d1.toml\"]\n", "b.toml": "depends = { append = [\"d2.toml\"] }\n"},
			app:   "include = [\"a.toml\", \"b.toml\"]\n",
			deps:  []string{"d1.toml", "d2.toml"}},
		{name: "a config list with nothing before composes with the kind's preset",
			app:   "[config]\nbuild-commands = { prepend = [\"pre\"] }\n",
			build: []string{"pre", "make %{make-args}"}},
		{name: "kind defaults beat the preset and lose to includes and the file",
			project: "[kinds.autotools.variables]\nx = \"kind\"\ny = \"kind\"\nw = \"kind\"\n[kinds.autotools.config]\nconfigure-commands = { append = [\"kind\"] }\n[kinds.make.variables]\nx = \"make\"\n",
			files:   map[string]string{"a.toml": "[variables]\nx = \"inc\"\ny = \"inc\"\n[config]\nconfigure-commands = { append = [\"inc\"] }\n"},
			app:     "include = [\"a.toml\"]\n[variables]\nx = \"app\"\n",
			vars:    map[string]string{"x": "app", "y": "inc", "w": "kind"},
			conf:    []string{"./configure %{conf-args}", "kind", "inc"}},
		{name: "kind defaults beat project variables",
			project: "[variables]\nx = \"project\"\n[kinds.autotools.variables]\nx = \"kind\"\n",
			vars:    map[string]string{"x": "kind"}},
		{name: "project.toml beats what it includes, which beats what that includes",
			project: "include = [\"p.toml\"]\n[variables]\nx = \"project\"\n[kinds.autotools.variables]\nk = \"project\"\n",
			files: map[string]string{"p.toml": "include = [\"q.toml\"]\n[variables]\nx = \"p\"\ny = \"p\"\n[kinds.autotools.variables]\nk = \"p\"\nl = \"p\"\n[kinds.autotools.config]\nbuild-commands = { append = [\"p\"] }\n",
				"q.toml": "[variables]\ny = \"q\"\nz = \"q\"\n[kinds.autotools.config]\nbuild-commands = [\"q\"]\n"},
			vars:  map[string]string{"x": "project", "y": "p", "z": "q", "k": "project", "l": "p"},
			build: []string{"q", "p"}},
		{name: "a block beats the file and composes over the layers",
			files: map[string]string{"a.toml": "[config]\nbuild-commands = [\"inc\"]\n"},
			app:   "include = [\"a.toml\"]\n[variables]\nx = \"app\"\n[[if]]\ncondition = 'debug'\nvariables.x = \"debug\"\nconfig.build-commands = { append = [\"debug\"] }\n",
			vars:  map[string]string{"x": "debug"}, build: []string{"inc", "debug"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"project.toml": "name = \"inc\"\n" + c.project + options, "elements/app.toml": "kind = \"autotools\"\n" + c.app}
			for _, d := range []string{"d0.toml", "d1.toml", "d2.toml"} {
				files["elements/"+d] = "kind = \"stack\"\n"
			}
			for name, text := range c.files {
				files[name] = text
			}
			g := mustGraph(t, writeProject(t, files), "app.toml")
			e := g.Elements["app.toml"]
			for k, want := range c.vars {
				if got := e.vars[k]; got != want {
					t.Errorf("variable %s = %q, want %q", k, got, want)
				}
			}
			if c.deps != nil && !reflect.DeepEqual(e.Depends, c.deps) {
				t.Errorf("depends = %q, want %q", e.Depends, c.deps)
			}
			if c.build != nil && !reflect.DeepEqual(e.Config.Commands["build-commands"], c.build) {
				t.Errorf("build-commands = %q, want %q", e.Config.Commands["build-commands"], c.build)
			}
			if c.conf != nil && !reflect.DeepEqual(e.Config.Commands["configure-commands"], c.conf) {
				t.Errorf("configure-commands = %q, want %q", e.Config.Commands["configure-commands"], c.conf)
			}
		})
	}
}

func TestIncludeErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		project string
		files   map[string]string
		app     string
		want    string
	}{
		{name: "a composition of a non-list",
			files: map[string]string{"a.toml": "[config]\nbuild-commands = { apend = [\"x\"] }\n"},
			app:   "include = [\"a.toml\"]\n",
			want:  `a.toml:2: unknown key "apend" in [config.build-commands] (did you mean "append"?)`},
		{name: "include is not a list",
			app:  "include = \"a.toml\"\n",
			want: `elements/app.toml:2: key "include": expected a list of paths, found a string`},
		{name: "a variable of an include that is not a string",
			files: map[string]string{"a.toml": "[variables]\nx = 1\n"},
			app:   "include = [\"a.toml\"]\n",
			want:  `a.toml:2: key "variables.x": expected a string, found an integer`},
		{name: "an included file may not set the kind",
			files: map[string]string{"a.toml": "kind = \"manual\"\n"},
			app:   "include = [\"a.toml\"]\n",
			want:  `a.toml:1: unknown key "kind"`},
		{name: "an absolute include",
			app:  "include = [\"/etc/passwd\"]\n",
			want: `elements/app.toml:2: key "include": "/etc/passwd" is outside the project`},
		{name: "a missing include of project.toml",
			project: "include = [\"nope.toml\"]\n",
			want:    `project.toml:2: key "include": included file "nope.toml" does not exist`},
		{name: "a cycle of project includes",
			project: "include = [\"p.toml\"]\n",
			files:   map[string]string{"p.toml": "include = [\"q.toml\"]\n", "q.toml": "include = [\"p.toml\"]\n"},
			want:    `q.toml:1: key "include": include cycle: p.toml -> q.toml -> p.toml`},
		{name: "an unknown kind in [kinds]",
			project: "[kinds.autotool.variables]\nx = \"1\"\n",
			want:    `project.toml:2: unknown key "autotool" in [kinds] (did you mean "autotools"?)`},
		{name: "an unknown key in a kind's defaults",
			project: "[kinds.autotools.variable]\nx = \"1\"\n",
			want:    `project.toml:2: unknown key "variable" in [kinds.autotools] (did you mean "variables"?)`},
		{name: "an unknown config key in a kind's defaults",
			project: "[kinds.make.config]\nconfigure-command = [\"x\"]\n",
			want:    `project.toml:3: unknown key "configure-command" in [kinds.make.config] (did you mean "configure-commands"?)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"project.toml": "name = \"inc\"\n" + c.project, "elements/app.toml": "kind = \"autotools\"\n" + c.app}
			for name, text := range c.files {
				files[name] = text
			}
			_, err := loadGraph(t, writeProject(t, files), "app.toml")
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("got %v\nwant %s", err, c.want)
			}
		})
	}
}

// The parse cache reuses an element's parse only while every file it included, however
// deep, is unchanged: files saved, loaded through the cache, changed and loaded again.
func TestParseCacheRedecodesWhenAnIncludeChanges(t *testing.T) {
	checkReparsed(t, map[string]string{
		"project.toml":      "name = \"inc\"\n",
		"a.toml":            "include = [\"sub/b.toml\"]\n",
		"sub/b.toml":        "[variables]\nmsg = \"one\"\n",
		"elements/app.toml": "kind = \"manual\"\ninclude = [\"a.toml\"]\ndepends = [\"lib.toml\"]\n[config]\nbuild-commands = [\"echo %{msg}\"]\n",
	}, "sub/b.toml", "[variables]\nmsg = \"two\"\n")
}

// An element of a kind with project defaults is parsed over them: the parse cache
// reuses its parse only under the same defaults.
func TestParseCacheKeysKindDefaults(t *testing.T) {
	checkReparsed(t, map[string]string{
		"project.toml":      "name = \"inc\"\n[kinds.manual.variables]\nmsg = \"one\"\n",
		"elements/app.toml": "kind = \"manual\"\ndepends = [\"lib.toml\"]\n[config]\nbuild-commands = [\"echo %{msg}\"]\n",
	}, "project.toml", "name = \"inc\"\n[kinds.manual.variables]\nmsg = \"two\"\n")
}

// checkReparsed loads the project files (with elements/lib.toml added) through a parse
// cache, rewrites the file changed as text, and checks that app.toml alone is parsed
// again, to the key a load without the cache gives, and is remembered after.
func checkReparsed(t *testing.T, files map[string]string, changed, text string) {
	t.Helper()
	files["elements/lib.toml"] = "kind = \"stack\"\n"
	dir := writeProject(t, files)
	cacheDir := t.TempDir()
	before, _ := cachedKeys(t, dir, cacheDir)
	if _, hits := cachedKeys(t, dir, cacheDir); hits != 2 {
		t.Fatalf("%d files answered by the cache when nothing changed, want 2", hits)
	}
	writeFile(t, filepath.Join(dir, changed), text)
	after, hits := cachedKeys(t, dir, cacheDir)
	if hits != 1 {
		t.Errorf("%d files answered by the cache after %s changed, want 1 (lib.toml)", hits, changed)
	}
	if after["app.toml"] == before["app.toml"] {
		t.Errorf("app.toml's key did not change with the variable %s sets: a stale parse", changed)
	}
	if want := mustGraph(t, dir, "app.toml").Elements["app.toml"].Key; after["app.toml"] != want {
		t.Error("app.toml's key through the cache is not its key without it")
	}
	if _, hits := cachedKeys(t, dir, cacheDir); hits != 2 {
		t.Errorf("%d files answered by the cache once the new version was remembered, want 2", hits)
	}
}

// An element parsed when its kind had no project defaults is parsed again once it has.
func TestParseCacheKeysNewKindDefaults(t *testing.T) {
	checkReparsed(t, map[string]string{
		"project.toml":      "name = \"inc\"\n[variables]\nmsg = \"one\"\n",
		"elements/app.toml": "kind = \"manual\"\ndepends = [\"lib.toml\"]\n[config]\nbuild-commands = [\"echo %{msg}\"]\n",
	}, "project.toml", "name = \"inc\"\n[variables]\nmsg = \"one\"\n[kinds.manual.variables]\nmsg = \"two\"\n")
}

// An undefined variable in project.toml's [variables] is reported at project.toml, not
// at the [variables] table of an element that has one (written either way) without it.
func TestProjectVariableErrorIsNotTheElements(t *testing.T) {
	for _, app := range []string{"kind = \"manual\"\n\n[variables]\nb = \"x\"\n", "kind = \"manual\"\nvariables = { b = \"x\" }\n"} {
		dir := writeProject(t, map[string]string{
			"project.toml":      "name = \"demo\"\n[variables]\na = \"%{nope}\"\n",
			"elements/app.toml": app,
		})
		_, err := loadGraph(t, dir, "app.toml")
		want := "project.toml: variable \"a\" (used by app.toml): undefined variable %{nope}"
		if err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", app, err, want)
		}
	}
}
