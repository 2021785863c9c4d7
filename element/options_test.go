package element

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// optionsProject declares arch, debug (exported as %{debug}), features and an option
// no element reads; app.toml reads debug and features, lib.toml reads nothing.
var optionsProject = map[string]string{
	"project.toml": `name = "opts"
[options.arch]
type = "arch"
values = ["x86_64", "aarch64", "i686", "armv7l", "ppc64le", "s390x", "riscv64"]
[options.debug]
type = "bool"
variable = "debug"
description = "build with debugging information"
[options.features]
type = "flags"
values = ["tests", "docs"]
default = ["docs"]
[options.unused]
type = "enum"
values = ["a", "b"]
default = "a"
`,
	"elements/lib.toml": `kind = "manual"
[config]
build-commands = ["make"]
`,
	"elements/extra.toml": `kind = "manual"
[config]
build-commands = ["make extra"]
`,
	"elements/app.toml": `kind = "manual"
depends = ["lib.toml"]
[variables]
cflags = "-O2"
[config]
build-commands = ["cc %{cflags}"]

[[if]]
condition = 'debug'
variables.cflags = "-O0 -g"

[[if]]
condition = '"tests" in features'
depends = ["extra.toml"]
[if.config]
install-commands = ["make check"]
`,
}

// layers is settings as the only layer of option settings.
func layers(settings ...OptionSetting) OptionLayers {
	return func(string) [][]OptionSetting { return [][]OptionSetting{settings} }
}

func set(name, value string) OptionSetting { return OptionSetting{Name: name, Value: value} }

// keysWith loads app.toml with settings and returns every element's key.
func keysWith(t *testing.T, dir string, settings ...OptionSetting) map[string]string {
	t.Helper()
	g, _, err := loadWithOptions(dir, "", settings...)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for name, e := range g.Elements {
		keys[name] = e.Key
	}
	return keys
}

// loadWithOptions loads app.toml with settings, through a parse cache in cacheDir that
// remembers files however fresh when cacheDir is not "", and saves it.
func loadWithOptions(dir, cacheDir string, settings ...OptionSetting) (*Graph, *ParseCache, error) {
	p, err := loadProjectWith(dir, layers(settings...))
	if err != nil {
		return nil, nil, err
	}
	lock, err := LoadLock(dir)
	if err != nil {
		return nil, nil, err
	}
	var pc *ParseCache
	if cacheDir != "" {
		pc = OpenParseCache(cacheDir, dir)
		pc.racy = -time.Hour
	}
	g, err := LoadCached(p, lock, []string{"app.toml"}, pc)
	if err != nil {
		return nil, nil, err
	}
	return g, pc, pc.Save()
}

// An option no element reads changes no key; one an element reads changes that
// element's key (and its dependants'), no other.
func TestOptionsChangeOnlyTheKeysOfWhatReadsThem(t *testing.T) {
	dir := writeProject(t, optionsProject)
	base := keysWith(t, dir)
	if len(base) != 2 {
		t.Fatalf("elements %v: without the tests feature app.toml depends on lib.toml alone", base)
	}
	same := keysWith(t, dir, set("unused", "b"))
	for name, k := range base {
		if same[name] != k {
			t.Errorf("unused=b changed %s's key", name)
		}
	}
	debug := keysWith(t, dir, set("debug", "true"))
	if debug["lib.toml"] != base["lib.toml"] {
		t.Errorf("debug=true changed lib.toml's key, which reads no option")
	}
	if debug["app.toml"] == base["app.toml"] {
		t.Errorf("debug=true left app.toml's key as it was")
	}
	tests := keysWith(t, dir, set("features", "tests,docs"))
	if _, ok := tests["extra.toml"]; !ok || tests["app.toml"] == base["app.toml"] || tests["lib.toml"] != base["lib.toml"] {
		t.Errorf("features=tests,docs: keys %v, want extra.toml added and only app.toml's key changed", tests)
	}
}

// A conditional block merges its fragments: the variable, an appended dependency and a
// config key.
func TestConditionalFragmentsMerge(t *testing.T) {
	dir := writeProject(t, optionsProject)
	g, _, err := loadWithOptions(dir, "", set("debug", "true"), set("features", "tests"))
	if err != nil {
		t.Fatal(err)
	}
	app := g.Elements["app.toml"]
	if got := strings.Join(app.Depends, " "); got != "lib.toml extra.toml" {
		t.Errorf("depends %q, want lib.toml extra.toml", got)
	}
	r, err := app.Resolve(g.Project, keyPaths())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Commands["build-commands"], ";") + "|" + strings.Join(r.Commands["install-commands"], ";"); got != "cc -O0 -g|make check" {
		t.Errorf("commands %q", got)
	}
	if v := g.Project.Variables["debug"]; v != "true" {
		t.Errorf("%%{debug} = %q, want true", v)
	}
}

// The parse cache keys a conditional file's parse by the option values: a changed
// option never reuses the parse made under the old values, while files without [[if]]
// blocks are still answered from the cache.
func TestParseCacheKeysConditionalFilesByOptions(t *testing.T) {
	dir := writeProject(t, optionsProject)
	cacheDir := t.TempDir()
	if _, _, err := loadWithOptions(dir, cacheDir); err != nil {
		t.Fatal(err)
	}
	g, pc, err := loadWithOptions(dir, cacheDir, set("debug", "true"))
	if err != nil {
		t.Fatal(err)
	}
	if got := pc.hits.Load(); got != 1 {
		t.Errorf("%d files answered by the cache, want 1 (lib.toml; app.toml reads options)", got)
	}
	want := keysWith(t, dir, set("debug", "true"))
	if g.Elements["app.toml"].Key != want["app.toml"] {
		t.Errorf("app.toml's key through the cache after debug=true is not the key without it: a stale parse")
	}
	// Same values again: the conditional file's parse is reused too.
	if _, pc, err = loadWithOptions(dir, cacheDir, set("debug", "true")); err != nil {
		t.Fatal(err)
	}
	if got := pc.hits.Load(); got != 2 {
		t.Errorf("%d files answered by the cache under the same values, want 2", got)
	}
}

func TestOptionSettingErrors(t *testing.T) {
	dir := writeProject(t, optionsProject)
	for _, c := range []struct {
		s    OptionSetting
		want string
	}{
		{set("debg", "true"), `--option debg=true: unknown option "debg" (did you mean "debug"?); options: arch, debug, features, unused`},
		{set("debug", "yes"), `--option debug=yes: option "debug" is a bool: expected true or false`},
		{set("unused", "zzz"), `--option unused=zzz: "zzz" is not a value of option "unused": expected one of a, b`},
		{set("arch", "aarch6"), `--option arch=aarch6: "aarch6" is not a value of option "arch" (did you mean "aarch64"?): expected one of x86_64, aarch64, i686, armv7l, ppc64le, s390x, riscv64`},
		{set("features", "docs,test"), `--option features=docs,test: "test" is not a flag of option "features" (did you mean "tests"?): expected a comma-separated list of tests, docs`},
		{OptionSetting{Name: "debug", Value: "1", File: "config.toml", Line: 3}, `config.toml:3: option debug=1: option "debug" is a bool: expected true or false`},
	} {
		_, err := loadProjectWith(dir, layers(c.s))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.s, err, c.want)
		}
	}
}

// The command line wins over the user configuration, which wins over the default;
// flags are kept in their declared order.
func TestOptionPrecedence(t *testing.T) {
	dir := writeProject(t, optionsProject)
	p, err := loadProjectWith(dir, func(name string) [][]OptionSetting {
		if name != "opts" {
			t.Errorf("layers asked for project %q", name)
		}
		user := []OptionSetting{set("debug", "true"), set("unused", "b")}
		cli := []OptionSetting{set("debug", "False"), set("features", "docs,tests")}
		return [][]OptionSetting{user, cli}
	})
	if err != nil {
		t.Fatal(err)
	}
	got := p.OptionValues
	if got["debug"] != "false" || got["unused"] != "b" || got["features"] != "tests,docs" || got["arch"] != hostArch() {
		t.Errorf("values %v", got)
	}
	if p.Variables["debug"] != "false" {
		t.Errorf("%%{debug} = %q", p.Variables["debug"])
	}
}

func TestGoArchToUname(t *testing.T) {
	for goarch, want := range map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686", "arm": "armv7l", "ppc64le": "ppc64le", "riscv64": "riscv64"} {
		if got := goArchToUname(goarch); got != want {
			t.Errorf("%s: %s, want %s", goarch, got, want)
		}
	}
}

func TestOptionDeclarationErrors(t *testing.T) {
	for _, c := range []struct{ decl, want string }{
		{"[options.debug]\ntype = \"boolean\"\n", "project.toml:3: key \"options.debug.type\": unknown option type \"boolean\" (did you mean \"bool\"?); types: bool, enum, flags, arch\n    type = \"boolean\""},
		{"[options.debug]\ndefault = true\n", "project.toml:2: option \"debug\" has no type\ntypes: bool, enum, flags, arch"},
		{"[options.debug]\ntype = \"bool\"\nvalue = true\n", "project.toml:4: unknown key \"value\" in [options.debug] (did you mean \"values\"?)\n    value = true\nknown keys: type, description, values, default, variable"},
		{"[options.debug]\ntype = \"bool\"\ndefault = \"yes\"\n", "project.toml:4: key \"options.debug.default\": expected true or false, found a string\n    default = \"yes\""},
		{"[options.debug]\ntype = \"bool\"\nvalues = [\"a\"]\n", "project.toml:4: key \"options.debug.values\": a bool option takes no values: it is true or false\n    values = [\"a\"]"},
		{"[options.mode]\ntype = \"enum\"\nvalues = [\"a\", \"b\"]\ndefault = \"zzz\"\n", "project.toml:5: key \"options.mode.default\": \"zzz\" is not one of the option's values: a, b\n    default = \"zzz\""},
		{"[options.mode]\ntype = \"enum\"\nvalues = [\"a\", \"b\"]\n", "project.toml:2: key \"options.mode\": an enum option needs a default, one of a, b\n    [options.mode]"},
		{"[options.mode]\ntype = \"enum\"\n", "project.toml:2: key \"options.mode\": a enum option needs a list of values\n    [options.mode]"},
		{"[options.mode]\ntype = \"flags\"\nvalues = [\"a\", \"a\"]\n", "project.toml:4: key \"options.mode.values\": \"a\" is listed twice\n    values = [\"a\", \"a\"]"},
		{"[options.mode]\ntype = \"flags\"\nvalues = [\"a,b\"]\n", "project.toml:4: key \"options.mode.values\": value 1 \"a,b\" is not valid: it must be non-empty, without ',' or quotes\n    values = [\"a,b\"]"},
		{"[options.mode]\ntype = \"flags\"\nvalues = [\"a\"]\ndefault = [\"zzz\"]\n", "project.toml:5: key \"options.mode.default\": \"zzz\" is not one of the option's values: a\n    default = [\"zzz\"]"},
		{"[options.arch]\ntype = \"arch\"\nvalues = [\"x86_64\"]\ndefault = \"x86_64\"\n", "project.toml:5: key \"options.arch.default\": an arch option takes no default: it is the host's architecture (" + hostArch() + ") unless set with --option arch=VALUE\n    default = \"x86_64\""},
		{"[options.arch]\ntype = \"arch\"\nvalues = [\"sparc\"]\n", "project.toml: option \"arch\": the host's architecture \"" + hostArch() + "\" is not one of its values (sparc)\nset it with --option arch=VALUE, or add \"" + hostArch() + "\" to its values"},
		{"[options.and]\ntype = \"bool\"\n", "project.toml:2: option name \"and\" is not valid: use lowercase letters, digits, '_' and '-', starting with a letter, and none of and, or, not, in, true, false\n    [options.and]"},
		{"[options.debug]\ntype = \"bool\"\nvariable = \"max-jobs\"\n", "project.toml:4: key \"options.debug.variable\": %{max-jobs} is set by gantry and cannot be an option's variable\n    variable = \"max-jobs\""},
		{"[variables]\ndebug = \"x\"\n[options.debug]\ntype = \"bool\"\nvariable = \"debug\"\n", "project.toml:3: key \"variables.debug\": %{debug} is option \"debug\"'s variable: remove it from [variables] (the option sets it)\n    debug = \"x\""},
		{"[options.debug]\ntype = \"bool\"\n[[if]]\ncondition = 'debug == \"on\"'\n", "project.toml:5:23: in the condition of if[0]: option \"debug\" cannot be \"on\": expected one of true, false\n    condition = 'debug == \"on\"'\n                          ^"},
		{"[options.debug]\ntype = \"bool\"\n[[if]]\nvariables.x = \"1\"\n", "project.toml:4: [[if]] block if[0] has no condition\n    [[if]]\nadd a line like condition = 'arch == \"aarch64\" and debug'"},
		{"[options.debug]\ntype = \"bool\"\n[[if]]\ncondition = 'debug'\nconfig.x = \"1\"\n", "project.toml:6: unknown key \"config\" in [if[0]]\n    config.x = \"1\"\nknown keys: condition, variables, environment"},
	} {
		dir := writeProject(t, map[string]string{"project.toml": "name = \"p\"\n" + c.decl})
		_, err := loadProject(dir)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.decl, err, c.want)
		}
	}
}

// project.toml's own [[if]] blocks set project variables and environment.
func TestProjectConditionals(t *testing.T) {
	dir := writeProject(t, map[string]string{"project.toml": `name = "p"
[variables]
opt = "-O2"
[options.debug]
type = "bool"
[[if]]
condition = "debug"
variables.opt = "-O0"
environment.DEBUG = "1"
`})
	for _, c := range []struct{ debug, opt, env string }{{"false", "-O2", ""}, {"true", "-O0", "1"}} {
		p, err := loadProjectWith(dir, layers(set("debug", c.debug)))
		if err != nil {
			t.Fatal(err)
		}
		if p.Variables["opt"] != c.opt || p.Environment["DEBUG"] != c.env {
			t.Errorf("debug=%s: opt %q DEBUG %q", c.debug, p.Variables["opt"], p.Environment["DEBUG"])
		}
	}
}

func TestElementBlockErrors(t *testing.T) {
	for _, c := range []struct{ app, want string }{
		{"kind = \"stack\"\n[[if]]\ncondition = 'debug and'\n", "elements/app.toml:3:23: in the condition of if[0]: unexpected the end of the condition: expected an option name, a quoted value, not or (\n    condition = 'debug and'\n                          ^"},
		{"kind = \"stack\"\n[[if]]\ncondition = 'dbug'\n", "elements/app.toml:3:14: in the condition of if[0]: unknown option \"dbug\" (did you mean \"debug\"?); options: arch, debug, features, unused\n    condition = 'dbug'\n                 ^"},
		{"kind = \"stack\"\n[[if]]\ncondition = 'debug'\n[[if]]\ncondition = 'debug'\ndepend = [\"x.toml\"]\n", "elements/app.toml:6: unknown key \"depend\" in [if[1]] (did you mean \"depends\"?)\n    depend = [\"x.toml\"]\nknown keys: condition, variables, environment, config, depends, build-depends, runtime-depends, sources"},
		{"kind = \"stack\"\n[[if]]\ncondition = 'not debug'\ndepends = [\"../x.toml\"]\n", "elements/app.toml:4: key \"if[0].depends\": element name \"../x.toml\" contains '.' or '..': name elements by their path under element-path\n    depends = [\"../x.toml\"]"},
		{"kind = \"manual\"\n[[if]]\ncondition = 'not debug'\n[if.config]\nbuild-comands = [\"make\"]\n", "elements/app.toml:5: unknown key \"build-comands\" in [config] (did you mean \"build-commands\"?)\n    build-comands = [\"make\"]\nknown keys: configure-commands, build-commands, install-commands"},
		{"kind = \"manual\"\n[[if]]\ncondition = 'not debug'\n[[if.sources]]\nkind = \"local\"\n", "elements/app.toml:4: local source 1 needs a path"},
		{"kind = \"manual\"\n[[if]]\ncondition = 'debug'\n[[if.sources]]\nkind = \"tar\"\nurl = \"x\"\npth = \"y\"\n", "elements/app.toml:7: unknown key \"pth\" in [if[0].sources[0]]\n    pth = \"y\"\nknown keys: kind, url, ref, track, directory, base-dir"},
		{"kind = \"manual\"\n[[if]]\ncondition = 'not debug'\nvariables.x = 1\n", "elements/app.toml:4: key \"if[0].variables.x\": expected a string, found an integer\n    variables.x = 1"},
		// { prepend, append } in a block
		{"kind = \"manual\"\n[[if]]\ncondition = 'not debug'\n[if.config]\nbuild-commands = { apend = [\"x\"] }\n", "elements/app.toml:5: unknown key \"apend\" in [if[0].config.build-commands] (did you mean \"append\"?)\n    build-commands = { apend = [\"x\"] }\nknown keys: append, prepend"},
		{"kind = \"manual\"\n[[if]]\ncondition = 'not debug'\n[if.config]\nbuild-commands = { append = \"x\" }\n", "elements/app.toml:5: key \"if[0].config.build-commands.append\": expected a list of strings, found a string\n    build-commands = { append = \"x\" }"},
		{"kind = \"import\"\n[config]\ntarget = \"/\"\n[[if]]\ncondition = 'not debug'\n[if.config]\ntarget = { append = [\"x\"] }\n", "elements/app.toml:7: key \"if[0].config.target\": { append, prepend } composes a list, and the value before this block is a string\n    target = { append = [\"x\"] }"},
	} {
		_, err := loadApp(t, c.app)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.app, err, c.want)
		}
	}
}

// A block composes a config list with { prepend, append }: over the file's list, an
// earlier block's, or the kind's default commands.
func TestBlocksComposeLists(t *testing.T) {
	for _, c := range []struct{ app, want string }{
		{"kind = \"make\"\n[[if]]\ncondition = 'not debug'\n[if.config]\nbuild-commands = { append = [\"make check\"] }\n", "make %{make-args};make check"},
		{"kind = \"manual\"\n[config]\nbuild-commands = [\"a\"]\n[[if]]\ncondition = 'not debug'\nconfig.build-commands = { prepend = [\"p\"] }\n[[if]]\ncondition = 'not debug'\nconfig.build-commands = { append = [\"z\"], prepend = [\"q\"] }\n", "q;p;a;z"},
		{"kind = \"manual\"\n[config]\nbuild-commands = [\"a\"]\n[[if]]\ncondition = 'debug'\nconfig.build-commands = { append = [\"z\"] }\n", "a"},
		{"kind = \"manual\"\n[config]\nbuild-commands = [\"a\"]\n[[if]]\ncondition = 'not debug'\nconfig.build-commands = [\"b\"]\n", "b"},
	} {
		g, err := loadApp(t, c.app)
		if err != nil {
			t.Errorf("%s: %v", c.app, err)
			continue
		}
		if got := strings.Join(g.Elements["app.toml"].Config.Commands["build-commands"], ";"); got != c.want {
			t.Errorf("%s: %q, want %q", c.app, got, c.want)
		}
	}
}

// An error found after loading in a key a block set names the block's line, whether
// the file was parsed by this load or came from the parse cache.
func TestBlockErrorLinesThroughTheParseCache(t *testing.T) {
	files := with(optionsProject, "elements/app.toml", `kind = "manual"
[config]
build-commands = ["make"]
[[if]]
condition = 'not debug'
[if.config]
build-commands = ["make %{nope}"]
`)
	dir := writeProject(t, with(files, "project.toml", files["project.toml"]+"[variables]\nnope = \"x\"\n"))
	cacheDir := t.TempDir()
	if _, _, err := loadWithOptions(dir, cacheDir); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "project.toml"), files["project.toml"])
	p, err := loadProject(dir)
	if err != nil {
		t.Fatal(err)
	}
	pc := OpenParseCache(cacheDir, dir)
	_, err = LoadCached(p, &Lock{}, []string{"app.toml"}, pc)
	want := "elements/app.toml:7: in config.build-commands: undefined variable %{nope}\n    build-commands = [\"make %{nope}\"]"
	if err == nil || err.Error() != want {
		t.Fatalf("\n got %v\nwant %s", err, want)
	}
	if pc.hits.Load() != 1 {
		t.Fatalf("the parse cache answered for %d files, want app.toml", pc.hits.Load())
	}
}

// loadApp loads optionsProject with app as elements/app.toml, options at their defaults.
func loadApp(t *testing.T, app string) (*Graph, error) {
	g, _, err := loadWithOptions(writeProject(t, with(optionsProject, "elements/app.toml", app)), "")
	return g, err
}
