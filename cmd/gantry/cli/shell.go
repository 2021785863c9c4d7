package cli

import (
	"context"
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
		Short: "Open a shell (or run a command) in an element's build environment",
		Long: `Stage an element's build environment — its build dependencies in the sysroot and
its sources in the build directory — and run an interactive shell there, or COMMAND.
With --build, the build directory is the tree of the element's failed build instead,
as it was when the build failed. The command's exit code is gantry's.`,
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
	cmd.Flags().BoolVar(&opts.build, "build", false, "open the tree of the element's failed build")
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
		if g, e, failed, err = s.artifactOf(c, s.elementArg(name)); err != nil {
			return err
		}
		if err := actions.FailedBuildTree(e, failed); err != nil {
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
	sh, err := actions.StageShell(ctx, c, g, e, actions.ShellOptions{Sandbox: opts.sandbox, Failed: failed,
		Term: os.Getenv("TERM"), Log: opts.ios.ErrOut, Notice: opts.cacheNotice})
	if err != nil {
		return err
	}
	defer sh.Remove()
	if len(argv) == 0 || opts.verbose {
		what := ""
		if opts.build {
			what = ", failed build"
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
