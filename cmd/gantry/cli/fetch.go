package cli

import (
	"slices"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
)

type fetchOptions struct {
	*globalOptions
	schedulerFlags
	deps string
	args []string // the targets
}

// newFetchCmd is `gantry fetch`; runF, when not nil, runs instead of runFetch (tests).
func newFetchCmd(g *globalOptions, runF func(*fetchOptions) error) *cobra.Command {
	opts := &fetchOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "fetch [ELEMENT...]",
		Short: "Download elements' sources into the source cache",
		Long: `Fetch downloads the sources of the elements into the source cache, so that a
build needs no network. With --deps plan (the default) it fetches what 'gantry build'
would build: cached elements need no sources. Named, a junction's own source is
fetched: the version of the project it holds.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runFetch(opts)
		},
	}
	opts.schedulerFlags.register(cmd, flagOnError|flagFetchers|flagSandbox, "fetch the sources of what builds in this sandbox would build (its keys say what is cached)")
	g.mirrors.register(cmd, false)
	cmd.Flags().StringVar(&opts.deps, "deps", "plan", "which elements: plan (what a build needs), none, run, build or all")
	return cmd
}

func runFetch(opts *fetchOptions) error {
	var reads pipelineReads
	if opts.deps == "plan" {
		reads = readOutcomes // what is cached needs no sources
	}
	opts.session().junctionTargets = true // a junction's own source: what loading its project needs
	p, err := opts.session().pipeline(&opts.schedulerFlags, opts.args, reads)
	if err != nil {
		return err
	}
	s, g, c, display, limits, onErr := p.session, p.graph, p.cache, p.display, p.limits, p.onError
	q := actions.CacheQuery{Cache: c, Memo: p.outcomes}
	// A junction is fetched itself, whatever --deps: it has no dependencies, and is
	// never built (so never cached).
	var items []*queues.Item
	targets := slices.DeleteFunc(slices.Clone(g.Targets), func(e *element.Element) bool {
		if e.IsJunction() {
			items = append(items, &queues.Item{Element: e})
		}
		return e.IsJunction()
	})
	for _, it := range items {
		if err := queues.MissingRef(it.Element); err != nil {
			return err
		}
	}
	if opts.deps == "plan" {
		planned, err := queues.Plan(g, targets, queues.PlanOptions{
			Artifact: func(e *element.Element) element.ArtifactStatus { return q.Of(g.Project.Name, e) },
		})
		if err != nil {
			return err
		}
		items = append(items, planned...)
	} else {
		deps, err := element.ParseDeps(opts.deps)
		if err != nil {
			return usagef("%v", err)
		}
		for _, e := range g.Select(targets, deps) {
			if err := queues.MissingRef(e); err != nil {
				return err
			}
			items = append(items, &queues.Item{Element: e})
		}
	}
	summary, err := s.runScheduler(schedulerRun{display: display, cache: c, limits: limits, onError: onErr,
		queues: []queues.Queue{s.sources(c).FetchQueue()}, items: items})
	if err != nil {
		return err
	}
	return s.sessionError(summary)
}
