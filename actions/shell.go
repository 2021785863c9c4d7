package actions

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/sandbox"
	"github.com/gantry-build/gantry/source"
)

// ShellOptions says how StageShell stages an element's shell.
type ShellOptions struct {
	Sandbox string // auto, host or bwrap
	// Failed, when set, is the element's failed build: its build tree is the build
	// directory, instead of the sources or the workspace.
	Failed *cache.Artifact
	Term   string       // the caller's TERM; empty: dumb
	Log    io.Writer    // what staging the sources says
	Notice func(string) // says why staging waits (the cache lock)
}

// Shell is an element's build environment staged for an interactive shell or a
// command (sandbox.Shell): its build dependencies in the sysroot and its sources in
// the build directory, laid out as its build lays them out, in a temporary directory
// of the cache that Remove deletes. The dependencies are copies: a shell may change
// anything, the cache must not change.
type Shell struct {
	Kind   sandbox.Kind
	Reason string         // why Kind (sandbox.Resolve)
	Dir    string         // the build directory, as the shell sees it
	Config sandbox.Config // runs the shell; its output is the caller's to set
	work   string
}

// Remove deletes what was staged for the shell (not a workspace it opened).
func (sh *Shell) Remove() error { return os.RemoveAll(sh.work) }

// StageShell stages the shell of e, an element of g, in c, whose layout is made
// (cache.Prepare): its build environment. Its build directory is opts.Failed's build
// tree, else e's workspace itself (what the user edits is what the shell sees), else
// e's sources. Its build dependencies' integration commands run in its sysroot.
func StageShell(ctx context.Context, c *cache.Cache, g *element.Graph, e *element.Element, opts ShellOptions) (*Shell, error) {
	stage := func(t *tree) error { return stageShellTree(ctx, c, g, e, t, opts) }
	return openShell(ctx, c, g, e, opts, stage, g.StageDeps(e), false)
}

// openShell makes a shell's work directory, stages its tree (stage), and runs the
// integration commands of the elements integrated, staged in its sysroot. A shell of
// the run scope (run) has no install root and a writable sysroot.
func openShell(ctx context.Context, c *cache.Cache, g *element.Graph, e *element.Element, opts ShellOptions, stage func(*tree) error, integrated []*element.Element, run bool) (_ *Shell, err error) {
	work, err := c.TempDir("shell-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(work)
		}
	}()
	t := workTree(work, filepath.Join(work, "build"))
	if err := t.make(); err != nil {
		return nil, err
	}
	if err := stage(&t); err != nil {
		return nil, err
	}
	kind, reason := sandbox.Resolve(sandbox.Kind(opts.Sandbox), t.sysroot)
	paths := t.paths(kind, fmt.Sprint(element.DefaultMaxJobs(runtime.NumCPU(), 1)))
	resolved, err := e.Resolve(g.Project, paths)
	if err != nil {
		return nil, err
	}
	home := filepath.Join(work, "home")
	if kind == sandbox.Bwrap {
		home = sandbox.SandboxHome
	} else if err := os.Mkdir(home, 0o700); err != nil {
		return nil, fmt.Errorf("preparing the shell's home directory: %w", err)
	}
	env := shellEnv(commandEnv(ctx, e.Sources, c.SourcesDir(), home, resolved.Env), opts.Term, g.Project.Name, e.Name)
	expand := shellPaths(paths, kind, env)
	cfg := t.config(kind, env)
	if run {
		cfg.InstallDir = "" // a shell of the run scope installs nothing
	}
	if err := integrateShell(ctx, g, integrated, kind, expand, t, cfg, opts.Log); err != nil {
		return nil, fmt.Errorf("integrating the sysroot of %s for the shell: %w", e.Name, err)
	}
	cfg.WritableSysroot = run // copies, removed with the shell
	return &Shell{Kind: kind, Reason: reason, Dir: paths.BuildRoot, Config: cfg, work: work}, nil
}

// stageShellTree stages e's dependencies into t's sysroot and its build directory
// (t.build becomes the workspace's), holding the cache lock shared, so that no
// cleanup removes what is being copied; the shell itself runs without it.
func stageShellTree(ctx context.Context, c *cache.Cache, g *element.Graph, e *element.Element, t *tree, opts ShellOptions) error {
	lock, err := c.Lock(ctx, cache.Shared, opts.Notice)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	var arts []Staged
	if e.Kind.Name != "stack" { // as its build: nothing
		for _, d := range g.StageDeps(e) {
			project, name := d.ArtifactName(g.Project.Name)
			da, err := c.Lookup(project, name, d.Key)
			if err != nil || !da.Success {
				return fmt.Errorf("staging %s for the shell: dependency %s is not built: run `gantry build %s` first", e.Name, d.Name, e.Name)
			}
			arts = append(arts, Staged{Element: d, Artifact: da})
		}
	}
	warning, err := StageArtifacts(c, cmp.Or(e.Project(), g.Project), arts, t.sysroot, "")
	if err != nil {
		return fmt.Errorf("staging %s for the shell: %w", e.Name, err)
	}
	if warning != "" && opts.Log != nil {
		fmt.Fprintf(opts.Log, "gantry: warning: staging %s for the shell: %s\n", e.Name, warning)
	}
	switch {
	case opts.Failed != nil:
		return openFailedBuild(c, e, opts.Failed, t.build)
	case e.Workspace != "":
		t.build = e.Workspace
		return nil
	}
	so := source.StageOptions{ProjectRoot: projectRoot(g.Project.Root, e), SourcesDir: c.SourcesDir(), BuildRoot: t.build, Log: opts.Log}
	if err := stageSources(ctx, e.Sources, so, nil); err != nil {
		return fmt.Errorf("staging %s for the shell: %w", e.Name, err)
	}
	return nil
}

// openFailedBuild checks out the build tree of a, e's failed build, into dir.
func openFailedBuild(c *cache.Cache, e *element.Element, a *cache.Artifact, dir string) error {
	if err := c.Checkout(a.BuildTree, dir, cache.CheckoutOptions{}); err != nil {
		return fmt.Errorf("checking out the failed build tree of %s: %w", e.Name, CheckoutError(c, a, dir, err))
	}
	return nil
}

// shellEnv is the build environment (which has HOME: sandbox.FixedEnv) with what an
// interactive shell wants, unless the element's environment sets it: the prompt
// [project/element:/path]$ (sh expands $PWD in PS1 at every prompt) and the caller's
// TERM (else dumb).
func shellEnv(build map[string]string, term, project, elementName string) map[string]string {
	env := maps.Clone(build)
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

// CheckoutError says why checking out a into dir failed (artifact checkout, a
// shell). An artifact found damaged (a blob missing or corrupt; a corrupt blob is
// already removed) is dropped from the cache, so that the next build makes it again.
func CheckoutError(c *cache.Cache, a *cache.Artifact, dir string, err error) error {
	var blob *cache.BlobError
	if !errors.As(err, &blob) {
		return fmt.Errorf("checking out %s into %s: %w", a.Element, dir, err)
	}
	if _, derr := c.DropArtifact(a); derr != nil {
		return fmt.Errorf("checking out %s into %s: %v; dropping the damaged artifact: %w", a.Element, dir, blob, derr)
	}
	return fmt.Errorf("checking out %s into %s: %w; dropped the damaged artifact of %s from the cache: run `gantry build %s` to build it again",
		a.Element, dir, blob, a.Element, a.Element)
}
