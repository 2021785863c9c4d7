package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/element"
)

type explainOptions struct {
	*globalOptions
	format  string
	sandbox string
	args    []string // the targets
}

// newExplainCmd is `gantry explain`; runF, when not nil, runs instead of runExplain (tests).
func newExplainCmd(g *globalOptions, runF func(*explainOptions) error) *cobra.Command {
	opts := &explainOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "explain [ELEMENT...]",
		Short: "Say why each element that needs building does",
		Long: `For each element the build of ELEMENTS (default: the project's default-targets)
would build, one line: never built; its own input changed (a source's ref, a local file,
a variable with its old and new value, a command, its kind); or a dependency's key
changed, followed down to the first element whose own input did; its sandbox (a build
with --sandbox bwrap never takes an artifact built on the host). The comparison is with
the most recent artifact of the same element in the local cache. In a non-strict session
(--no-strict) also each element reused although a dependency changed, naming it.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runExplain(opts)
		},
	}
	cmd.Flags().StringVar(&opts.format, "format", "text", "output format: text or json")
	cmd.Flags().StringVar(&opts.sandbox, "sandbox", defaultSandbox(), "the sandbox of the build to explain: auto, host or bwrap (default $GANTRY_SANDBOX, else auto)")
	return cmd
}

func runExplain(opts *explainOptions) error {
	if opts.format != "text" && opts.format != "json" {
		return usagef("--format %q: use text or json", opts.format)
	}
	if err := checkSandboxFlag(opts.sandbox); err != nil {
		return err
	}
	s := opts.session()
	if err := s.loadProject(); err != nil {
		return err
	}
	s.project.Hermetic = isHermetic(opts.sandbox)
	gr, err := s.loadGraph(opts.args)
	if err != nil {
		return err
	}
	c, err := s.findCache() // a cache not made yet is explained as an empty one
	if err != nil {
		return err
	}
	xs := actions.Explain(gr, c, gr.Select(gr.Targets, element.DepsAll))
	if opts.format == "json" {
		if xs == nil {
			xs = []element.Explanation{}
		}
		enc := json.NewEncoder(opts.ios.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(xs)
	}
	for _, x := range xs {
		fmt.Fprintln(opts.ios.Out, x.Text)
	}
	return nil
}
