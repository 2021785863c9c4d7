package actions

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/sandbox"
)

// Builds that run nothing. An element of a kind that runs commands but has none (no
// commands in any step, no integration commands to run, no sources, no workspace),
// whose dependencies all install nothing, builds an empty artifact whatever is
// staged or prepared: its job makes no work directory (no sysroot, build root,
// install root or HOME, and no spare directory taken from the last job), stages
// nothing and prepares no sandbox. It does everything else a build does, in the same
// order: it looks its dependencies up (a vanished one heals as before) and records
// their use, says what it stages, logs the sandbox the commands would have run in and
// their environment, waits at its gate, and commits the empty tree with its log. Its
// artifact, log and record are those the full path makes; only the work is not done.
// A stack (no commands, nothing staged) has no work directory either.

// workDir is a build job's work directory (spec.WorkDir), taken (takeWorkDir) when
// the build needs one and released when the job ends.
type workDir struct {
	path  string
	taken bool
}

func (w *workDir) take() error {
	if w.taken {
		return nil
	}
	if err := takeWorkDir(w.path); err != nil {
		return &infraError{err}
	}
	w.taken = true
	return nil
}

func (w *workDir) release() {
	if w.taken {
		releaseWorkDir(w.path)
	}
}

// tree stores the tree at dir, one of the work directory's; with no work directory,
// the empty tree (the install root and build root it would have had).
func (w *workDir) tree(c *cache.Cache, dir string, take bool) (cache.Digest, error) {
	switch {
	case !w.taken:
		return c.EmptyTree()
	case take:
		return c.TakeTree(dir)
	}
	return c.StoreTree(dir)
}

// needsWorkDir says whether the build of spec needs its work directory whatever its
// dependencies are: all do but a stack and those that may run nothing.
func (spec *buildSpec) needsWorkDir() bool {
	return spec.Kind != "stack" && !spec.mayRunNothing()
}

// mayRunNothing says whether spec runs no command and stages nothing a command
// could see, if its dependencies install nothing (stagesNothing).
func (spec *buildSpec) mayRunNothing() bool {
	switch spec.Kind {
	case "stack", "import", "compose", "filter":
		return false // their own paths: they move files, not run commands
	}
	switch sandbox.Kind(spec.Sandbox) {
	case sandbox.Host, sandbox.Auto, "":
	default:
		return false // bwrap needs /bin/sh in the sysroot even to run nothing
	}
	if len(spec.Sources) > 0 || spec.Workspace != nil || spec.runsRemotely() || spec.ActionCache != nil ||
		slices.ContainsFunc(spec.Stage, func(s stagedArtifact) bool {
			return len(s.Public.commands(sandbox.Host)) > 0 || len(s.Public.commands(sandbox.Bwrap)) > 0
		}) {
		return false
	}
	for _, res := range []*element.Resolved{spec.Host, spec.Bwrap} {
		if res == nil {
			return false
		}
		for _, cmds := range res.Commands {
			if len(cmds) > 0 {
				return false
			}
		}
	}
	return true
}

// stagesNothing says whether staging deps, the artifacts of spec.Stage, would put
// nothing in the sysroot: every one of them installs nothing (the empty tree).
func stagesNothing(deps []*cache.Artifact) bool {
	return !slices.ContainsFunc(deps, func(a *cache.Artifact) bool { return a.Files.Size > 0 })
}

// stageNothing is stageDependencies for deps that install nothing (stagesNothing):
// it says what it stages and checks their overlap whitelists, as staging them does,
// and stages nothing.
func stageNothing(spec *buildSpec, deps []*cache.Artifact, r *job.Reporter) (*staging, error) {
	sayStaging(deps, r)
	for i := range deps {
		if _, err := whitelistRegexps(spec.Stage[i].displayName(), spec.Stage[i].Whitelist); err != nil {
			return nil, err
		}
	}
	return &staging{}, nil
}

// runNothing is what the build of spec does after staging nothing, when it runs
// nothing: what prepareCommands and the command loop log for no commands, and its
// gate.
func runNothing(ctx context.Context, c *cache.Cache, spec *buildSpec, r *job.Reporter) error {
	// Nothing staged, no sysroot (t.sysroot was never made): auto resolves to the
	// host, as it does for an empty sysroot, which has no /bin/sh.
	kind, reason := sandbox.Resolve(sandbox.Kind(spec.Sandbox), "")
	env := commandEnv(ctx, nil, c.SourcesDir(), filepath.Join(spec.WorkDir, "home"), spec.Host.Env)
	logBuildHeader(r, kind, reason, env)
	return waitForBuilder(ctx, r)
}
