package cli

import (
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
would build: cached elements need no sources.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runFetch(opts)
		},
	}
	opts.schedulerFlags.register(cmd)
	g.mirrors.register(cmd, false)
	cmd.Flags().StringVar(&opts.deps, "deps", "plan", "which elements: plan (what a build needs), none, run, build or all")
	return cmd
}

func runFetch(opts *fetchOptions) error {
	var reads pipelineReads
	if opts.deps == "plan" {
		reads = readOutcomes // what is cached needs no sources
	}
	p, err := opts.session().pipeline(&opts.schedulerFlags, opts.args, reads)
	if err != nil {
		return err
	}
	s, g, c, display, limits, onErr := p.session, p.graph, p.cache, p.display, p.limits, p.onError
	q := actions.CacheQuery{Cache: c, Memo: p.outcomes}
	var items []*queues.Item
	if opts.deps == "plan" {
		items, err = queues.Plan(g, g.Targets, queues.PlanOptions{
			Artifact: func(e *element.Element) element.ArtifactStatus { return q.Of(g.Project.Name, e) },
		})
		if err != nil {
			return err
		}
	} else {
		deps, err := element.ParseDeps(opts.deps)
		if err != nil {
			return usagef("%v", err)
		}
		for _, e := range g.Select(g.Targets, deps) {
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
