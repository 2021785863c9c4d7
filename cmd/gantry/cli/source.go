package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
)

func newSourceCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "source",
		Short: "Work with elements' sources",
	}
	cmd.AddCommand(newSourceCheckoutCmd(g, nil))
	return cmd
}

type sourceCheckoutOptions struct {
	*globalOptions
	deps    string
	force   bool
	tar     string // --tar FILE; "-": stdout
	element string // ELEMENT
	into    string // DIR
}

// newSourceCheckoutCmd is `gantry source checkout`; runF, when not nil, runs instead
// of runSourceCheckout (tests).
func newSourceCheckoutCmd(g *globalOptions, runF func(*sourceCheckoutOptions) error) *cobra.Command {
	opts := &sourceCheckoutOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "checkout ELEMENT [DIR] [--tar FILE]",
		Short: "Stage an element's sources (patches applied) into DIR or a tarball",
		Long: `Stage an element's sources into DIR, or with --tar FILE into a tarball (- for stdout),
as its build stages them into its build directory: every source at its directory,
patches applied. An element open in a workspace gives its workspace's files. Sources
not in the source cache are fetched first.

--deps none (the default) puts the element's sources straight into DIR; --deps run,
build or all (as for build) put each element's sources into DIR/NAME/, NAME being the
element's name without .toml, slashes made dashes (base/gcc.toml: base-gcc).

The tarball is reproducible: entries sorted, owner 0, modes 0755/0644, every time the
SOURCE_DATE_EPOCH the build gives the element's commands.`,
		Args: rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.element = args[0]
			if len(args) > 1 {
				opts.into = args[1]
			}
			if runF != nil {
				return runF(opts)
			}
			return runSourceCheckout(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.deps, "deps", "none", "also check out dependencies' sources: none, run, build or all")
	cmd.Flags().StringVar(&opts.tar, "tar", "", "write a tarball to `FILE` (- for stdout) instead of a directory")
	cmd.Flags().BoolVarP(&opts.force, "force", "f", false, "check out into a non-empty directory, or overwrite the --tar file")
	return cmd
}

func runSourceCheckout(ctx context.Context, opts *sourceCheckoutOptions) error {
	d, err := element.ParseDeps(opts.deps)
	if err != nil {
		return usagef("%v", err)
	}
	if err := opts.checkOutput(); err != nil {
		return err
	}
	s := opts.session()
	c, err := s.projectCache()
	if err != nil {
		return err
	}
	g, err := s.loadGraph([]string{s.elementArg(opts.element)})
	if err != nil {
		return err
	}
	target := g.Targets[0]
	elements := g.Select(g.Targets, d)
	for _, e := range elements {
		if e.NoRef {
			return fmt.Errorf("checking out the sources of %s: %w", target.Name, queues.MissingRef(e))
		}
	}
	// What staging says (patch's output) is shown with -v, or with the error it
	// explains: stderr stays quiet, and JSON under --ui json.
	var said bytes.Buffer
	sc := actions.SourceCheckout{Cache: c, ProjectRoot: g.Project.Root, Elements: elements, PerElement: d != element.DepsNone, Log: &said}
	if opts.verbose {
		sc.Log = opts.ios.ErrOut
	}
	if err := sc.Check(); err != nil {
		return fmt.Errorf("checking out the sources of %s: %w", target.Name, err)
	}
	if err := s.prepareCache(c); err != nil {
		return err
	}
	if err := s.fetchMissing(c, elements); err != nil {
		var fe *failedError
		if errors.As(err, &fe) {
			return &failedError{fmt.Sprintf("checking out the sources of %s: a fetch failed (see the summary above); nothing was written", target.Name)}
		}
		return err
	}
	switch opts.tar {
	case "":
		err = sc.ToDir(ctx, opts.into)
	case "-":
		err = sc.ToTar(ctx, opts.ios.Out)
	default:
		err = writeFileAtomic("the sources' tarball", opts.tar, func(w io.Writer) error { return sc.ToTar(ctx, w) })
	}
	if err != nil && said.Len() > 0 {
		return fmt.Errorf("%w; it said:\n%s", err, strings.TrimSpace(said.String()))
	}
	return err
}

// checkOutput checks DIR or --tar FILE, one of them, before anything loads: a
// non-empty DIR, or an existing FILE, only with --force.
func (opts *sourceCheckoutOptions) checkOutput() error {
	switch {
	case opts.into != "" && opts.tar != "":
		return usagef("source checkout: give DIR or --tar FILE, not both")
	case opts.into == "" && opts.tar == "":
		return usagef("source checkout: give DIR or --tar FILE (- for stdout)")
	case opts.tar == "":
		return checkoutDir(opts.into, opts.force)
	case opts.tar != "-" && !opts.force:
		if _, err := os.Lstat(opts.tar); err == nil {
			return usagef("%s exists: pass --force to overwrite it", opts.tar)
		}
	}
	return nil
}

// checkoutDir refuses to check out into dir when it is not empty, unless force
// (artifact checkout, source checkout).
func checkoutDir(dir string, force bool) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 && !force {
		return usagef("%s is not empty: pass --force to check out into it anyway", dir)
	}
	return nil
}

// fetchMissing fetches, in a scheduler session with the Fetch queue alone, the
// sources of elements that are not all in the source cache; nothing runs (and
// nothing is shown) when every source is there.
func (s *session) fetchMissing(c *cache.Cache, elements []*element.Element) error {
	var items []*queues.Item
	for _, e := range elements {
		if !actions.SourcesCached(c.SourcesDir(), e) {
			items = append(items, &queues.Item{Element: e})
		}
	}
	if len(items) == 0 {
		return nil
	}
	display, err := s.display()
	if err != nil {
		return err
	}
	limits, onErr, _, err := s.limits(&schedulerFlags{})
	if err != nil {
		return err
	}
	if onErr == "" {
		onErr = element.OnErrorQuit
	}
	summary, err := s.runScheduler(schedulerRun{display: display, cache: c, limits: limits, onError: onErr,
		queues: []queues.Queue{s.sources(c).FetchQueue()}, items: items})
	if err != nil {
		return err
	}
	return s.sessionError(summary)
}
