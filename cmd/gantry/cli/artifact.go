package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
)

func newArtifactCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifact",
		Short: "Work with built artifacts in the local cache",
	}
	cmd.AddCommand(newArtifactCheckoutCmd(g), newArtifactLogCmd(g), newArtifactListCmd(g),
		newArtifactFilesCmd(g), newArtifactDeleteCmd(g))
	return cmd
}

// loadWithCache loads the project and opens the local cache.
func (o *globalOptions) loadWithCache() (*session, *cache.Cache, error) {
	s, err := o.load()
	if err != nil {
		return nil, nil, err
	}
	c, err := s.openCache()
	if err != nil {
		return nil, nil, err
	}
	return s, c, nil
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
	a, err := c.Lookup(s.project.Name, e.Name, e.Key)
	if errors.Is(err, cache.ErrNotFound) {
		return g, e, nil, fmt.Errorf("%s is not in the cache at key %s: run `gantry build %s`", e.Name, e.ShortKey(), e.Name)
	}
	return g, e, a, err
}

func newArtifactCheckoutCmd(g *globalOptions) *cobra.Command {
	var deps string
	var force bool
	cmd := &cobra.Command{
		Use:   "checkout ELEMENT DIR",
		Short: "Copy an element's artifact (and, with --deps run, its runtime dependencies) into DIR",
		Args:  rangeArgs(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := element.ParseDeps(deps)
			if err != nil || (d != element.DepsNone && d != element.DepsRun) {
				return usagef("--deps %q: use none or run", deps)
			}
			s, c, err := g.loadWithCache()
			if err != nil {
				return err
			}
			gr, e, _, err := s.artifactOf(c, s.elementArg(args[0]))
			if err != nil {
				return err
			}
			dir := args[1]
			if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 && !force {
				return usagef("%s is not empty: pass --force to check out into it anyway", dir)
			}
			for _, el := range gr.Select([]*element.Element{e}, d) {
				a, err := c.Lookup(s.project.Name, el.Name, el.Key)
				if err != nil {
					return fmt.Errorf("checking out %s: dependency %s is not cached: run `gantry build %s`", e.Name, el.Name, e.Name)
				}
				if !a.Success {
					return fmt.Errorf("checking out %s: the cached build of %s failed: see `gantry artifact log %s`", e.Name, el.Name, el.Name)
				}
				// Copies, never hard links: the user's files must not alias the cache.
				if err := c.Checkout(a.Files, dir, cache.CheckoutOptions{}); err != nil {
					return checkoutError(c, s.project.Name, el, dir, err)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&deps, "deps", "run", "also check out dependencies: none or run")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "check out into a non-empty directory")
	return cmd
}

// checkoutError says why checking out el failed. An artifact found damaged (a
// blob missing or corrupt; a corrupt blob is already removed) is dropped from
// the cache, so that the next build makes it again.
func checkoutError(c *cache.Cache, project string, el *element.Element, dir string, err error) error {
	var blob *cache.BlobError
	if !errors.As(err, &blob) {
		return fmt.Errorf("checking out %s into %s: %w", el.Name, dir, err)
	}
	if derr := c.DropArtifact(project, el.Name, el.Key); derr != nil {
		return fmt.Errorf("checking out %s into %s: %v; dropping the damaged artifact: %w", el.Name, dir, blob, derr)
	}
	return fmt.Errorf("checking out %s into %s: %w; dropped the damaged artifact of %s from the cache: run `gantry build %s` to build it again",
		el.Name, dir, blob, el.Name, el.Name)
}

func newArtifactLogCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "log ELEMENT",
		Short: "Print the build log of an element's artifact (failed builds too)",
		Args:  rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, c, err := g.loadWithCache()
			if err != nil {
				return err
			}
			_, e, a, err := s.artifactOf(c, s.elementArg(args[0]))
			if err != nil {
				return err
			}
			if a.Log.IsZero() {
				return fmt.Errorf("the artifact of %s has no build log", e.Name)
			}
			f, err := c.OpenBlob(a.Log)
			if err != nil {
				return fmt.Errorf("reading the build log of %s: %w", e.Name, err)
			}
			defer f.Close()
			_, err = io.Copy(g.ios.Out, f)
			return err
		},
	}
}

func newArtifactListCmd(g *globalOptions) *cobra.Command {
	var all bool
	return &cobra.Command{
		Use:   "list",
		Short: "List the project's artifacts in the local cache",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, c, err := g.loadWithCache()
			if err != nil {
				return err
			}
			project := s.project.Name
			if all {
				project = ""
			}
			list, err := c.List(project)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(g.ios.Out, 0, 4, 2, ' ', 0)
			for _, a := range list {
				state := "cached"
				if !a.Success {
					state = "failed"
				}
				name := a.Element
				if all {
					name = a.Project + "/" + a.Element
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", state, a.Key[:min(8, len(a.Key))], name,
					a.Finished.Local().Format(time.DateTime), a.BuildDuration.Round(time.Millisecond))
			}
			return tw.Flush()
		},
	}
}

func newArtifactFilesCmd(g *globalOptions) *cobra.Command {
	var long bool
	cmd := &cobra.Command{
		Use:   "files ELEMENT",
		Short: "List the files in an element's artifact",
		Args:  rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, c, err := g.loadWithCache()
			if err != nil {
				return err
			}
			_, _, a, err := s.artifactOf(c, s.elementArg(args[0]))
			if err != nil {
				return err
			}
			w := g.ios.Out
			return c.WalkTree(a.Files, func(t cache.TreeEntry) error {
				if !long {
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
		},
	}
	cmd.Flags().BoolVarP(&long, "long", "l", false, "show type, mode and size")
	return cmd
}

func newArtifactDeleteCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete ELEMENT...",
		Short: "Delete elements' artifacts (successful or failed) from the local cache",
		Args:  rangeArgs(1, 1<<20),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, c, err := g.loadWithCache()
			if err != nil {
				return err
			}
			for _, arg := range args {
				_, e, _, err := s.artifactOf(c, s.elementArg(arg))
				if err != nil {
					return err
				}
				if err := c.Delete(s.project.Name, e.Name, e.Key); err != nil {
					return err
				}
				fmt.Fprintf(g.ios.ErrOut, "deleted %s/%s\n", e.Name, e.ShortKey())
			}
			return nil
		},
	}
}
