package cli

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/gantry-build/gantry/internal/units"
	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
)

func newArtifactCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifact",
		Short: "Work with built artifacts in the local cache",
	}
	cmd.AddCommand(newArtifactCheckoutCmd(g, nil), newArtifactLogCmd(g, nil), newArtifactListCmd(g, nil),
		newArtifactFilesCmd(g, nil), newArtifactDeleteCmd(g, nil))
	return cmd
}

// madeCacheArtifact is the artifact arg names (oneArtifact) and the local cache, made
// once the artifact was found: a project or an element that does not load, or an
// artifact not in the cache, leaves no cache behind.
func (s *session) madeCacheArtifact(arg string) (artifactArg, *cache.Artifact, *cache.Cache, error) {
	c, err := s.projectCache()
	if err != nil {
		return artifactArg{}, nil, nil, err
	}
	a, art, err := s.oneArtifact(c, arg)
	if err == nil {
		err = s.prepareCache(c)
	}
	if err != nil {
		return artifactArg{}, nil, nil, err
	}
	return a, art, c, nil
}

// artifactOf loads the element named by arg and finds its artifact at its current key.
func (s *session) artifactOf(c *cache.Cache, name string) (*element.Graph, *element.Element, *cache.Artifact, error) {
	g, err := s.loadGraph([]string{name})
	if err != nil {
		return nil, nil, nil, err
	}
	e := g.Targets[0]
	if e.Key == "" {
		return g, e, nil, fmt.Errorf("%s has no cache key (a source has no ref): run `gantry track %s`", e.Name, e.Name)
	}
	project, own := e.ArtifactName(s.project.Name)
	a, err := c.Lookup(project, own, e.Key)
	if errors.Is(err, cache.ErrNotFound) && !s.project.Hermetic {
		if hg, herr := s.hermeticGraph([]string{name}); herr == nil && hg.Targets[0].Key != "" {
			if ha, herr := c.Lookup(project, own, hg.Targets[0].Key); herr == nil {
				return hg, hg.Targets[0], ha, nil // built only with --sandbox bwrap (see hermeticGraph)
			}
		}
	}
	if errors.Is(err, cache.ErrNotFound) {
		return g, e, nil, fmt.Errorf("%s is not in the cache at key %s: run `gantry build %s`", e.Name, e.ShortKey(), e.Name)
	}
	return g, e, a, err
}

type artifactCheckoutOptions struct {
	*globalOptions
	deps     string
	force    bool
	artifact string // ELEMENT[@KEY]
	into     string // DIR
}

// newArtifactCheckoutCmd is `gantry artifact checkout`; runF, when not nil, runs
// instead of runArtifactCheckout (tests).
func newArtifactCheckoutCmd(g *globalOptions, runF func(*artifactCheckoutOptions) error) *cobra.Command {
	opts := &artifactCheckoutOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "checkout ELEMENT[@KEY] DIR",
		Short: "Copy an element's artifact (and, with --deps run, its runtime dependencies) into DIR",
		Long: `Copy an artifact into DIR: the element's current one, or with ELEMENT@KEYPREFIX (or a
bare key prefix) any cached one. A failed build's artifact holds what its install root
held when it failed. --deps run (the default for an element's current artifact) also
checks out its runtime dependencies; --deps build checks out what it builds on (not the
element itself); --deps all both. An artifact at another key is checked out alone.`,
		Args: rangeArgs(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.artifact, opts.into = args[0], args[1]
			if runF != nil {
				return runF(opts)
			}
			return runArtifactCheckout(opts)
		},
	}
	cmd.Flags().StringVar(&opts.deps, "deps", "", "also check out dependencies: none, run, build or all (default run for an element's current artifact)")
	cmd.Flags().BoolVarP(&opts.force, "force", "f", false, "check out into a non-empty directory")
	return cmd
}

func runArtifactCheckout(opts *artifactCheckoutOptions) error {
	d := element.DepsNone
	if opts.deps != "" {
		var err error
		if d, err = element.ParseDeps(opts.deps); err != nil {
			return usagef("%v", err)
		}
	}
	s := opts.session()
	arg, a, c, err := s.madeCacheArtifact(opts.artifact)
	if err != nil {
		return err
	}
	if opts.deps == "" && arg.current != nil {
		d = element.DepsRun
	}
	if d != element.DepsNone && arg.current == nil {
		return usagef("--deps %s: %s is not the element's current artifact, whose dependencies gantry knows; use --deps none", d, opts.artifact)
	}
	dir := opts.into
	if err := checkoutDir(dir, opts.force); err != nil {
		return err
	}
	lock, err := opts.lockCache(c, cache.Shared)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	if d == element.DepsNone {
		if !a.Success {
			opts.ios.Note(fmt.Sprintf("%s@%s is a failed build: checking out what its install root held when it failed", a.Element, shortKey(a.Key)))
		}
		// Copies, never hard links: the user's files must not alias the cache.
		if err := c.Checkout(a.Files, dir, cache.CheckoutOptions{}); err != nil {
			return actions.CheckoutError(c, a, dir, err)
		}
		c.Touch(a.Project, a.Element, a.Key)
		return nil
	}
	// With dependencies: in staging order, a later artifact's path replacing an
	// earlier one's, as a build stages them (docs/staging.md).
	var arts []actions.Staged
	for _, el := range arg.graph.Staging([]*element.Element{arg.current}, d) {
		project, name := el.ArtifactName(s.project.Name)
		da, err := c.Lookup(project, name, el.Key)
		if err != nil {
			return fmt.Errorf("checking out %s: dependency %s is not cached: run `gantry build --deps %s %s`", arg.current.Name, el.Name, d, arg.current.Name)
		}
		if !da.Success && el != arg.current {
			return fmt.Errorf("checking out %s: the cached build of %s failed: see `gantry artifact log %s`", arg.current.Name, el.Name, el.Name)
		}
		if !da.Success {
			opts.ios.Note(fmt.Sprintf("%s@%s is a failed build: checking out what its install root held when it failed", da.Element, shortKey(da.Key)))
		}
		arts = append(arts, actions.Staged{Element: el, Artifact: da})
	}
	warning, err := actions.StageArtifacts(c, cmp.Or(arg.current.Project(), s.project), arts, dir, "checking out "+arg.current.Name)
	if err != nil {
		return err
	}
	for _, sa := range arts {
		c.Touch(sa.Artifact.Project, sa.Artifact.Element, sa.Artifact.Key)
	}
	if warning != "" {
		opts.ios.Message("warning", fmt.Sprintf("checking out %s: %s", arg.current.Name, warning))
	}
	return nil
}

type artifactLogOptions struct {
	*globalOptions
	artifact string // ELEMENT[@KEY]
}

// newArtifactLogCmd is `gantry artifact log`; runF, when not nil, runs instead of
// runArtifactLog (tests).
func newArtifactLogCmd(g *globalOptions, runF func(*artifactLogOptions) error) *cobra.Command {
	opts := &artifactLogOptions{globalOptions: g}
	return &cobra.Command{
		Use:   "log ELEMENT[@KEY]",
		Short: "Print the build log of an element's artifact (failed builds too)",
		Args:  rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.artifact = args[0]
			if runF != nil {
				return runF(opts)
			}
			return runArtifactLog(opts)
		},
	}
}

func runArtifactLog(opts *artifactLogOptions) error {
	_, a, c, err := opts.session().madeCacheArtifact(opts.artifact)
	if err != nil {
		return err
	}
	if a.Log.IsZero() {
		return fmt.Errorf("the artifact of %s has no build log", a.Element)
	}
	f, err := c.OpenBlob(a.Log)
	if err != nil {
		return fmt.Errorf("reading the build log of %s: %w", a.Element, err)
	}
	defer f.Close()
	// The log as the build wrote it, but gantry's internal markers.
	r, w := bufio.NewReader(f), bufio.NewWriter(opts.ios.Out)
	for {
		line, err := r.ReadString('\n')
		if line != "" && !job.IsInternalLogLine(line) {
			w.WriteString(line)
		}
		if err == io.EOF {
			return w.Flush()
		}
		if err != nil {
			return fmt.Errorf("reading the build log of %s: %w", a.Element, err)
		}
	}
}

type artifactListOptions struct {
	*globalOptions
	all, long bool
	format    string
}

// newArtifactListCmd is `gantry artifact list`; runF, when not nil, runs instead of
// runArtifactList (tests).
func newArtifactListCmd(g *globalOptions, runF func(*artifactListOptions) error) *cobra.Command {
	opts := &artifactListOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the project's artifacts in the local cache: state, key, size, last use",
		Long: `List every cached artifact of the project (--all: of every project), any key: its
state, key, element, size on disk (blobs shared with other artifacts included) and when it
was last used (built, pulled, checked out or staged as a dependency). Cleanup removes the
least recently used first. Address one with ELEMENT@KEYPREFIX in the other artifact commands.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runArtifactList(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.all, "all", false, "list the artifacts of every project")
	cmd.Flags().BoolVarP(&opts.long, "long", "l", false, "show full keys")
	cmd.Flags().StringVar(&opts.format, "format", "text", "output format: text, or json (one object per artifact)")
	return cmd
}

func runArtifactList(opts *artifactListOptions) error {
	if opts.format != "text" && opts.format != "json" {
		return usagef("--format %q: use text or json", opts.format)
	}
	s := opts.session()
	c, err := s.projectCache() // a query: a cache not made yet lists nothing
	if err != nil {
		return err
	}
	project := s.project.Name
	if opts.all {
		project = ""
	}
	list, err := c.Usages(project)
	if err != nil {
		opts.ios.Message("warning", err.Error())
	}
	if opts.format == "json" {
		enc := json.NewEncoder(opts.ios.Out)
		for _, a := range list {
			if err := enc.Encode(a); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(opts.ios.Out, 0, 4, 2, ' ', 0)
	for _, a := range list {
		state := "cached"
		if !a.Success {
			state = "failed"
		}
		name := a.Element
		if opts.all {
			name = a.Project + "/" + a.Element
		}
		key := shortKey(a.Key)
		if opts.long {
			key = a.Key
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", state, key, name, units.Bytes(a.Bytes), a.LastUse.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

type artifactFilesOptions struct {
	*globalOptions
	long     bool
	artifact string // ELEMENT[@KEY]
}

// newArtifactFilesCmd is `gantry artifact files`; runF, when not nil, runs instead of
// runArtifactFiles (tests).
func newArtifactFilesCmd(g *globalOptions, runF func(*artifactFilesOptions) error) *cobra.Command {
	opts := &artifactFilesOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "files ELEMENT[@KEY]",
		Short: "List the files in an element's artifact",
		Args:  rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.artifact = args[0]
			if runF != nil {
				return runF(opts)
			}
			return runArtifactFiles(opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.long, "long", "l", false, "show type, mode and size")
	return cmd
}

func runArtifactFiles(opts *artifactFilesOptions) error {
	_, a, c, err := opts.session().madeCacheArtifact(opts.artifact)
	if err != nil {
		return err
	}
	w := opts.ios.Out
	return c.WalkTree(a.Files, func(t cache.TreeEntry) error {
		if !opts.long {
			fmt.Fprintln(w, t.Path)
			return nil
		}
		mode := "-rw-r--r--"
		switch {
		case t.Type == "dir":
			mode = "drwxr-xr-x"
		case t.Type == "symlink":
			mode = "lrwxrwxrwx"
		case t.Executable:
			mode = "-rwxr-xr-x"
		}
		extra := ""
		if t.Target != "" {
			extra = " -> " + t.Target
		}
		fmt.Fprintf(w, "%s %10d %s%s\n", mode, t.Size, t.Path, extra)
		return nil
	})
}

type artifactDeleteOptions struct {
	*globalOptions
	deps   string
	format outputFormat
	args   []string // ELEMENT[@KEY]|GLOB...
}

// newArtifactDeleteCmd is `gantry artifact delete`; runF, when not nil, runs instead
// of runArtifactDelete (tests).
func newArtifactDeleteCmd(g *globalOptions, runF func(*artifactDeleteOptions) error) *cobra.Command {
	opts := &artifactDeleteOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "delete ELEMENT[@KEY]|GLOB...",
		Short: "Delete artifacts (successful or failed) from the local cache, freeing what only they used",
		Long: `Delete the current artifacts of the elements named (globs such as 'base/*.toml' match
element names; quote them), with --deps their dependencies too, or any cached artifact
named ELEMENT@KEYPREFIX or by a key prefix. The blobs that only the deleted artifacts used
are removed at once (with every other unreferenced blob), under the exclusive cache lock.`,
		Args: rangeArgs(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runArtifactDelete(opts)
		},
	}
	cmd.Flags().StringVar(&opts.deps, "deps", "none", "also delete dependencies: none, run, build or all")
	opts.format.register(cmd)
	return cmd
}

func runArtifactDelete(opts *artifactDeleteOptions) error {
	d, err := element.ParseDeps(opts.deps)
	if err != nil {
		return usagef("--deps %q: use none, run, build or all", opts.deps)
	}
	if err := opts.format.check(); err != nil {
		return err
	}
	s := opts.session()
	c, err := s.projectCache()
	if err != nil {
		return err
	}
	targets, err := s.artifactArgs(c, opts.args, d)
	if err == nil {
		err = s.prepareCache(c)
	}
	if err != nil {
		return err
	}
	lock, err := opts.lockCache(c, cache.Exclusive)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	var remove []cache.ArtifactRef
	res := deleteResult{Deleted: []cache.ArtifactRef{}, NotCached: []cache.ArtifactRef{}}
	for _, t := range targets {
		if _, err := c.Lookup(t.ref.Project, t.ref.Element, t.ref.Key); errors.Is(err, cache.ErrNotFound) {
			// A warning, whether alone or beside cached elements: deleting what is not
			// there leaves the cache as asked (BuildStream warns and succeeds too).
			opts.ios.Message("warning", fmt.Sprintf("%s is not in the cache at key %s: nothing to delete", t.ref.Element, shortKey(t.ref.Key)))
			res.NotCached = append(res.NotCached, t.ref)
			continue
		}
		remove = append(remove, t.ref)
	}
	rep, err := c.Cleanup(cache.CleanupOptions{Remove: remove})
	if err != nil {
		return err
	}
	if opts.format.json() {
		for _, a := range rep.Artifacts {
			res.Deleted = append(res.Deleted, a.ArtifactRef)
		}
		res.Freed, res.Blobs = rep.Freed, rep.Blobs
		return writeJSONLine(opts.ios.Out, res)
	}
	for _, a := range rep.Artifacts {
		opts.ios.Info(fmt.Sprintf("deleted %s/%s", a.Element, shortKey(a.Key)))
	}
	opts.ios.Info(fmt.Sprintf("freed %s (%d blobs)", units.Bytes(rep.Freed), rep.Blobs))
	return nil
}

// deleteResult is what `artifact delete --format json` writes.
type deleteResult struct {
	Deleted   []cache.ArtifactRef `json:"deleted"`
	NotCached []cache.ArtifactRef `json:"not-cached"` // named, not in the cache: warned about
	Freed     int64               `json:"freed"`      // bytes
	Blobs     int                 `json:"blobs"`      // blobs removed
}
