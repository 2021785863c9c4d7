package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	rexec "github.com/gantry-build/gantry/remote/exec"
	"github.com/gantry-build/gantry/resources"
	"github.com/gantry-build/gantry/sandbox"
	"github.com/gantry-build/gantry/source"
)

// A remote build (docs/remote-execution.md): with remote execution configured
// (buildSpec.Remote), an element whose kind runs commands is built as one REAPI
// Action on the execution service instead of in a local sandbox. The job
// stages the sources on disk (they come from the source cache) and stores them
// as a tree; the dependencies' trees are merged with them in the CAS, never
// checked out; the outputs come back into the CAS and are checked out into the
// work tree's install root (and, for a failure, its build directory), from
// where the job caches them as it does a local build's.

// runsRemotely reports whether spec's build runs on the execution service: it
// is configured, the kind runs commands, and the element does not build from
// an open workspace (its build directory is on this machine).
func (spec *buildSpec) runsRemotely() bool {
	return spec.Remote != nil && spec.Workspace == nil && remoteKind(spec.Kind)
}

// remoteKind says whether a kind's builds run remotely when they can: those
// that run commands. The others (import, compose, filter, stack) only move
// files, which the CAS has here.
func remoteKind(kind string) bool {
	switch kind {
	case "import", "compose", "filter", "stack":
		return false
	}
	return true
}

// NeedsLocalSandbox says whether building e needs this machine's sandbox,
// which a session checks works before it starts (a fault of the machine must
// not be cached as a failed build). Without remote execution every build may
// (as the check always was). With it, only a build that stays here and runs
// commands: a kind that runs commands built from its open workspace, or a
// compose staging an element with integration commands (whether it
// integrates is in its resolved config: such a compose is checked anyway).
func NeedsLocalSandbox(g *element.Graph, e *element.Element, rx *rexec.Config) bool {
	switch {
	case !rx.Enabled():
		return true
	case e.Kind.Name == "compose":
		return slices.ContainsFunc(g.StageDeps(e), (*element.Element).HasIntegration)
	case !remoteKind(e.Kind.Name):
		return false
	}
	return e.Workspace != ""
}

// sessionInvocation is the session's REAPI invocation id (RequestMetadata's
// tool_invocation_id), made at its first remote build: one per gantry
// invocation, on every call of every build of it.
func (b *Build) sessionInvocation() string {
	if b.invocation == "" {
		b.invocation = remote.NewUUID()
	}
	return b.invocation
}

// PrepareOn makes Build a queues.Preparer: with remote execution a build stages
// and caches on this machine's builders, and waits at its gate for a remote slot,
// which it holds only until its action is done on the cluster (the SlotDone of
// buildRemote); without, it is a plain Gater.
func (b *Build) PrepareOn() resources.Resource {
	if b.Remote.Enabled() {
		return resources.Process
	}
	return ""
}

// remoteClient is the job worker's client of spec's execution service, dialled
// by its first remote build and kept for the next ones (job.Reporter.Keep):
// one set of connections, one Capabilities call, the session's invocation id
// on every call. A broken one is dialled again.
func remoteClient(ctx context.Context, spec *buildSpec, r *job.Reporter) (*rexec.Client, error) {
	key, err := json.Marshal(struct {
		Config     *rexec.Config
		Invocation string
	}{spec.Remote, spec.RemoteInvocation})
	if err != nil {
		return nil, err
	}
	res, err := r.Keep("remote execution "+cache.DigestOf(key).Hash, func() (job.Resident, error) {
		cl, err := rexec.DialSession(ctx, *spec.Remote, spec.RemoteInvocation)
		if err != nil {
			return nil, err
		}
		r.Log("remote build: connected to " + cl.Name())
		return cl, nil
	})
	if err != nil {
		return nil, err
	}
	return res.(*rexec.Client), nil
}

// buildRemote builds spec on the execution service, its outputs into t. It
// holds the cache lock shared from the merge of the input root to the import
// of the outputs: the Directories it stores are referenced by no artifact
// until the job commits.
func buildRemote(ctx context.Context, c *cache.Cache, spec *buildSpec, t tree, r *job.Reporter, out io.Writer) error {
	so := source.StageOptions{ProjectRoot: spec.ProjectRoot, SourcesDir: c.SourcesDir(), BuildRoot: t.build, Log: r.Writer()}
	if err := stageSources(ctx, spec.Sources, so, func(s *source.Spec) error { r.Status("staging " + s.Describe()); return nil }); err != nil {
		return err
	}
	if err := r.Gate(ctx, "staged, waiting for a remote slot"); err != nil {
		return err
	}
	cl, err := remoteClient(ctx, spec, r)
	if err != nil {
		return &infraError{err}
	}
	var res rexec.Result
	err = underLock(ctx, c, r, func() error {
		deps, err := lookupDependencies(c, spec)
		if err != nil {
			return err
		}
		touchStaged(c, spec)
		sources, err := c.StoreTree(t.build)
		if err != nil {
			return &infraError{fmt.Errorf("storing the staged sources: %w", err)}
		}
		b := remoteBuild(ctx, c, spec, deps, sources)
		sent := false
		b.Status = func(s rexec.Stage) {
			r.Status(s.String())
			switch s {
			case rexec.Uploading:
				sent = true
			case rexec.Fetching:
				if sent {
					// The action is done on the cluster: its remote slot goes to
					// the next build while this one fetches and caches what it made.
					r.SlotDone()
				}
			}
		}
		r.Log("building remotely on " + cl.Name())
		res, err = cl.Run(ctx, c, b)
		return err
	})
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if rerr := reportOverlaps(spec, remoteStaging(spec, res.Overlaps), r); rerr != nil {
		return rerr
	}
	var conflict *rexec.ConflictError
	var infra *rexec.InfraError
	switch {
	case errors.As(err, &conflict):
		return &stagingError{err}
	case errors.As(err, &infra) && infra.Refused:
		return &infraError{fmt.Errorf("%w; not cached as the element's failure: the execution service refuses the action as configured — check [remote-execution] (timeout, platform, instance) against what the service accepts", err)}
	case errors.As(err, &infra):
		return &infraError{fmt.Errorf("%w; not cached as the element's failure: build again to retry", err)}
	case err != nil:
		return err
	}
	spec.builtOn = cl.Name()
	if res.Worker != "" {
		spec.builtOn += " (worker " + res.Worker + ")"
	}
	return applyRemoteResult(c, res, t, r.Log, out)
}

// remoteBuild is the rexec.Build of spec, with deps (in staging order) at the
// sysroot and sources at the build root: the paths, commands and environment
// of a bwrap build, whose sandbox makes the input root "/" as a remote build
// requires.
func remoteBuild(ctx context.Context, c *cache.Cache, spec *buildSpec, deps []*cache.Artifact, sources cache.Digest) rexec.Build {
	b := rexec.Build{
		Element:     spec.Element,
		Sources:     sources,
		BuildRoot:   sandbox.DefaultSandboxBuildRoot,
		InstallRoot: sandbox.DefaultSandboxInstallRoot,
		Env:         commandEnv(ctx, spec.Sources, c.SourcesDir(), sandbox.SandboxHome, spec.Bwrap.Env),
		Platform:    spec.RemotePlatform,
		Timeout:     spec.RemoteTimeout,
	}
	for i, a := range deps {
		b.Deps = append(b.Deps, rexec.Layer{Name: spec.Stage[i].displayName(), Files: a.Files, At: "/"})
		if cmds := spec.Stage[i].Public.commands(sandbox.Bwrap); len(cmds) > 0 {
			b.Steps = append(b.Steps, rexec.Step{Name: "integration-commands of " + spec.Stage[i].displayName(), Commands: cmds, Dir: "/"})
		}
	}
	for _, step := range element.CommandSteps() {
		if cmds := spec.Bwrap.Commands[step]; len(cmds) > 0 {
			b.Steps = append(b.Steps, rexec.Step{Name: step, Commands: cmds})
		}
	}
	return b
}

// remoteStaging is the staging whose report says the overlaps of a remote
// build's input root: the dependencies in order, then the sources.
func remoteStaging(spec *buildSpec, overlaps []rexec.Overlap) *staging {
	s := &staging{}
	for _, st := range spec.Stage {
		t := stagedTree{name: st.displayName()}
		for _, glob := range st.Whitelist {
			if re, err := whitelistRegexp(glob); err == nil { // a bad glob failed the local staging's check already
				t.whitelist = append(t.whitelist, re)
			}
		}
		s.staged = append(s.staged, t)
	}
	s.staged = append(s.staged, stagedTree{name: spec.Element + " (sources)"})
	for _, o := range overlaps {
		s.overlaps = append(s.overlaps, overlap{rel: strings.TrimPrefix(o.Path, "/"), by: o.By, over: o.Over})
	}
	return s
}

// applyRemoteResult puts what a remote build gave where the job caches a
// local build's from: its output to out, its install root into t.install and,
// when it failed, its build tree into t.build. A failed build is an error
// naming the command that failed and where it ran.
func applyRemoteResult(c *cache.Cache, res rexec.Result, t tree, log func(string), out io.Writer) error {
	out.Write(res.Stdout)
	out.Write(res.Stderr)
	switch {
	case res.Cached:
		log("remote build: the action cache had action " + res.Action.String() + ": nothing ran")
	default:
		log("remote build: action " + res.Action.String() + " ran on " + workerName(res.Worker))
	}
	if res.Message != "" {
		log("remote build: the execution service says: " + res.Message)
	}
	for _, f := range res.Flagged {
		log("warning: remote build: an output symlink is absolute or leads out of its directory (kept as it is, never followed): " + f)
	}
	if !res.Install.IsZero() {
		if err := c.Checkout(res.Install, t.install, cache.CheckoutOptions{}); err != nil {
			return &infraError{fmt.Errorf("checking out the remote build's install root: %w", err)}
		}
	}
	if res.ExitCode == 0 {
		return nil
	}
	if !res.BuildTree.IsZero() {
		if err := os.RemoveAll(t.build); err != nil {
			return &infraError{fmt.Errorf("replacing the build directory with the remote build's: %w", err)}
		}
		if err := c.Checkout(res.BuildTree, t.build, cache.CheckoutOptions{}); err != nil {
			return &infraError{fmt.Errorf("checking out the remote build's build tree: %w", err)}
		}
	}
	what := "the build"
	if res.FailedCommand != "" {
		what = res.FailedCommand
	}
	return fmt.Errorf("%s failed on %s with exit code %d", what, workerName(res.Worker), res.ExitCode)
}

// workerName is where a remote build ran, as its server names it.
func workerName(w string) string {
	if w == "" {
		return "the execution service (it names no worker)"
	}
	return "worker " + w
}
