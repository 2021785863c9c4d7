package actions

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	rexec "github.com/gantry-build/gantry/remote/exec"
	"github.com/gantry-build/gantry/resources"
	"github.com/gantry-build/gantry/sandbox"
	"github.com/gantry-build/gantry/source"
)

// buildSpec is the payload of a build job: everything the child process needs to build
// one element, so that it never loads the project again.
type buildSpec struct {
	CacheDir    string            `json:"cache-dir"`
	Project     string            `json:"project"`
	ProjectRoot string            `json:"project-root"`
	Element     string            `json:"element"`
	Key         string            `json:"key"`
	WeakKey     string            `json:"weak-key,omitempty"` // its artifact's weak ref (cache.Artifact.WeakKey)
	Kind        string            `json:"kind"`
	Sandbox     string            `json:"sandbox"` // auto, host, bwrap
	Stage       []stagedArtifact  `json:"stage"`   // dependencies first
	Sources     []source.Spec     `json:"sources"`
	Host        *element.Resolved `json:"host"`  // config expanded with host paths
	Bwrap       *element.Resolved `json:"bwrap"` // config expanded with sandbox paths
	WorkDir     string            `json:"work-dir"`
	DepKeys     map[string]string `json:"dep-keys"`
	Inputs      *element.Inputs   `json:"inputs,omitempty"` // what the key was computed from, recorded with the artifact
	// Workspace: the element builds from its open workspace, in a build directory kept
	// between builds; nil for a build from the sources.
	Workspace *workspaceBuild `json:"workspace,omitempty"`
	// FatalOverlaps: the element's project makes overlaps an error (fatal-warnings).
	FatalOverlaps bool `json:"fatal-overlaps,omitempty"`
	// RemoteInvocation is the session's invocation id, on every call for it.
	RemoteInvocation string `json:"remote-invocation,omitempty"`
	// Remote: the build runs on this execution service (build_remote.go); nil: here.
	// RemotePlatform and RemoteTimeout are the element's own [remote-execution].
	Remote         *rexec.Config     `json:"remote,omitempty"`
	RemotePlatform map[string]string `json:"remote-platform,omitempty"`
	RemoteTimeout  time.Duration     `json:"remote-timeout,omitempty"`
	// ActionCache: the build runs here, its result looked up and recorded in this
	// action cache (build_actioncache.go); ActionCacheReadOnly: it refused a result
	// this session, so none is recorded.
	ActionCache         *rexec.Config `json:"action-cache,omitempty"`
	ActionCacheReadOnly bool          `json:"action-cache-read-only,omitempty"`
	// CommitTicket: a successful build leaves its ref to the session (GroupCommits),
	// and waits on this ticket before it ends; nil: it writes its ref.
	CommitTicket *commitTicket `json:"commit-ticket,omitempty"`

	// builtOn is where the remote build ran, set by buildRemote for the artifact
	// (cache.Artifact.BuiltOn).
	builtOn string
	// actionCache is a cache-only build's Action, set by its lookup when it missed.
	actionCache *actionCacheBuild
}

// workspaceBuild says where a workspace element builds.
type workspaceBuild struct {
	Dir      string `json:"dir"`       // the workspace
	BuildDir string `json:"build-dir"` // kept between builds: make finds its objects there
	Manifest string `json:"manifest"`  // what the last sync copied (element.SyncWorkspace)
}

// buildDir is where the element builds: a fresh directory, or its workspace's.
func (spec *buildSpec) buildDir() string {
	if spec.Workspace != nil {
		return spec.Workspace.BuildDir
	}
	return filepath.Join(spec.WorkDir, "build")
}

// project is the project s is an artifact of.
func (s stagedArtifact) project(spec *buildSpec) string { return cmp.Or(s.Project, spec.Project) }

// stagedArtifact is one dependency artifact to check out into the sysroot.
type stagedArtifact struct {
	Project string `json:"project,omitempty"` // the artifact's project, "" for the spec's
	Element string `json:"element"`
	Key     string `json:"key"`
	// Record and Files are the digests of the artifact's record and files tree,
	// as the planning process found them (stagedDigests); zero when it did not.
	Record cache.Digest `json:"record,omitzero"`
	Files  cache.Digest `json:"files,omitzero"`
	// Pending: Files is what this session's build of it made available (Built),
	// and its ref may not be written yet (no Record): the job stages Files without
	// looking the artifact up.
	Pending bool `json:"pending,omitempty"`
	// Touch: this is the session's first build that stages the artifact, and the
	// job records the use (touchStaged); the later ones leave its ref alone.
	Touch bool `json:"touch,omitempty"`
	// Public is what the build uses of the element's public data (integrate.go).
	Public *stagedPublic `json:"public,omitempty"`
	// Name is the element as users name it (its graph name), for overlaps;
	// Whitelist its [public] overlap-whitelist, expanded.
	Name      string   `json:"name,omitempty"`
	Whitelist []string `json:"whitelist,omitempty"`
}

// displayName is the element as users name it.
func (s stagedArtifact) displayName() string { return cmp.Or(s.Name, s.Element) }

// projectRoot is the root of the project e belongs to (a junction's sub-project, or the
// graph's, root), which its local sources are relative to.
func projectRoot(root string, e *element.Element) string {
	if own := e.Project(); own != nil {
		return own.Root
	}
	return root
}

// newBuildSpec prepares the build of e. workDir is a fresh name, or an empty
// directory, for this build's directory (under the cache's tmp/, so that results can
// be renamed into the cache); the job makes it (takeWorkDir) and removes it.
func newBuildSpec(g *element.Graph, e *element.Element, cacheDir, workDir, sandboxKind string, maxJobs int) (*buildSpec, error) {
	if e.Reused {
		return nil, reusedBuildError(e)
	}
	project, name := e.ArtifactName(g.Project.Name) // a sub-project's element: as a direct build of it
	spec := &buildSpec{CacheDir: cacheDir, Project: project, ProjectRoot: projectRoot(g.Project.Root, e), Element: name,
		Key: e.Key, WeakKey: e.WeakKey, Kind: e.Kind.Name, Sandbox: sandboxKind, Sources: e.Sources, WorkDir: workDir, DepKeys: e.DepKeys()}
	stage := g.StageDeps(e) // once: the payload is made on the scheduler goroutine
	for _, d := range stage {
		project, name := d.ArtifactName(spec.Project)
		if project == spec.Project {
			project = ""
		}
		spec.Stage = append(spec.Stage, stagedArtifact{Project: project, Element: name, Key: d.Key})
	}
	spec.Inputs = g.InputsStaging(e, stage)
	jobs := strconv.Itoa(max(maxJobs, 1))
	buildRoot := filepath.Join(workDir, "build")
	if e.Workspace != "" {
		base := element.WorkspaceBuildDir(cacheDir, spec.Project, spec.Element)
		spec.Workspace = &workspaceBuild{Dir: e.Workspace, BuildDir: filepath.Join(base, "build"), Manifest: filepath.Join(base, "synced.json")}
		spec.Sources, buildRoot = nil, spec.Workspace.BuildDir
	}
	t := workTree(workDir, buildRoot)
	var err error
	if spec.Host, err = resolveHost(g.Project, e, t.paths(sandbox.Host, jobs)); err != nil {
		return nil, err
	}
	if spec.Bwrap, err = e.Resolve(g.Project, t.paths(sandbox.Bwrap, jobs)); err != nil {
		return nil, err
	}
	if err := spec.stagingRules(g, e, stage); err != nil {
		return nil, err
	}
	if err := addPublicData(g, e, spec, stage, t, jobs); err != nil {
		return nil, err
	}
	return spec, nil
}

// stagingRules sets what the job needs to judge overlaps (staging.go): whether e's
// project makes them fatal, who each staged dependency (stage, spec.Stage's elements) is
// and what it may overwrite; and stages nothing for a stack, which runs no commands.
func (spec *buildSpec) stagingRules(g *element.Graph, e *element.Element, stage []*element.Element) error {
	if e.Kind.Name == "stack" {
		spec.Stage = nil
		return nil
	}
	own := cmp.Or(e.Project(), g.Project)
	spec.FatalOverlaps = own.Fatal(element.WarningOverlaps)
	for i, d := range stage { // spec.Stage, in the same order
		whitelist, err := d.OverlapWhitelist(own)
		if err != nil {
			return err
		}
		spec.Stage[i].Name, spec.Stage[i].Whitelist = d.Name, whitelist
	}
	return nil
}

// Build is the build jobs of a session, and its Build queue (queues.Queue, and an
// Availer, Gater, Claimer and Waiter): it says when an element can be built, makes
// the jobs' payloads and books their ends. Its methods run on the scheduler
// goroutine. Its jobs say when their artifact is in the cache, before they end
// (Available): its dependants can be built from then on.
type Build struct {
	Cache       *cache.Cache
	Graph       *element.Graph
	Sandbox     string // --sandbox: auto, host, bwrap
	MaxJobs     int    // the builds' %{max-jobs}
	RetryFailed bool   // build cached failures again
	Stats       *cache.Stats
	// Commits: the session places the refs of successful builds (GroupCommits); nil:
	// each build job writes its own.
	Commits *GroupCommits
	// invocation is the session's REAPI invocation id, made at its first remote build.
	invocation string
	// Remote is the session's remote execution: when Enabled, a build holds a remote
	// slot (resources.Remote, remote-jobs of them) instead of a builder; when
	// CacheOnly, builds run here and their results are looked up and recorded in its
	// action cache (docs/remote-execution.md).
	Remote rexec.Config
	staged stagedDigests // each dependency looked up once per session
	claims *buildClaims  // made at the first claim

	// actionCacheRefused: the action cache refused a cache-only build's result.
	actionCacheRefused bool
}

func (*Build) Action() queues.Action { return queues.Build }

// Status: an element is built once every staged dependency is cached.
func (*Build) Status(it *queues.Item) (queues.Status, string) {
	if it.Cached && it.Element.Reused {
		return queues.Skip, "reused in non-strict mode (found by its weak key)"
	}
	if it.Cached {
		return queues.Skip, "cached"
	}
	if uncachedStage(it) != nil {
		return queues.Wait, "waiting for dependencies to build"
	}
	return queues.Ready, ""
}

// WaitsOn is the first staged dependency not yet cached: only its job ending can
// make it ready.
func (*Build) WaitsOn(it *queues.Item) *queues.Item { return uncachedStage(it) }

// uncachedStage is the first staged dependency of it not yet cached, or nil.
func uncachedStage(it *queues.Item) *queues.Item {
	for _, d := range it.Stage {
		if !d.Cached {
			return d
		}
	}
	return nil
}

// Resources: a builder (a remote slot with remote execution), the cache, and the
// element's pool if it names one.
func (b *Build) Resources(it *queues.Item) resources.Request {
	req := resources.Request{Shared: []resources.Resource{b.GateOn(), resources.Cache}}
	if p := it.Element.Pool; p != "" {
		req.Shared = append(req.Shared, resources.PoolResource(p))
	}
	return req
}

// GateOn makes Build a Gater: a build stages while the builders are busy, and its
// commands start the moment one is free (buildJob waits at its gate for it). With
// remote execution the slot is a remote one: the cluster's actions in flight, not
// this machine's builders, bound the builds.
func (b *Build) GateOn() resources.Resource {
	if b.Remote.Enabled() {
		return resources.Remote
	}
	return resources.Process
}

// Claim makes Build a Claimer: sessions sharing the cache build each artifact once
// (build_claims.go).
func (b *Build) Claim(it *queues.Item) queues.Claim {
	if b.claims == nil {
		b.claims = &buildClaims{c: b.Cache, project: b.Graph.Project.Name, retryFailed: b.RetryFailed}
	}
	return b.claims.claim(it)
}

func (*Build) Done(it *queues.Item, _ job.Result) { it.Cached, it.Built = true, true }

// Available makes it count as cached for the builds that stage it, and books what
// its build made available (the artifact's digests) for their payloads.
func (b *Build) Available(it *queues.Item, data json.RawMessage) {
	it.Cached, it.Built = true, true
	project, name := it.Element.ArtifactName(b.Graph.Project.Name)
	b.staged.Built(project, name, it.Element.Key, data)
}

func (*Build) Retries() int { return 0 }

// Payload is the buildSpec of the build of it, in its binary form (build_payload.go).
func (b *Build) Payload(it *queues.Item) (job.Input, error) {
	// Named, not made: the job makes it, or renames its worker's last one
	// into place (takeWorkDir).
	work := b.Cache.TempName("build")
	spec, err := newBuildSpec(b.Graph, it.Element, b.Cache.Root, work, b.Sandbox, b.MaxJobs)
	if err == nil {
		if b.Remote.Enabled() {
			remote := b.Remote
			spec.Remote, spec.RemotePlatform, spec.RemoteTimeout = &remote, it.Element.RemoteExecution.Platform, it.Element.RemoteExecution.Timeout
			spec.RemoteInvocation = b.sessionInvocation()
		}
		b.actionCachePayload(spec, it)
		b.staged.Fill(b.Cache, spec)
		err = spec.checkStagedShell(b.Cache)
		if err == nil && b.Commits != nil {
			spec.CommitTicket, err = b.Commits.ticket(it.Name())
		}
	}
	if err != nil {
		return job.Input{}, err
	}
	return spec.input(), nil
}

// JobEnded is the build's side of the session's OnJobEnd hook, run on the scheduler
// goroutine: a successful build's duration feeds the next session's estimates; a
// terminated build's failed artifact is dropped (the job may have seen its command die
// of the terminate before its own SIGTERM and cached a failure; the user stopped it, it
// did not fail).
func (b *Build) JobEnded(end queues.JobEnd) error {
	if end.Action != queues.Build {
		return nil
	}
	project, name := b.Graph.Project.Name, end.Element
	if e := b.Graph.Elements[end.Element]; e != nil {
		project, name = e.ArtifactName(project)
	}
	switch end.Result {
	case queues.ResultSuccess:
		b.Stats.Observe(project+"/"+name, end.Duration)
	case queues.ResultTerminated:
		return dropFailure(b.Cache, project, name, end.Key)
	}
	return nil
}

// dropFailure deletes the artifact of element's key if it records a failed build.
func dropFailure(c *cache.Cache, project, element, key string) error {
	a, err := c.Lookup(project, element, key)
	switch {
	case errors.Is(err, cache.ErrNotFound):
		return nil
	case err != nil:
		return err
	case a.Success:
		return nil
	}
	return c.Delete(project, element, key)
}

// Host commands must never have a path that could run something spliced into their
// `sh -c` text: the host paths lie under the cache directory, which the user names, and
// a directory named `c$(touch x)` would run. A path made only of characters that mean
// nothing to the shell is spliced as it is (so '%{install-root}' works in any quoting);
// any other path is referred to through an environment variable holding it
// ("${GANTRY_INSTALL_ROOT}" expands to exactly the path, inside double quotes or
// without; inside single quotes it stays literal text, which is safe).
var hostPathVars = element.Paths{BuildRoot: "${GANTRY_BUILD_ROOT}", InstallRoot: "${GANTRY_INSTALL_ROOT}", Sysroot: "${GANTRY_SYSROOT}"}

// shellSafe reports whether s can be spliced into shell text unquoted and mean itself.
func shellSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("/._-+,:@%", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// resolveHost expands e for the host sandbox: commands get each path as it is when it is
// shellSafe, else through hostPathVars; the environment holds the paths themselves (and
// those variables).
func resolveHost(p *element.Project, e *element.Element, host element.Paths) (*element.Resolved, error) {
	r, err := e.Resolve(p, hostRefs(host))
	if err != nil {
		return nil, err
	}
	withPaths, err := e.Resolve(p, host)
	if err != nil {
		return nil, err
	}
	r.Env = withPaths.Env
	r.Env["GANTRY_BUILD_ROOT"] = host.BuildRoot
	r.Env["GANTRY_INSTALL_ROOT"] = host.InstallRoot
	r.Env["GANTRY_SYSROOT"] = host.Sysroot
	return r, nil
}

// hostRefs are the host paths as host commands refer to them: each as it is when it is
// shellSafe, else through hostPathVars.
func hostRefs(host element.Paths) element.Paths {
	refs := hostPathVars
	refs.MaxJobs = host.MaxJobs
	for _, pair := range []struct{ ref, path *string }{
		{&refs.BuildRoot, &host.BuildRoot}, {&refs.InstallRoot, &host.InstallRoot}, {&refs.Sysroot, &host.Sysroot},
	} {
		if shellSafe(*pair.path) {
			*pair.ref = *pair.path
		}
	}
	return refs
}

// buildJob is the child side of a build job: stage, run the kind's commands, collect
// the install root and commit the artifact (failed builds too). The artifact's ref is
// written last, so a build killed at any point leaves nothing half-visible.
func buildJob(ctx context.Context, js job.Spec, r *job.Reporter) (res job.Result, err error) {
	spec, err := readBuildSpec(js)
	if err != nil {
		return job.Result{}, err // nothing of the element ran: nothing is cached
	}
	c, err := cache.Attach(spec.CacheDir)
	if err != nil {
		return job.Result{}, err
	}
	// The executable twins a linked staging made stay in the cache, whatever
	// comes of the build: the quota counts them.
	defer func() { res.CacheBytes += c.TwinBytes() }()
	c.RememberDirectories()              // this job's: each dependency's tree is read and checked once
	work := &workDir{path: spec.WorkDir} // taken by build if it needs one after all
	defer work.release()
	if spec.needsWorkDir() {
		if err := work.take(); err != nil {
			return job.Result{}, err
		}
	}
	// Hashed before staging (the files the build is about to read) and encoded
	// then too: the record needs it only after the artifact is available, and
	// before the gate it takes nothing from a builder.
	var inputs json.RawMessage
	if spec.Inputs != nil {
		spec.Inputs.HashFiles()
		inputs = element.MarshalInputs(spec.Inputs)
	}
	started := time.Now()
	out := &faultWatcher{w: r.Writer()}
	runner, buildErr := build(ctx, c, spec, work, r, out)
	defer runner.Close()
	defer spec.closeActionCache()
	if ctx.Err() != nil {
		// Terminated, or gantry died: cache nothing, the next session builds again. A command can die
		// of the group's SIGTERM before this process sees its own; then a failure is
		// cached, and the parent, which knows the job was terminated, drops it.
		return job.Result{}, context.Cause(ctx)
	}
	// The commands are over: the builder goes to the next build while this job
	// caches what they made (or left, when they failed).
	r.SlotDone()
	var staging *stagingError
	if errors.As(buildErr, &staging) {
		// The project's to change (fatal overlaps): not cached, so that the
		// change applies at once, without --retry-failed.
		r.Log("error: " + buildErr.Error())
		return job.Result{}, buildErr
	}
	var damaged *DamagedDependencyError
	if errors.As(buildErr, &damaged) {
		// Not the element's fault: nothing is cached; the result names the dependency.
		data, err := json.Marshal(damaged.DamagedDependency)
		if err != nil {
			return job.Result{}, errors.Join(buildErr, err)
		}
		return job.Result{Data: data}, buildErr
	}
	if fault := machineFault(buildErr, spec.WorkDir, out); fault != nil {
		r.Log("error: " + fault.Error())
		return job.Result{}, fault // not the element's fault: do not cache a failure
	}
	// Committing holds the cache lock shared: a cleanup must not sweep the
	// blobs stored here before the ref that reaches them is written.
	lock, err := lockCache(ctx, c, r)
	if err != nil {
		return job.Result{}, err
	}
	defer lock.Unlock()
	a := &cache.Artifact{Project: spec.Project, Element: spec.Element, Key: spec.Key, WeakKey: spec.WeakKey, Success: buildErr == nil,
		Dependencies: spec.DepKeys, Inputs: inputs, Started: started, Finished: time.Now(), BuiltOn: spec.builtOn}
	a.BuildDuration = a.Finished.Sub(started)
	// Counted before the install root's files are moved into the cache.
	added := cachedBytes(spec.WorkDir, buildErr != nil, js.LogPath)
	// The install root is this job's own, and removed when it ends: its files are
	// moved into the cache, not copied (TakeTree), what the install root held
	// when it failed too (for `artifact checkout`).
	if buildErr != nil {
		a.Error = buildErr.Error()
		r.Log("error: " + buildErr.Error())
		a.Files, err = work.tree(c, filepath.Join(spec.WorkDir, "install"), true)
		if err == nil {
			// Keep the failed build tree, for `gantry shell --build`: copied, as a
			// workspace's build directory is kept between builds.
			a.BuildTree, err = work.tree(c, spec.buildDir(), false)
		}
	} else {
		r.Status("caching artifact")
		a.Files, err = work.tree(c, filepath.Join(spec.WorkDir, "install"), true)
	}
	if err != nil {
		return job.Result{}, fmt.Errorf("caching the artifact of %s: %w", spec.Element, err)
	}
	var recorded json.RawMessage // a cache-only build's record's report
	if buildErr == nil {
		// Its files are in the cache: the builds that stage it can start while
		// this job writes the record and makes it all durable (see Built).
		r.Available(Built{Files: a.Files}.encode())
		// Before the log is stored: it says what came of the record.
		recorded = recordActionCache(ctx, c, spec, a.Files, r)
	}
	// What the commands wrote reaches the log before it is stored; a leftover
	// process writing later gets EPIPE (Available killed them all on success).
	if err := runner.Close(); err != nil {
		r.Log("warning: closing the commands' output: " + err.Error()) // nothing of the build is lost
	}
	if js.LogPath != "" {
		if a.Log, err = storeLog(c, js.LogPath); err != nil {
			return job.Result{}, fmt.Errorf("caching the build log of %s: %w", spec.Element, err)
		}
	}
	if buildErr == nil && spec.CommitTicket != nil {
		return groupCommitResult(c, a, spec.CommitTicket, added, recorded)
	}
	if err := c.Commit(a); err != nil {
		return job.Result{}, err
	}
	if buildErr != nil {
		return job.Result{OK: false, Error: buildErr.Error(), CacheBytes: added}, nil
	}
	return job.Result{OK: true, CacheBytes: added, Data: recorded}, nil
}

// infraError is a failure of gantry or the machine (staging, disk), not of the build.
type infraError struct{ err error }

func (e *infraError) Error() string { return e.err.Error() }
func (e *infraError) Unwrap() error { return e.err }

// build stages and runs the element's commands, their output to out. It returns
// the Runner they ran in (nil for kinds that run none), still open: the caller
// closes it once the job's processes are gone, before storing the log, so that
// what a leftover process wrote reaches the log, and not on the builder's time.
func build(ctx context.Context, c *cache.Cache, spec *buildSpec, work *workDir, r *job.Reporter, out io.Writer) (*sandbox.Runner, error) {
	r.Log("element: " + spec.Element + ", key: " + spec.Key + ", project: " + spec.Project)
	t := workTree(spec.WorkDir, spec.buildDir())
	// The work directory, if the build has taken it (or takes it, staging).
	makeTree := func() error {
		if err := work.take(); err != nil {
			return err
		}
		if err := t.make(); err != nil {
			return &infraError{fmt.Errorf("preparing the build directory: %w", err)}
		}
		return nil
	}
	if work.taken {
		if err := makeTree(); err != nil {
			return nil, err
		}
	}
	sysroot, buildDir, installDir := t.sysroot, t.build, t.install
	if spec.Kind == "stack" {
		// Its dependencies reach its dependants through their own staging.
		r.Log("stack: nothing to stage, no commands: an empty artifact")
		return nil, nil
	}
	if spec.runsRemotely() {
		return nil, buildRemote(ctx, c, spec, t, r, out)
	}
	// Staging holds the cache lock shared: a cleanup waits until it is done, and
	// what was staged (copies, or hard links) stays if a cleanup comes later.
	var deps []*cache.Artifact
	var links, nothing bool
	var staged *staging
	err := underLock(ctx, c, r, func() error {
		var err error
		if deps, err = lookupDependencies(c, spec); err != nil {
			return err
		}
		if !work.taken {
			if nothing = stagesNothing(deps); nothing {
				// Nothing to stage and nothing runs (build_nothing.go).
				staged, err = stageNothing(spec, deps, r)
				touchStaged(c, spec)
				return err
			}
			if err := makeTree(); err != nil {
				return err
			}
		}
		// Hard links into the cache are safe only where nothing can write through
		// them: see stageLinks.
		links = stageLinks(c, spec, deps)
		if staged, err = stageDependencies(c, spec, deps, sysroot, links, r); err != nil {
			return err
		}
		touchStaged(c, spec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := reportOverlaps(spec, staged, r); err != nil {
		return nil, err
	}
	if nothing {
		return nil, runNothing(ctx, c, spec, r)
	}
	if w := spec.Workspace; w != nil {
		// One build at a time in the kept build directory, whichever gantry runs it.
		r.Status("waiting for the build directory of workspace " + w.Dir)
		unlock, err := source.LockFile(ctx, filepath.Join(filepath.Dir(w.BuildDir), "lock"))
		if err != nil {
			return nil, &infraError{fmt.Errorf("locking the build directory of workspace %s: %w", w.Dir, err)}
		}
		defer unlock()
		r.Status("syncing workspace " + w.Dir)
		r.Log("building from workspace " + w.Dir + " in " + w.BuildDir + " (kept between builds)")
		if err := element.SyncWorkspace(w.Dir, w.BuildDir, w.Manifest); err != nil {
			return nil, err
		}
	}
	so := source.StageOptions{ProjectRoot: spec.ProjectRoot, SourcesDir: c.SourcesDir(), BuildRoot: buildDir, Log: r.Writer()}
	status := func(s *source.Spec) error {
		r.Status("staging " + s.Describe())
		return nil
	}
	if err := stageSources(ctx, spec.Sources, so, status); err != nil {
		return nil, err
	}
	switch spec.Kind {
	case "import":
		if err := waitForBuilder(ctx, r); err != nil {
			return nil, err
		}
		return nil, importFiles(spec, buildDir, installDir)
	case "compose", "filter":
		return composeJob(ctx, c, spec, deps, t, r, out)
	}
	var hit bool
	if hit, out, err = lookupActionCache(ctx, c, spec, t, deps, r, out); hit || err != nil {
		return nil, err
	}
	runner, kind, err := prepareCommands(ctx, c, spec, t, deps, links, r, out)
	if err != nil {
		return runner, err
	}
	resolved := spec.Host
	if kind == sandbox.Bwrap {
		resolved = spec.Bwrap
	}
	conf := decideConfigure(spec, kind, resolved) // nil but for a workspace: see build_configure.go
	if err := waitForBuilder(ctx, r); err != nil {
		return runner, err
	}
	if err := integrate(ctx, runner, spec, kind, t, r); err != nil {
		return runner, err
	}
	for _, step := range element.CommandSteps() {
		if step == configureStep && conf != nil {
			r.Log(step + ": " + conf.reason)
			if !conf.run {
				continue
			}
			if err := conf.begin(); err != nil {
				return runner, err
			}
		}
		stepStarted := time.Now()
		for _, cmd := range resolved.Commands[step] {
			r.Status(strings.TrimSuffix(step, "-commands") + ": " + firstLine(cmd))
			r.Log("+ " + cmd)
			if err := runner.Run(ctx, cmd); err != nil {
				r.Log(fmt.Sprintf("%s failed after %s", step, since(stepStarted)))
				return runner, fmt.Errorf("%s: %w", step, err)
			}
		}
		if len(resolved.Commands[step]) > 0 {
			r.Log(fmt.Sprintf("%s done in %s", step, since(stepStarted)))
		}
		if step == configureStep && conf != nil {
			if err := conf.done(); err != nil {
				return runner, err
			}
		}
	}
	return runner, nil
}

// prepareCommands picks the sandbox the build's commands (and integration commands)
// run in, now that the sysroot of t is staged (deps, as hard links when links), and
// prepares it: everything the commands need but a builder is done before the gate;
// after it, each command costs its log lines, its fork and its exec.
func prepareCommands(ctx context.Context, c *cache.Cache, spec *buildSpec, t tree, deps []*cache.Artifact, links bool, r *job.Reporter, out io.Writer) (*sandbox.Runner, sandbox.Kind, error) {
	kind, reason := sandbox.Resolve(sandbox.Kind(spec.Sandbox), t.sysroot)
	if err := sandbox.CheckSysroot(kind, t.sysroot); err != nil {
		r.Log("sandbox: " + string(kind) + " (" + reason + ")")
		return nil, kind, &infraError{err}
	}
	if kind == sandbox.Host && links && len(deps) > 0 {
		// auto chose the host after all: the commands can write to the sysroot.
		if err := underLock(ctx, c, r, func() error { return restage(c, spec, deps, t.sysroot, r) }); err != nil {
			return nil, kind, err
		}
	}
	resolved := spec.Host
	if kind == sandbox.Bwrap {
		resolved = spec.Bwrap
	}
	env, err := buildEnv(ctx, c, spec, kind, resolved.Env)
	if err != nil {
		return nil, kind, err
	}
	logBuildHeader(r, kind, reason, env)
	cfg := t.config(kind, env)
	cfg.WritableSysroot = spec.integrates() // staged as copies (stageLinks)
	cfg.Stdout, cfg.Stderr = out, out
	// The job's process group: suspend and terminate of the job reach the commands.
	cfg.Group = sandbox.CallerGroup
	runner, err := sandbox.Prepare(cfg)
	if err != nil {
		return nil, kind, &infraError{err} // it names the sandbox: a fault of the machine, not the element's
	}
	return runner, kind, nil
}

// stageSources stages sources in their order into so.BuildRoot, each at its
// directory, as a build stages them: a patch applies to what the sources before it
// staged. before, when not nil, runs first for each source (a status, a fetch).
// Then everything in so.BuildRoot gets source.StagedTime, tar members and patched
// files too, as BuildStream does. Builds, shells, workspaces and source checkouts
// stage through it.
func stageSources(ctx context.Context, sources []source.Spec, so source.StageOptions, before func(*source.Spec) error) error {
	for i := range sources {
		s := &sources[i]
		if before != nil {
			if err := before(s); err != nil {
				return fmt.Errorf("source %d: %w", i+1, err)
			}
		}
		if err := source.Stage(ctx, s, so); err != nil {
			return fmt.Errorf("source %d: %w", i+1, err)
		}
	}
	if len(sources) == 0 {
		return nil
	}
	return source.SetStagedTimes(so.BuildRoot)
}

// buildEnv is the build commands' environment (commandEnv), with HOME on the host an
// empty directory of the work directory.
func buildEnv(ctx context.Context, c *cache.Cache, spec *buildSpec, kind sandbox.Kind, own map[string]string) (map[string]string, error) {
	home := sandbox.SandboxHome
	if kind != sandbox.Bwrap {
		// Kept emptied between a worker's jobs with the work directory's other
		// subdirectories (workDirSubdirs): a fresh inode per build cost 5% of a
		// no-op build of 2,000 elements on ext4.
		home = filepath.Join(spec.WorkDir, "home")
		if err := os.MkdirAll(home, 0o755); err != nil {
			return nil, &infraError{fmt.Errorf("making the build's HOME: %w", err)}
		}
	}
	return commandEnv(ctx, spec.Sources, c.SourcesDir(), home, own), nil
}

// commandEnv is the environment of an element's commands, in its build or its shell:
// sandbox.FixedEnv with HOME at home and SOURCE_DATE_EPOCH the newest date the sources
// give (a git source's commit time), else sandbox.DefaultSourceDate (a workspace gives
// none), under the element's own environment, which wins where it sets a variable.
func commandEnv(ctx context.Context, sources []source.Spec, sourcesDir, home string, own map[string]string) map[string]string {
	env := sandbox.FixedEnv(home, sourceDate(ctx, sources, sourcesDir))
	maps.Copy(env, own)
	return env
}

// sourceDate is SOURCE_DATE_EPOCH for sources: the newest date they give (source.Date),
// else sandbox.DefaultSourceDate.
func sourceDate(ctx context.Context, sources []source.Spec, sourcesDir string) time.Time {
	def := sandbox.DefaultSourceDate()
	date := def
	for i := range sources {
		if d, ok := source.Date(ctx, &sources[i], sourcesDir); ok && (date.Equal(def) || d.After(date)) {
			date = d
		}
	}
	return date
}

// waitForBuilder is the build job's gate (job.Reporter.Gate): staging the
// dependencies and sources before it needs no builder, so a gated job does it
// while other builds run; the commands after it do.
func waitForBuilder(ctx context.Context, r *job.Reporter) error {
	return r.Gate(ctx, "staged, waiting for a builder")
}

// logBuildHeader writes what the commands run with before the first of them:
// the sandbox in one short line (the reason's detail, such as why bwrap did not
// work, is cut at its first parenthesis) and the environment, sorted.
func logBuildHeader(r *job.Reporter, kind sandbox.Kind, reason string, env map[string]string) {
	short, _, _ := strings.Cut(reason, " (")
	r.Log("sandbox: " + string(kind) + " (" + short + ")")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		r.Log("env: " + k + "=" + env[k])
	}
}

// stageLinks says whether dependencies may be staged as hard links to the
// cache's read-only blobs. As root (common in CI) mode 0444 stops nothing: a
// command that could write to the sysroot would change the cache itself. So
// links are used only where no command writes to the sysroot: kinds that run
// no commands (stack, import and compose only read it), and bwrap, which
// mounts the sysroot read-only with every capability dropped (and link(2)
// across mounts fails, so the writable build root cannot link to it either).
// auto picks bwrap or the host only once the sysroot is staged: it gets links
// when a dependency has a top-level bin (without one there is no /bin/sh, so
// auto picks the host), and the build stages again with copies if it picks
// the host after all.
func stageLinks(c *cache.Cache, spec *buildSpec, deps []*cache.Artifact) bool {
	if spec.integrates() {
		return false // integration commands write to the sysroot
	}
	switch spec.Kind {
	case "stack", "import", "compose", "filter":
		return true
	}
	switch sandbox.Kind(spec.Sandbox) {
	case sandbox.Host:
		return false
	case sandbox.Auto, "":
		return slices.ContainsFunc(deps, func(a *cache.Artifact) bool { return hasBin(c, a) })
	}
	return true
}

// hasBin reports whether a's files have a top-level bin, a directory or a
// symlink. An unreadable tree says no: staging reports it.
func hasBin(c *cache.Cache, a *cache.Artifact) bool {
	root, err := c.ReadDirectory(a.Files)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(root.Directories, func(d *repb.DirectoryNode) bool { return d.Name == "bin" }) ||
		slices.ContainsFunc(root.Symlinks, func(l *repb.SymlinkNode) bool { return l.Name == "bin" })
}

// stageDependencies checks out deps, the artifacts of spec.Stage, into
// sysroot, as hard links or as copies (reflinks where the filesystem can).
// Blobs are trusted (cache.CheckoutOptions.Trusted): checked by type, size and
// mode, not hashed, since the cache hashed them when they entered it and they
// are read-only since; a dependency found damaged is dropped
// from the cache (see damagedDependency), unless another session has
// committed the same key since it was looked up: then that artifact replaces
// it (deps[i]) and the sysroot is staged again. It is called under the cache
// lock, so no cleanup sweeps a replacement's blobs meanwhile: each dependency
// is replaced at most once. A later dependency's path replaces an earlier one's
// (staging.go): the staging returned says which did.
func stageDependencies(c *cache.Cache, spec *buildSpec, deps []*cache.Artifact, sysroot string, links bool, r *job.Reporter) (*staging, error) {
	sayStaging(deps, r)
	replaced := make([]bool, len(deps))
	opts := cache.CheckoutOptions{Hardlink: links, Trusted: true}
	s := newStaging(c, sysroot, opts)
	for i := 0; i < len(deps); i++ {
		a := deps[i]
		err := s.stage(spec.Stage[i].displayName(), a.Files, spec.Stage[i].Whitelist)
		var blob *cache.BlobError
		var conflict *stagingError
		if errors.As(err, &conflict) {
			return nil, err
		}
		if errors.As(err, &blob) {
			b := replacement(c, a)
			if b == nil || replaced[i] {
				return nil, damagedDependency(c, a, blob)
			}
			r.Log(fmt.Sprintf("staging dependency %s: %v; staging the artifact another session committed meanwhile", a.Element, blob))
			deps[i], replaced[i] = b, true
			if err := emptySysroot(sysroot); err != nil {
				return nil, err
			}
			s = newStaging(c, sysroot, opts)
			i = -1 // from the first again
			continue
		}
		if err != nil {
			return nil, &infraError{fmt.Errorf("staging dependency %s into the sysroot: %w", spec.Stage[i].Element, err)}
		}
	}
	return s, nil
}

// sayStaging is the status of a build staging deps.
func sayStaging(deps []*cache.Artifact, r *job.Reporter) {
	if len(deps) > 0 {
		r.Status(fmt.Sprintf("staging %d dependencies", len(deps)))
	}
}

// reportOverlaps warns of what staging s overlapped (in the log and to the user), or
// fails the build with it where the project makes overlaps fatal.
func reportOverlaps(spec *buildSpec, s *staging, r *job.Reporter) error {
	n, text := s.report()
	switch {
	case n == 0:
		return nil
	case spec.FatalOverlaps:
		return overlapsError(text)
	}
	r.Warn(overlapsWarning(text))
	return nil
}

// replacement is the artifact the cache now holds for a when that is another
// one (other files) and good: another session committed its key since a was
// looked up, and a's blobs, no longer referenced, may have been swept.
func replacement(c *cache.Cache, a *cache.Artifact) *cache.Artifact {
	b, err := c.Lookup(a.Project, a.Element, a.Key)
	if err != nil || !b.Success || b.Files == a.Files {
		return nil
	}
	return b
}

// restage replaces a sysroot staged with hard links by one staged with copies.
func restage(c *cache.Cache, spec *buildSpec, deps []*cache.Artifact, sysroot string, r *job.Reporter) error {
	r.Log("staging the dependencies again as copies: host commands can write to the sysroot")
	if err := emptySysroot(sysroot); err != nil {
		return err
	}
	_, err := stageDependencies(c, spec, deps, sysroot, false, r) // the same overlaps, reported once
	return err
}

// emptySysroot removes what was staged into sysroot, to stage it again.
func emptySysroot(sysroot string) error {
	if err := os.RemoveAll(sysroot); err != nil {
		return &infraError{fmt.Errorf("removing the sysroot to stage it again: %w", err)}
	}
	if err := os.Mkdir(sysroot, 0o755); err != nil {
		return &infraError{fmt.Errorf("preparing the build directory: %w", err)}
	}
	return nil
}

// DamagedDependencyError is the build error for a DamagedDependency. It is not
// the element's failure and is never cached as one.
type DamagedDependencyError struct {
	queues.DamagedDependency
	Err error
}

func (e *DamagedDependencyError) Error() string {
	if e.Blob == "" {
		return fmt.Sprintf("staging dependency %s: %v, so it is built again", e.Element, e.Err)
	}
	return fmt.Sprintf("staging dependency %s: %v; dropped its artifact %s from the cache, so it is built again",
		e.Element, e.Err, e.Key[:min(len(e.Key), 8)])
}

func (e *DamagedDependencyError) Unwrap() error { return e.Err }

// damagedDependency drops artifact a, a dependency found damaged while staging
// it (only if its ref still names it: see cache.DropArtifact).
func damagedDependency(c *cache.Cache, a *cache.Artifact, blob *cache.BlobError) error {
	if _, err := c.DropArtifact(a); err != nil {
		return &infraError{fmt.Errorf("staging dependency %s: %v; dropping its artifact: %w", a.Element, blob, err)}
	}
	return &DamagedDependencyError{DamagedDependency: queues.DamagedDependency{Element: a.Element, Key: a.Key,
		Blob: blob.Digest.String(), Problem: blob.Error(), Removals: c.Removals()}, Err: blob}
}

// vanishedDependency is the error of a dependency whose artifact is gone from
// the cache since the session planned with it: a cleanup in another process
// removed it, a race the session heals.
func vanishedDependency(c *cache.Cache, name, key string, err error) error {
	return &DamagedDependencyError{DamagedDependency: queues.DamagedDependency{Element: name, Key: key,
		Problem: "its artifact is gone from the cache", Removals: c.Removals()},
		Err: fmt.Errorf("its artifact %s is gone from the cache (a cache cleanup in another process?): %w", key[:min(len(key), 8)], err)}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// importFiles moves the staged sources (config.source, default the whole build root)
// into the artifact under config.target. Both are resolved inside their roots by the
// kernel (os.Root): a link staged by a source cannot lead the import out of them.
func importFiles(spec *buildSpec, buildDir, installDir string) error {
	src, target := spec.Bwrap.Source, spec.Bwrap.Target
	build, err := os.OpenRoot(buildDir)
	if err != nil {
		return &infraError{err}
	}
	defer build.Close()
	rel := filepath.FromSlash(path.Clean("./" + src))
	if _, err := build.Stat(rel); err != nil {
		return fmt.Errorf("import: config.source %q: %w (it must be a path inside the build root, not through a link that leaves it)", src, err)
	}
	to, _, err := source.OpenDir(installDir, target)
	if err != nil {
		return fmt.Errorf("import: config.target %q: %w", target, err)
	}
	defer to.Close()
	return source.CopyTree(filepath.Join(buildDir, rel), to, ".") // rel checked above: inside
}

// since is how long ago t was, as a log line shows it.
func since(t time.Time) time.Duration {
	return time.Since(t).Round(time.Millisecond)
}
