package element

import (
	"slices"
	"sort"
)

// Kind describes an element kind: which [config] keys it takes and its defaults.
type Kind struct {
	Name string
	// Commands is true for kinds that run command lists (manual and the presets).
	Commands bool
	// ConfigKeys are the keys allowed in [config].
	ConfigKeys []string
	// TableKeys are the ConfigKeys whose values are tables (a junction's options and
	// overrides): layers merge them entry by entry, where a table over a list key is a
	// { prepend, append } composition.
	TableKeys []string
	// DefaultCommands are the preset's commands, overridable key by key.
	DefaultCommands map[string][]string
	// Variables are the preset's default variables (project and element override them).
	Variables map[string]string
	// StrictRebuild kinds only rearrange their dependencies' files: their weak key holds
	// their dependencies' weak keys, not just names, so a non-strict session rebuilds
	// them whenever one of those is rebuilt (BuildStream's BST_STRICT_REBUILD).
	StrictRebuild bool
}

// CommandSteps returns the command lists of a manual-like kind, in the order they run.
func CommandSteps() []string { return slices.Clone(commandSteps) }

var commandSteps = []string{"configure-commands", "build-commands", "install-commands"}

// noCommands are the commands of files that set none or set one step to an empty list
// (nil, as the parse cache reads it back, or []), one map of each shape shared by every
// element with it (sharedCommands).
var noCommands = func() map[string]map[string][]string {
	shared := map[string]map[string][]string{"": {}}
	for _, step := range commandSteps {
		shared[step+" nil"] = map[string][]string{step: nil}
		shared[step+" []"] = map[string][]string{step: {}}
	}
	return shared
}()

// sharedCommands is commands, or the map of noCommands equal to it: a manual element
// with `build-commands = []` had a map of its own, a sixth of the live heap of a graph of
// 100,000 such elements. Commands maps are never modified once loaded (mergeLayers).
func sharedCommands(commands map[string][]string) map[string][]string {
	if commands == nil || len(commands) > 1 {
		return commands
	}
	key := ""
	for step, list := range commands {
		if len(list) > 0 {
			return commands
		}
		key = step + " []"
		if list == nil {
			key = step + " nil"
		}
	}
	if shared, ok := noCommands[key]; ok {
		return shared
	}
	return commands
}

var makeInstall = []string{`make -j1 DESTDIR="%{install-root}" install`}

var kinds = map[string]*Kind{
	"import": {Name: "import", ConfigKeys: []string{"source", "target"}},
	"stack":  {Name: "stack"},
	// A junction holds another project in its sources (junction.go): it is not built.
	junctionKind: {Name: junctionKind, ConfigKeys: []string{"options", "overrides"}, TableKeys: []string{"options", "overrides"}},
	"compose":    {Name: "compose", ConfigKeys: []string{"include", "exclude", "include-orphans", "integrate"}, StrictRebuild: true},
	// A filter keeps split domains of its one build dependency's artifact (public.go).
	"filter": {Name: "filter", ConfigKeys: []string{"include", "exclude", "include-orphans"}, StrictRebuild: true},
	"manual": {Name: "manual", Commands: true, ConfigKeys: commandSteps},
	"make": {Name: "make", Commands: true, ConfigKeys: commandSteps,
		Variables: map[string]string{"make-args": "-j%{max-jobs}"},
		DefaultCommands: map[string][]string{
			"build-commands":   {"make %{make-args}"},
			"install-commands": makeInstall,
		}},
	"autotools": {Name: "autotools", Commands: true, ConfigKeys: commandSteps,
		Variables: map[string]string{
			"make-args": "-j%{max-jobs}",
			"conf-args": "--prefix=%{prefix} --bindir=%{bindir} --libdir=%{libdir} --sysconfdir=%{sysconfdir}",
		},
		DefaultCommands: map[string][]string{
			"configure-commands": {"./configure %{conf-args}"},
			"build-commands":     {"make %{make-args}"},
			"install-commands":   makeInstall,
		}},
	"cmake": {Name: "cmake", Commands: true, ConfigKeys: commandSteps,
		Variables: map[string]string{"cmake-args": "-DCMAKE_BUILD_TYPE=RelWithDebInfo"},
		DefaultCommands: map[string][]string{
			"configure-commands": {`cmake -B _build -S . -DCMAKE_INSTALL_PREFIX:PATH="%{prefix}" %{cmake-args}`},
			"build-commands":     {"cmake --build _build --parallel %{max-jobs}"},
			"install-commands":   {`env DESTDIR="%{install-root}" cmake --install _build`},
		}},
	"meson": {Name: "meson", Commands: true, ConfigKeys: commandSteps,
		Variables: map[string]string{"meson-args": "--buildtype=debugoptimized"},
		DefaultCommands: map[string][]string{
			"configure-commands": {"meson setup _build --prefix=%{prefix} %{meson-args}"},
			"build-commands":     {"ninja -C _build -j %{max-jobs}"},
			"install-commands":   {`env DESTDIR="%{install-root}" ninja -C _build install`},
		}},
}

// LookupKind returns the kind named name.
func LookupKind(name string) (*Kind, bool) {
	k, ok := kinds[name]
	return k, ok
}

// kindNames lists the known kinds, sorted.
func kindNames() []string {
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
