package cli

import (
	"bufio"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/element"
)

type showOptions struct {
	*globalOptions
	deps   string
	format string
}

const defaultShowFormat = "%{state: >12} %{short-key} %{name}"

var showPlaceholders = []string{"name", "key", "short-key", "state", "kind", "description", "build-deps", "run-deps", "workspace"}

func newShowCmd(g *globalOptions) *cobra.Command {
	opts := &showOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "show [ELEMENT...]",
		Short: "Show elements, their cache keys and states, dependencies first",
		Long: `Show prints one line per element, dependencies first.

States: no-ref (run 'gantry track'), waiting (a dependency is not built), fetch-needed,
buildable, cached, failed.

Format placeholders: %{name} %{key} %{short-key} %{state} %{kind} %{description}
%{build-deps} %{run-deps} %{workspace} (the directory of its open workspace, if
any; the default format marks workspace elements); a placeholder may carry a fill, alignment and width:
%{state: >12}.`,
		RunE: func(cmd *cobra.Command, args []string) error { return runShow(opts, args) },
	}
	cmd.Flags().StringVar(&opts.deps, "deps", "all", "which dependencies to show: none, run, build or all")
	cmd.Flags().StringVar(&opts.format, "format", defaultShowFormat, "line `FORMAT` (see above)")
	return cmd
}

func runShow(opts *showOptions, args []string) error {
	deps, err := element.ParseDeps(opts.deps)
	if err != nil {
		return usagef("%v", err)
	}
	format, err := parseFormat(opts.format, showPlaceholders)
	if err != nil {
		return err
	}
	s, err := opts.load()
	if err != nil {
		return err
	}
	g, err := s.loadGraph(args)
	if err != nil {
		return err
	}
	elements := g.Select(g.Targets, deps)
	var states map[*element.Element]element.State
	if strings.Contains(opts.format, "%{state") {
		q, err := s.cacheQuery()
		if err != nil {
			return err
		}
		states = g.States(elements, q)
	}
	w := bufio.NewWriterSize(opts.ios.Out, 64<<10)
	defer w.Flush()
	for _, e := range elements {
		w.WriteString(format.render(map[string]string{
			"name": e.Name, "key": e.Key, "short-key": e.ShortKey(), "state": string(states[e]),
			"kind": e.Kind.Name, "description": e.Description,
			"build-deps": names(e.BuildDeps), "run-deps": names(e.RunDeps), "workspace": e.Workspace,
		}))
		if e.Workspace != "" && opts.format == defaultShowFormat {
			w.WriteString(" (workspace: " + e.Workspace + ")")
		}
		w.WriteByte('\n')
	}
	return nil
}

func names(list []*element.Element) string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.Name
	}
	return strings.Join(out, ",")
}
