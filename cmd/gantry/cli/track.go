package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/resources"
	"github.com/gantry-build/gantry/ui"
)

type trackOptions struct {
	*globalOptions
	schedulerFlags
	deps string
	args []string // the targets
}

// newTrackCmd is `gantry track`; runF, when not nil, runs instead of runTrack (tests).
func newTrackCmd(g *globalOptions, runF func(*trackOptions) error) *cobra.Command {
	opts := &trackOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "track [ELEMENT...]",
		Short: "Resolve sources' track (branch, tag, URL) to refs and write gantry.lock",
		Long: `Track resolves each source's 'track' to an exact ref — a git commit, a tarball's
sha256 — and records it in gantry.lock at the project root (written atomically, sorted,
one line per element). Refs written inline in an element are pinned and left alone.
It prints what changed, old ref → new ref. Named, a junction is tracked itself: its new
ref goes to this project's lock, and the next load uses that version of its project.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runTrack(opts)
		},
	}
	opts.schedulerFlags.register(cmd, flagOnError|flagFetchers, "")
	g.mirrors.register(cmd, true)
	cmd.Flags().StringVar(&opts.deps, "deps", "none", "also track dependencies: none, run, build (what the targets build on, not them) or all")
	return cmd
}

func runTrack(opts *trackOptions) error {
	deps, err := element.ParseDeps(opts.deps)
	if err != nil {
		return usagef("%v", err)
	}
	opts.session().junctionTargets = true // tracking a junction writes its ref to this project's lock
	p, err := opts.session().pipeline(&opts.schedulerFlags, opts.args, 0)
	if err != nil {
		return err
	}
	s, g, c, display, limits, onErr := p.session, p.graph, p.cache, p.display, p.limits, p.onError
	for _, t := range g.Targets {
		if _, _, staged := g.LockOf(t); staged != "" {
			return &element.ProjectError{Msg: fmt.Sprintf("cannot track %s: its project is staged from a tar or git junction, whose gantry.lock is a copy", t.Name),
				Hint: fmt.Sprintf("track it in that project's own repository, then give the junction the new version (`gantry track %s`)", staged)}
		}
	}
	selected := g.Select(g.Targets, deps)
	summary, changes, err := s.trackSession(display, c, g, selected, limits, onErr)
	if err != nil {
		return err
	}
	printChanges(opts.ios, changes)
	untracked := stagedJunctions(g, selected)
	for _, j := range untracked {
		// As bst: --deps follows elements, and a junction is not one's dependency.
		opts.ios.Info(fmt.Sprintf("the elements through junction %s are not tracked (its project is staged from its source): `gantry track %s` moves it to the newest version", j, j))
	}
	if !summary.OK() {
		return s.sessionError(summary)
	}
	if missing := queues.WithoutRef(g, g.Targets); len(missing) > 0 {
		// Sources tracked but elements still without a ref: the ones --deps left out.
		names := make([]string, len(missing))
		for i, m := range missing {
			names[i] = m.Element
		}
		opts.ios.Info(fmt.Sprintf("%s still without a ref: %s: run `gantry track --deps all %s`",
			ui.Plural(len(missing), "element"), strings.Join(names, ", "), joinNames(g.Targets, " ")))
	} else if len(changes) == 0 && len(untracked) == 0 {
		opts.ios.Info("all refs are up to date")
	}
	return s.sessionError(summary)
}

// trackSession runs the Track queue over elements and writes gantry.lock with what it
// resolved (also after a failure: what was tracked is kept).
func (s *session) trackSession(display ui.Display, c *cache.Cache, g *element.Graph, elements []*element.Element, limits map[resources.Resource]int, onErr element.OnError) (*queues.Summary, []actions.RefChange, error) {
	items := make([]*queues.Item, len(elements))
	for i, e := range elements {
		items[i] = &queues.Item{Element: e}
	}
	track := s.sources(c).Tracker(g, s.lock)
	summary, err := s.runScheduler(schedulerRun{display: display, cache: c, limits: limits, onError: onErr,
		queues: []queues.Queue{track}, items: items})
	if err != nil {
		return nil, nil, err
	}
	changes, err := track.Finish()
	return summary, changes, err
}

// stagedJunctions are the junctions, sorted, that stage the projects of elements from
// a tar or git source (their locks are copies, which track skips), but for those among
// elements themselves.
func stagedJunctions(g *element.Graph, elements []*element.Element) []string {
	var out []string
	for _, e := range elements {
		if _, _, j := g.LockOf(e); j != "" && !slices.Contains(out, j) && !slices.ContainsFunc(elements, func(t *element.Element) bool { return t.Name == j }) {
			out = append(out, j)
		}
	}
	slices.Sort(out)
	return out
}

func shortRef(r string) string {
	switch {
	case r == "":
		return "(none)"
	case len(r) > 12:
		return r[:12]
	}
	return r
}

func printChanges(ios *IOStreams, changes []actions.RefChange) {
	for _, ch := range changes {
		ios.Info(fmt.Sprintf("%s: source %d (%s): %s → %s", ch.Element, ch.Source, ch.Desc, shortRef(ch.Old), shortRef(ch.New)))
	}
}
