package cli

import (
	"bufio"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/element"
)

type graphOptions struct {
	*globalOptions
	deps string
	args []string // the targets
}

// newGraphCmd is `gantry graph`; runF, when not nil, runs instead of runGraph (tests).
func newGraphCmd(g *globalOptions, runF func(*graphOptions) error) *cobra.Command {
	opts := &graphOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "graph [ELEMENT...]",
		Short: "Print the dependency graph as Graphviz DOT",
		Long: `Print the dependency graph of the elements as Graphviz DOT, for example:

    gantry graph app.toml | dot -Tsvg > graph.svg

Solid edges are build-and-run dependencies (depends), dashed are build-only
(build-depends), dotted are runtime-only (runtime-depends).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runGraph(opts)
		},
	}
	cmd.Flags().StringVar(&opts.deps, "deps", "all", "which dependencies to include: none, run, build or all")
	return cmd
}

func runGraph(opts *graphOptions) error {
	d, err := element.ParseDeps(opts.deps)
	if err != nil {
		return usagef("%v", err)
	}
	s := opts.session()
	if err := s.loadProject(); err != nil {
		return err
	}
	gr, err := s.loadGraph(opts.args)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(opts.ios.Out)
	defer w.Flush()
	writeDOT(w, s.project.Name, gr.Select(gr.Targets, d))
	return nil
}

func writeDOT(w *bufio.Writer, project string, elements []*element.Element) {
	in := map[string]bool{}
	for _, e := range elements {
		in[e.Name] = true
	}
	fmt.Fprintf(w, "digraph %s {\n  rankdir=LR;\n  node [shape=box];\n", strconv.Quote(project))
	for _, e := range elements {
		fmt.Fprintf(w, "  %s [label=%s];\n", strconv.Quote(e.Name), strconv.Quote(e.Name+"\n"+e.Kind.Name))
	}
	edge := func(from *element.Element, dep string, style string) {
		if to := from.DepName(dep); in[to] { // the graph's name: through a junction, qualified
			fmt.Fprintf(w, "  %s -> %s%s;\n", strconv.Quote(from.Name), strconv.Quote(to), style)
		}
	}
	for _, e := range elements {
		for _, d := range e.Depends {
			edge(e, d, "")
		}
		for _, d := range e.BuildDepends {
			edge(e, d, " [style=dashed]")
		}
		for _, d := range e.RuntimeDepends {
			edge(e, d, " [style=dotted]")
		}
	}
	w.WriteString("}\n")
}
