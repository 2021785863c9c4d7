package actions

import (
	"context"
	"fmt"
	"io"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/sandbox"
)

// StageRunShell stages the run scope of e, an element of g, for a shell: e and its
// runtime dependencies (dependencies first, as a dependant's build stages them), as
// copies, in the sysroot; then their integration commands run there, their output to
// opts.Log. The shell's working directory is an empty scratch directory; under bwrap /
// is the sysroot, on the host PATH and the library paths lead into it (and
// GANTRY_SYSROOT names it). Remove deletes it all.
func StageRunShell(ctx context.Context, c *cache.Cache, g *element.Graph, e *element.Element, opts ShellOptions) (*Shell, error) {
	scope := g.Select([]*element.Element{e}, element.DepsRun)
	stage := func(t *tree) error { return stageRunScope(ctx, c, g, e, scope, *t, opts) }
	return openShell(ctx, c, g, e, opts, stage, scope, true)
}

// stageRunScope checks out the artifacts of scope (e's run scope) into t's sysroot,
// holding the cache lock shared; each must be built.
func stageRunScope(ctx context.Context, c *cache.Cache, g *element.Graph, e *element.Element, scope []*element.Element, t tree, opts ShellOptions) error {
	lock, err := c.Lock(ctx, cache.Shared, opts.Notice)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	for _, d := range scope {
		project, name := d.ArtifactName(g.Project.Name)
		a, err := c.Lookup(project, name, d.Key)
		if err != nil || !a.Success {
			what := "dependency " + d.Name + " is"
			if d == e {
				what = "it is"
			}
			return fmt.Errorf("staging %s for the shell: %s not built: run `gantry build %s` first", e.Name, what, e.Name)
		}
		if err := c.Checkout(a.Files, t.sysroot, cache.CheckoutOptions{}); err != nil {
			return fmt.Errorf("staging %s for the shell: %w", e.Name, CheckoutError(c, a, t.sysroot, err))
		}
	}
	return nil
}

// shellPaths are the paths integration commands are expanded with in a shell of the
// sandbox kind: on the host through hostRefs, with the variables they may name set in
// env (which the shell keeps: GANTRY_SYSROOT leads into the sysroot).
func shellPaths(paths element.Paths, kind sandbox.Kind, env map[string]string) element.Paths {
	if kind == sandbox.Bwrap {
		return paths
	}
	env["GANTRY_SYSROOT"], env["GANTRY_BUILD_ROOT"], env["GANTRY_INSTALL_ROOT"] = paths.Sysroot, paths.BuildRoot, paths.InstallRoot
	return hostRefs(paths)
}

// integrateShell runs the integration commands of scope in the shell's sysroot, with
// the shell's environment (cfg), each expanded in its element's own context with paths.
func integrateShell(ctx context.Context, g *element.Graph, scope []*element.Element, kind sandbox.Kind, paths element.Paths, t tree, cfg sandbox.Config, log io.Writer) error {
	var steps []integration
	for _, d := range scope {
		cmds, err := d.IntegrationCommands(g.Project, paths)
		if err != nil {
			return err
		}
		if len(cmds) > 0 {
			steps = append(steps, integration{d.Name, cmds})
		}
	}
	if len(steps) == 0 {
		return nil
	}
	if log == nil {
		log = io.Discard
	}
	cfg.WritableSysroot = true
	cfg.Stdout, cfg.Stderr = log, log
	runner, err := sandbox.Prepare(cfg)
	if err != nil {
		return err
	}
	defer runner.Close()
	say := func(s string) { fmt.Fprintln(log, "gantry shell: "+s) }
	return runIntegration(ctx, runner, sysrootDir(kind, t), steps, say, func(string) {})
}
