package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/element"
)

type showOptions struct {
	*globalOptions
	deps    string
	format  string
	options bool     // --options: the project's options instead of elements
	args    []string // the targets
}

const defaultShowFormat = "%{state: >12} %{short-key} %{name}"

var showPlaceholders = []string{"name", "key", "full-key", "short-key", "state", "kind", "description",
	"deps", "build-deps", "runtime-deps", "run-deps", "workspace", "junction-project", "junction-dir", "weak-key", "strict-key"}

// newShowCmd is `gantry show`; runF, when not nil, runs instead of runShow (tests).
func newShowCmd(g *globalOptions, runF func(*showOptions) error) *cobra.Command {
	opts := &showOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "show [ELEMENT...]",
		Short: "Show elements, their cache keys and states, dependencies first",
		Long: `Show prints one line per element, dependencies first.

States: no-ref (run 'gantry track'), waiting (a dependency is not built), fetch-needed,
buildable, cached, failed; reused (non-strict: cached by its weak key although a
dependency changed); junction for a junction named itself (it holds a project and is
never built).

Format placeholders: %{name} %{key} (also %{full-key}) %{short-key} %{state} %{kind}
%{description}; %{weak-key} (its own inputs and the names of what it stages) and
%{strict-key} (the key strict mode gives: %{key} differs only in a non-strict session,
where it is the reused artifact's key, or the key a build against those is stored
under); the direct dependencies as a YAML list, as BuildStream prints them:
%{deps} %{build-deps} %{runtime-deps}; %{run-deps} is the runtime ones comma-separated;
%{workspace} is the directory of its open workspace, if any (the default format marks
workspace elements); %{junction-project} and %{junction-dir} are, for a junction, the
name of the project it holds and the directory it is loaded from (the default format
says both). A placeholder may carry a fill, alignment and width: %{state: >12}.

--format json prints one JSON object per element instead, for scripts.

--options prints the project's options instead, one NAME=VALUE line each, sorted by
name, with the values this command would load the project with (--option, the user
configuration, the defaults).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runShow(opts)
		},
	}
	cmd.Flags().StringVar(&opts.deps, "deps", "all", "which dependencies to show: none, run, build or all")
	cmd.Flags().StringVar(&opts.format, "format", defaultShowFormat, "line `FORMAT` (see above), or json")
	cmd.Flags().BoolVar(&opts.options, "options", false, "print the project's options as NAME=VALUE lines instead of elements")
	return cmd
}

func runShow(opts *showOptions) error {
	deps, err := element.ParseDeps(opts.deps)
	if err != nil {
		return usagef("%v", err)
	}
	asJSON := opts.format == "json"
	format, err := parseFormat(opts.format, showPlaceholders)
	if err != nil {
		return err
	}
	s := opts.session()
	s.junctionTargets, s.junctionProjects = true, true // a junction is shown as bst shows it
	if err := s.loadProject(); err != nil {
		return err
	}
	if opts.options {
		if len(opts.args) > 0 {
			return usagef("show --options takes no elements")
		}
		for _, name := range s.project.OptionNames() {
			fmt.Fprintf(opts.ios.Out, "%s=%s\n", name, s.project.OptionValues[name])
		}
		return nil
	}
	// A strict show that prints no weak key has none computed (three of the five hashes
	// of each element on a first load): a non-strict session finds artifacts by them.
	s.project.NoWeakKeys = !asJSON && !strings.Contains(opts.format, "%{weak-key") && s.strictSession()
	g, save, err := s.loadGraphUnsaved(opts.args)
	if err != nil {
		return err
	}
	// The parse cache is written on the other core while the lines are made and printed
	// (a fifth of a first show of 100,000 elements when it came first).
	saved := make(chan error, 1)
	go func() { saved <- save() }()
	defer func() { s.warnUnsaved(<-saved) }()
	elements := g.Select(g.Targets, deps)
	states := make([]element.State, len(elements)) // "" unless asked for
	if asJSON || strings.Contains(opts.format, "%{state") {
		c, err := s.findCache() // a cache not made yet: every artifact missing, nothing saved
		if err != nil {
			return err
		}
		q, err := actions.CacheQuery{Cache: c}.WithArtifacts(g.Project.Name, elements)
		if err != nil {
			opts.ios.Message("warning", err.Error()+" (show is slower next time; nothing else is affected)")
		}
		states = g.States(elements, q)
	}
	w := bufio.NewWriterSize(opts.ios.Out, 64<<10)
	defer w.Flush()
	enc := json.NewEncoder(w)
	var line []byte
	for i, e := range elements {
		var j *showJunction
		if e.IsJunction() {
			j = junctionOf(g, e)
		}
		if asJSON {
			d := directDeps(e)
			if err := enc.Encode(showJSON{Name: e.Name, Key: e.Key, WeakKey: e.WeakKey, StrictKey: e.StrictKey, State: string(states[i]), Kind: e.Kind.Name,
				Description: e.Description, Deps: d.all, BuildDeps: d.build, RuntimeDeps: d.runtime,
				Junction: j}); err != nil {
				return err
			}
			continue
		}
		line = format.appendLine(line[:0], func(name string) string { return showValue(name, e, states[i], j) })
		w.Write(line)
		if opts.format == defaultShowFormat {
			if e.Workspace != "" {
				w.WriteString(" (workspace: " + e.Workspace + ")")
			}
			if j != nil {
				w.WriteString(" (" + j.String() + ")")
			}
		}
		w.WriteByte('\n')
	}
	return nil
}

// showValue is placeholder name's value for e, in state; j describes e if it is a
// junction (nil otherwise).
func showValue(name string, e *element.Element, state element.State, j *showJunction) string {
	switch name {
	case "name":
		return e.Name
	case "key", "full-key":
		return e.Key
	case "short-key":
		return e.ShortKey()
	case "state":
		return string(state)
	case "kind":
		return e.Kind.Name
	case "description":
		return e.Description
	case "deps":
		return yamlList(directDeps(e).all)
	case "build-deps":
		return yamlList(directDeps(e).build)
	case "runtime-deps":
		return yamlList(directDeps(e).runtime)
	case "run-deps":
		return joinNames(e.RunDeps, ",")
	case "workspace":
		return e.Workspace
	case "junction-project":
		if j != nil {
			return j.Project
		}
	case "junction-dir":
		if j != nil {
			return j.Dir
		}
	case "weak-key":
		return e.WeakKey
	case "strict-key":
		return e.StrictKey
	}
	return "" // parseFormat accepts showPlaceholders only
}

// showJSON is one element in `show --format json`.
type showJSON struct {
	Name        string        `json:"name"`
	Key         string        `json:"key"` // "" when a source has no ref
	State       string        `json:"state"`
	Kind        string        `json:"kind"`
	Description string        `json:"description,omitempty"`
	Deps        []string      `json:"deps"`
	BuildDeps   []string      `json:"build-deps"`
	RuntimeDeps []string      `json:"runtime-deps"`
	WeakKey     string        `json:"weak-key"`           // "" when key is ""
	StrictKey   string        `json:"strict-key"`         // key, but in a non-strict session
	Junction    *showJunction `json:"junction,omitempty"` // for a junction
}

// showJunction is what show says of a junction: the project it holds and where from.
type showJunction struct {
	Project string `json:"project,omitempty"` // "" when it has no ref: not loaded
	Dir     string `json:"dir,omitempty"`     // where it is loaded from: a local source's directory, or its staged copy
	Source  string `json:"source"`            // its source, as errors describe it
	Ref     string `json:"ref,omitempty"`     // the source's ref (tar, git), from the lock unless pinned
	Pinned  bool   `json:"pinned,omitempty"`  // the ref is written in the junction's file: track leaves it
}

// junctionOf describes junction e of g (loaded with element.LoadShowingJunctions).
func junctionOf(g *element.Graph, e *element.Element) *showJunction {
	s := &e.Sources[0] // a junction has one source (checked at load)
	j := &showJunction{Source: s.Describe(), Ref: s.Ref, Pinned: s.Pinned}
	if p, dir := g.Holds(e); p != nil {
		j.Project, j.Dir = p.Name, dir
	}
	return j
}

// String is the default format's note on a junction.
func (j *showJunction) String() string {
	switch {
	case j.Project == "":
		return "junction: no ref for " + j.Source
	case j.Ref == "":
		return fmt.Sprintf("junction: project %s in %s", j.Project, j.Dir)
	}
	from := "gantry.lock"
	if j.Pinned {
		from = "pinned in its file"
	}
	return fmt.Sprintf("junction: project %s in %s, from %s at %s (%s)", j.Project, j.Dir, j.Source, j.Ref, from)
}

// dependencyNames are an element's direct dependencies by name, in BuildStream's
// order: build-depends, then depends, then runtime-depends.
type dependencyNames struct{ all, build, runtime []string }

func directDeps(e *element.Element) dependencyNames {
	d := dependencyNames{
		build:   slices.Concat(e.BuildDepends, e.Depends),
		runtime: slices.Concat(e.Depends, e.RuntimeDepends),
	}
	// A set, not slices.Contains: a target may have tens of thousands of dependencies.
	seen := make(map[string]bool, len(d.build)+len(e.RuntimeDepends))
	for _, n := range slices.Concat(d.build, e.RuntimeDepends) {
		if !seen[n] {
			seen[n] = true
			d.all = append(d.all, n)
		}
	}
	for _, l := range []*[]string{&d.all, &d.build, &d.runtime} {
		if *l == nil {
			*l = []string{}
		}
	}
	return d
}

// yamlList renders names as a YAML block list, "[]" when empty.
func yamlList(names []string) string {
	if len(names) == 0 {
		return "[]"
	}
	return "- " + strings.Join(names, "\n- ")
}

// joinNames joins the elements' names with sep.
func joinNames(list []*element.Element, sep string) string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.Name
	}
	return strings.Join(out, sep)
}
