package actions

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	rexec "github.com/gantry-build/gantry/remote/exec"
	"github.com/gantry-build/gantry/sandbox"
)

// A cache-only build (docs/remote-execution.md, "An action cache without an
// execution service"): with an action-cache service and no execution service,
// a build that runs commands under bwrap is described as the REAPI Action a
// remote build of it sends (remoteBuild, rexec.Describe): the same Command,
// input root, platform and timeout, so that both share action cache entries.
// Its result is looked up before the commands run; a hit is imported and
// committed as this build's, and nothing runs. A miss builds here, and a
// success is recorded in the action cache after the commit. A host build is not
// that Action (its commands see the host's /, not the input root), so it takes
// no part. The action cache is never the build: a lookup or a record that
// fails is a warning, and the build goes on here.

// actionCacheBuild is a build taking part: its Action, and what its commands
// write, which is recorded as the result's stdout.
type actionCacheBuild struct {
	cl  *rexec.Client
	b   rexec.Build
	d   rexec.Described
	out recordedOutput
}

// actionCachePayload sets what a build of it needs in cache-only mode.
func (b *Build) actionCachePayload(spec *buildSpec, it *queues.Item) {
	if !b.Remote.CacheOnly() {
		return
	}
	rc := b.Remote
	spec.ActionCache, spec.ActionCacheReadOnly = &rc, b.actionCacheRefused
	spec.RemotePlatform, spec.RemoteTimeout = it.Element.RemoteExecution.Platform, it.Element.RemoteExecution.Timeout
}

// lookupActionCache is the cache-only build's lookup, before the commands of
// spec run in t with deps staged: on a hit the result's install root is in
// t.install and hit is true; otherwise the build goes on, its output to the
// returned writer (out, and what is recorded).
func lookupActionCache(ctx context.Context, c *cache.Cache, spec *buildSpec, t tree, deps []*cache.Artifact, r *job.Reporter, out io.Writer) (hit bool, _ io.Writer, _ error) {
	if spec.ActionCache == nil || spec.Workspace != nil { // a workspace's build directory is its own
		return false, out, nil
	}
	name := "action cache " + remote.RedactURL(spec.ActionCache.ActionCache.URL)
	if kind, _ := sandbox.Resolve(sandbox.Kind(spec.Sandbox), t.sysroot); kind != sandbox.Bwrap {
		r.Log(name + ": not used: the build runs in the host sandbox, whose commands see the host's / rather than the input root a remote build's Action has (only bwrap builds take part)")
		return false, out, nil
	}
	cl, err := rexec.DialActionCache(*spec.ActionCache)
	if err != nil {
		r.Log("warning: " + err.Error() + "; building here, not recorded")
		return false, out, nil
	}
	ac := &actionCacheBuild{cl: cl}
	var res rexec.Result
	err = underLock(ctx, c, r, func() error {
		sources, err := c.StoreTree(t.build)
		if err != nil {
			return &infraError{fmt.Errorf("storing the staged sources: %w", err)}
		}
		ac.b = remoteBuild(ctx, c, spec, deps, sources)
		if ac.d, err = rexec.Describe(c, *spec.ActionCache, ac.b); err != nil {
			return err
		}
		r.Status("looking up the action cache")
		if res, hit, err = cl.CachedResult(ctx, c, ac.b, ac.d); err != nil || !hit {
			return err
		}
		r.Log(fmt.Sprintf("%s: it has the result of action %s (from %s): nothing builds here", name, ac.d.Action, cmp.Or(res.Worker, "a client that names no worker")))
		spec.builtOn = name
		if res.Worker != "" {
			spec.builtOn += " (worker " + res.Worker + ")"
		}
		return applyRemoteResult(c, res, t, r.Log, out)
	})
	var infra *rexec.InfraError
	var conflict *rexec.ConflictError
	switch {
	case ctx.Err() != nil:
		cl.Close()
		return false, out, context.Cause(ctx)
	case hit:
		cl.Close()
		return true, out, err
	case errors.As(err, &infra):
		cl.Close()
		r.Log("warning: " + name + ": " + infra.Op + ": " + infra.Err.Error() + "; building here, not recorded")
		return false, out, nil
	case errors.As(err, &conflict): // the local staging took it: it is the merge's
		cl.Close()
		r.Log("warning: " + name + ": describing the action: " + err.Error() + "; building here, not recorded")
		return false, out, nil
	case err != nil:
		cl.Close()
		return false, out, err
	}
	r.Log(fmt.Sprintf("%s: no result for action %s: building here; a success is recorded there", name, ac.d.Action))
	spec.actionCache = ac
	return false, io.MultiWriter(out, &ac.out), nil
}

// closeActionCache closes the action cache connection of a cache-only build.
func (spec *buildSpec) closeActionCache() {
	if spec.actionCache != nil {
		spec.actionCache.cl.Close()
	}
}

// actionCacheReport is what a build job that recorded its result reports
// (job.Result.Data): the warning of a record that failed, and whether the
// action cache refused it (then no later build of the session tries).
type actionCacheReport struct {
	ActionCacheWarning string `json:"action-cache-warning,omitempty"`
	Refused            bool   `json:"action-cache-refused,omitempty"`
}

// recordActionCache records the result of a cache-only build that succeeded,
// install being its install root's tree in c, and returns the job result's
// Data: nil, or an actionCacheReport. It never fails the build.
func recordActionCache(ctx context.Context, c *cache.Cache, spec *buildSpec, install cache.Digest, r *job.Reporter) json.RawMessage {
	ac := spec.actionCache
	if ac == nil {
		return nil
	}
	if spec.ActionCacheReadOnly {
		r.Log("action cache " + ac.cl.Name() + ": not recorded: it refused this session's results")
		return nil
	}
	r.Status("recording in the action cache")
	host, _ := os.Hostname()
	err := ac.cl.Record(ctx, c, ac.b, ac.d, install, ac.out.bytes(), "gantry on "+cmp.Or(host, "an unnamed host"))
	if err == nil {
		r.Log(fmt.Sprintf("action cache %s: recorded the result of action %s", ac.cl.Name(), ac.d.Action))
		return nil
	}
	var refused *rexec.UpdateRefusedError
	rep := actionCacheReport{Refused: errors.As(err, &refused), ActionCacheWarning: err.Error()}
	var infra *rexec.InfraError
	switch {
	case rep.Refused:
	case errors.As(err, &infra):
		rep.ActionCacheWarning = fmt.Sprintf("action cache %s: %s of %s: %v (the build succeeded and is cached here)", ac.cl.Name(), infra.Op, spec.Element, infra.Err)
	default:
		rep.ActionCacheWarning = fmt.Sprintf("action cache %s: recording the result of %s: %v (the build succeeded and is cached here)", ac.cl.Name(), spec.Element, err)
	}
	r.Log("warning: " + rep.ActionCacheWarning)
	data, _ := json.Marshal(rep)
	return data
}

// Warning makes Build a queues.Warner: a cache-only build whose result the
// action cache did not take. A refusal is said once per session, and the
// builds that start after it do not try again.
func (b *Build) Warning(_ *queues.Item, res job.Result) string {
	var rep actionCacheReport
	if len(res.Data) == 0 || json.Unmarshal(res.Data, &rep) != nil || rep.ActionCacheWarning == "" {
		return ""
	}
	if rep.Refused {
		if b.actionCacheRefused {
			return ""
		}
		b.actionCacheRefused = true
	}
	return rep.ActionCacheWarning
}

// recordedOutputLimit bounds what of a build's output its recorded result
// holds; the rest is cut.
const recordedOutputLimit = 16 << 20

// recordedOutput keeps what a build's commands write, up to
// recordedOutputLimit.
type recordedOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	over int64
}

func (o *recordedOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	room := recordedOutputLimit - o.buf.Len()
	if len(p) > room {
		o.over += int64(len(p) - room)
		o.buf.Write(p[:room])
	} else {
		o.buf.Write(p)
	}
	return len(p), nil
}

func (o *recordedOutput) bytes() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.over == 0 {
		return o.buf.Bytes()
	}
	return fmt.Appendf(bytes.Clone(o.buf.Bytes()), "\n[gantry] the output's last %d bytes are not recorded\n", o.over)
}
