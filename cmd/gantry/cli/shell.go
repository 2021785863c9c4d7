package cli

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/sandbox"
	"github.com/gantry-build/gantry/source"
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

// shellEnv is the build environment (which has HOME: sandbox.FixedEnv) with what an
// interactive shell wants, unless the element's environment sets it: the prompt
// [project/element:/path]$ (sh expands $PWD in PS1 at every prompt) and the caller's
// TERM (else dumb).
func shellEnv(build map[string]string, project, elementName string) map[string]string {
	env := maps.Clone(build)
	term := os.Getenv("TERM")
	if term == "" {
		term = "dumb"
	}
	for k, v := range map[string]string{"PS1": "[" + project + "/" + elementName + ":$PWD]$ ", "TERM": term} {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	return env
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
	var a *cache.Artifact // only with --build: the failed build whose tree is opened
	if opts.build {
		if g, e, a, err = s.artifactOf(c, s.elementArg(name)); err != nil {
			return err
		}
		if a.Success || a.BuildTree.IsZero() {
			return fmt.Errorf("%s has no failed build tree to open (its cached build succeeded): drop --build", e.Name)
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
	work, err := c.TempDir("shell-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	sysroot, buildDir, installDir := filepath.Join(work, "sysroot"), filepath.Join(work, "build"), filepath.Join(work, "install")
	for _, d := range []string{sysroot, buildDir, installDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Staging holds the cache lock shared, so that no cleanup removes what is being
	// copied; the shell itself runs without it.
	lock, err := opts.lockCache(c, cache.Shared)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	for _, d := range g.StageDeps(e) {
		da, err := c.Lookup(s.project.Name, d.Name, d.Key)
		if err != nil || !da.Success {
			return fmt.Errorf("staging %s for the shell: dependency %s is not built: run `gantry build %s` first", e.Name, d.Name, e.Name)
		}
		// Copies: an interactive shell may change anything, the cache must not change.
		if err := c.Checkout(da.Files, sysroot, cache.CheckoutOptions{}); err != nil {
			return fmt.Errorf("staging %s for the shell: %w", e.Name, checkoutError(c, da, sysroot, err))
		}
	}
	if opts.build {
		if err := c.Checkout(a.BuildTree, buildDir, cache.CheckoutOptions{}); err != nil {
			return fmt.Errorf("checking out the failed build tree of %s: %w", e.Name, checkoutError(c, a, buildDir, err))
		}
	} else if e.Workspace != "" {
		// The workspace itself: what the user edits is what the shell sees.
		buildDir = e.Workspace
	} else {
		for i := range e.Sources {
			if err := source.Stage(ctx, &e.Sources[i], source.StageOptions{ProjectRoot: s.project.Root, SourcesDir: c.SourcesDir(), BuildRoot: buildDir, Log: opts.ios.ErrOut}); err != nil {
				return fmt.Errorf("staging %s for the shell: %w", e.Name, err)
			}
		}
	}
	lock.Unlock()
	kind, reason := sandbox.Resolve(sandbox.Kind(opts.sandbox), sysroot)
	paths := element.Paths{BuildRoot: buildDir, InstallRoot: installDir, Sysroot: sysroot, MaxJobs: fmt.Sprint(element.DefaultMaxJobs(runtime.NumCPU(), 1))}
	if kind == sandbox.Bwrap {
		paths = element.Paths{BuildRoot: sandbox.DefaultSandboxBuildRoot, InstallRoot: sandbox.DefaultSandboxInstallRoot, Sysroot: "/", MaxJobs: paths.MaxJobs}
	}
	resolved, err := e.Resolve(g.Project, paths)
	if err != nil {
		return err
	}
	home := filepath.Join(work, "home")
	if kind == sandbox.Bwrap {
		home = sandbox.SandboxHome
	} else if err := os.Mkdir(home, 0o700); err != nil {
		return fmt.Errorf("preparing the shell's home directory: %w", err)
	}
	env := shellEnv(actions.CommandEnv(ctx, e.Sources, c.SourcesDir(), home, resolved.Env), s.project.Name, e.Name)
	if len(argv) == 0 || opts.verbose {
		what := ""
		if opts.build {
			what = ", failed build"
		}
		fmt.Fprintf(opts.ios.ErrOut, "gantry shell: %s (key %s%s), %s sandbox, in %s; exit to leave\n",
			e.Name, e.ShortKey(), what, kind, paths.BuildRoot)
		if opts.verbose {
			fmt.Fprintf(opts.ios.ErrOut, "gantry shell: sandbox: %s (%s)\n", kind, reason)
		}
	}
	cfg := sandbox.Config{Kind: kind, Sysroot: sysroot, BuildDir: buildDir, InstallDir: installDir,
		SandboxBuildRoot: sandbox.DefaultSandboxBuildRoot, SandboxInstallRoot: sandbox.DefaultSandboxInstallRoot,
		Env: env, Stdout: opts.ios.Out, Stderr: opts.ios.ErrOut}
	code, err := sandbox.Shell(ctx, cfg, argv, opts.ios.In)
	if err != nil {
		return fmt.Errorf("running the shell for %s: %w", e.Name, err)
	}
	if code != 0 {
		return &exitStatusError{code}
	}
	return nil
}
