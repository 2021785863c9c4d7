package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
)

// transferOptions are the options of pull and push.
type transferOptions struct {
	*globalOptions
	schedulerFlags
	remoteFlags
	deps string
	push bool     // push, not pull
	args []string // the targets
}

// newPullCmd is `gantry pull`; runF, when not nil, runs instead of runTransfer (tests).
func newPullCmd(g *globalOptions, runF func(*transferOptions) error) *cobra.Command {
	opts := &transferOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "pull [ELEMENT...]",
		Short: "Download elements' artifacts from remote artifact caches",
		Long: `Pull downloads the artifacts of the elements (default: the project's
default-targets) that the local cache lacks, trying the remotes in order (the user
config's [[remote]], then project.toml's, or --remote). Every blob is verified against
its digest before it is stored. An artifact no remote has is skipped. A remote that
serves bytes that do not match their digest makes pull exit 1.`,
		RunE: opts.runE(runF),
	}
	opts.register(cmd, "pulled from")
	return cmd
}

// newPushCmd is `gantry push`; runF, when not nil, runs instead of runTransfer (tests).
func newPushCmd(g *globalOptions, runF func(*transferOptions) error) *cobra.Command {
	opts := &transferOptions{globalOptions: g, push: true}
	cmd := &cobra.Command{
		Use:   "push [ELEMENT...]",
		Short: "Upload elements' artifacts to remote artifact caches",
		Long: `Push uploads the cached artifacts of the elements (default: the project's
default-targets) to every push remote (push = true in [[remote]], or --remote) that
lacks them: blobs first, the artifact's entry last. Every blob is hashed as it is
read: one found damaged in the local cache is never uploaded; its artifact is dropped
(build it again) and push exits 1.`,
		RunE: opts.runE(runF),
	}
	opts.register(cmd, "pushed to")
	return cmd
}

// runE is the RunE of pull and push: runTransfer, or runF when not nil.
func (o *transferOptions) runE(runF func(*transferOptions) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		o.args = args
		if runF != nil {
			return runF(o)
		}
		return runTransfer(o)
	}
}

func (o *transferOptions) register(cmd *cobra.Command, what string) {
	if o.push {
		o.schedulerFlags.register(cmd, flagOnError|flagPushers|flagSandbox, "push the artifacts of builds in this sandbox")
	} else {
		o.schedulerFlags.register(cmd, flagOnError|flagFetchers|flagSandbox, "pull the artifacts of builds in this sandbox")
	}
	o.remoteFlags.register(cmd, what)
	cmd.Flags().StringVar(&o.deps, "deps", "none", "which elements: none (the targets), run (and what they need at run time) or all")
}

// runTransfer runs a pull or push session over the selected elements.
func runTransfer(opts *transferOptions) error {
	push := opts.push
	deps, err := element.ParseDeps(opts.deps)
	if err != nil || deps == element.DepsBuild {
		return usagef("--deps %q: use none, run or all", opts.deps)
	}
	p, err := opts.session().pipeline(&opts.schedulerFlags, opts.args, 0)
	if err != nil {
		return err
	}
	s, g, c := p.session, p.graph, p.cache
	specs, err := s.remotes(&opts.remoteFlags, push)
	if err != nil {
		return err
	}
	rs, err := s.newRemotes(specs, nil)
	if err != nil {
		return err
	}
	defer rs.Close()
	switch {
	case len(specs) == 0:
		return usagef("no remote artifact cache: add a [[remote]] to project.toml or the user config, or pass --remote URL")
	case push && !rs.HasPush():
		return usagef("no push remote: set push = true on a [[remote]], or pass --remote URL")
	}
	q := actions.CacheQuery{Cache: c}
	var items []*queues.Item
	for _, e := range g.Select(g.Targets, deps) {
		if err := queues.MissingRef(e); err != nil {
			return err
		}
		cached := q.Of(g.Project.Name, e) == element.ArtifactSuccess
		items = append(items, &queues.Item{Element: e, Cached: cached})
	}
	var queue queues.Queue = rs.PullQueue(c, false)
	if push {
		queue = rs.PushQueue(c, true)
	}
	summary, err := s.runScheduler(schedulerRun{display: p.display, cache: c, limits: p.limits, onError: p.onError,
		queues: []queues.Queue{queue}, items: items})
	if err != nil {
		return err
	}
	if err := s.sessionError(summary); err != nil || push || len(rs.WrongPulls()) == 0 {
		return err
	}
	// Pulled intact from another remote: still, CI must notice the damaged one.
	return &failedError{msg: fmt.Sprintf("a remote served wrong bytes for %s (see the warnings), pulled intact from another remote: repair or clean the damaged remote's store",
		strings.Join(rs.WrongPulls(), ", "))}
}
