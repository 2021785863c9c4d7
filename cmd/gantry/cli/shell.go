package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/sandbox"
)

type shellOptions struct {
	*globalOptions
	build   bool
	sandbox string
	element string   // ELEMENT
	command []string // COMMAND...; none: an interactive shell
}

// newShellCmd is `gantry shell`; runF, when not nil, runs instead of runShell (tests).
func newShellCmd(g *globalOptions, runF func(*shellOptions) error) *cobra.Command {
	opts := &shellOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "shell ELEMENT [-- COMMAND...]",
		Short: "Open a shell (or run a command) with an element staged, or in its build environment",
		Long: `Stage an element and its runtime dependencies in a sysroot, run their integration
commands, and run an interactive shell there, or COMMAND: under bwrap / is the sysroot, on
the host PATH and the library paths lead into it (GANTRY_SYSROOT names it). The element
must be built.
With --build, the element's build environment instead: its build dependencies in the
sysroot and its sources in the build directory; or, when its cached build failed, the
tree of that build as it was when it failed. The command's exit code is gantry's.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usagef("shell: name an element (usage: %s)", cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.element, opts.command = args[0], args[1:]
			if runF != nil {
				return runF(opts)
			}
			return runShell(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.build, "build", false, "the build environment (or the tree of the element's failed build), not the run scope")
	cmd.Flags().StringVar(&opts.sandbox, "sandbox", defaultSandbox(), "sandbox: auto, host or bwrap (default $GANTRY_SANDBOX, else auto)")
	return cmd
}

// exitStatusError carries a shell command's exit code out as gantry's.
type exitStatusError struct{ code int }

func (e *exitStatusError) Error() string { return fmt.Sprintf("command exited with status %d", e.code) }

func runShell(ctx context.Context, opts *shellOptions) error {
	name, argv := opts.element, opts.command
	if err := checkSandboxFlag(opts.sandbox); err != nil {
		return err
	}
	s := opts.session()
	c, err := s.projectCache()
	if err != nil {
		return err
	}
	s.project.Hermetic = isHermetic(opts.sandbox) // the keys of the artifacts it stages
	var g *element.Graph
	var e *element.Element
	var failed *cache.Artifact // only with --build: the failed build whose tree is opened
	if opts.build {
		if g, e, failed, err = buildScopeOf(s, c, name); err != nil {
			return err
		}
	} else {
		if g, err = s.loadGraph([]string{s.elementArg(name)}); err != nil {
			return err
		}
		e = g.Targets[0]
	}
	if err := s.prepareCache(c); err != nil {
		return err
	}
	shellOpts := actions.ShellOptions{Sandbox: opts.sandbox, Failed: failed,
		Term: os.Getenv("TERM"), Log: opts.ios.ErrOut, Notice: opts.cacheNotice}
	stage := actions.StageRunShell
	if opts.build {
		stage = actions.StageShell
	}
	sh, err := stage(ctx, c, g, e, shellOpts)
	if err != nil {
		return err
	}
	defer sh.Remove()
	if len(argv) == 0 || opts.verbose {
		what := ", run scope"
		switch {
		case failed != nil:
			what = ", failed build"
		case opts.build:
			what = ", build environment"
		}
		fmt.Fprintf(opts.ios.ErrOut, "gantry shell: %s (key %s%s), %s sandbox, in %s; exit to leave\n",
			e.Name, e.ShortKey(), what, sh.Kind, sh.Dir)
		if opts.verbose {
			fmt.Fprintf(opts.ios.ErrOut, "gantry shell: sandbox: %s (%s)\n", sh.Kind, sh.Reason)
		}
	}
	cfg := sh.Config
	cfg.Stdout, cfg.Stderr = opts.ios.Out, opts.ios.ErrOut
	code, err := sandbox.Shell(ctx, cfg, argv, opts.ios.In)
	if err != nil {
		return fmt.Errorf("running the shell for %s: %w", e.Name, err)
	}
	if code != 0 {
		return &exitStatusError{code}
	}
	return nil
}

// buildScopeOf loads name for a shell of its build environment: the tree of its failed
// build when its cached artifact is one, else (nil) its sources, staged as a build
// stages them.
func buildScopeOf(s *session, c *cache.Cache, name string) (*element.Graph, *element.Element, *cache.Artifact, error) {
	g, e, a, err := s.artifactOf(c, s.elementArg(name))
	switch {
	case g == nil || e.Key == "":
		return nil, nil, nil, err // not loaded, or no key: it cannot be staged either
	case err == nil && !a.Success && !a.BuildTree.IsZero():
		return g, e, a, nil
	case err != nil:
		project, own := e.ArtifactName(s.project.Name)
		if _, lerr := c.Lookup(project, own, e.Key); !errors.Is(lerr, cache.ErrNotFound) {
			return nil, nil, nil, err
		}
	}
	return g, e, nil, nil
}
