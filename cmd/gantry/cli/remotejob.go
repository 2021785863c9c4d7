package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/units"
	"github.com/gantry-build/gantry/job"
)

// openPullSpec reads a pull or push job's spec, opens the cache, takes its lock shared
// (a cleanup must not remove what is being pushed, nor see a pull half done) and sets
// the remote idle timeout. The caller unlocks.
func openPullSpec(ctx context.Context, spec job.Spec, r *job.Reporter) (*pullSpec, *cache.Cache, *cache.Lock, error) {
	ps, c, err := readPullSpec(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	lock, err := c.Lock(ctx, cache.Shared, r.Notice)
	if err != nil {
		return nil, nil, nil, err
	}
	return ps, c, lock, nil
}

func readPullSpec(spec job.Spec) (*pullSpec, *cache.Cache, error) {
	var ps pullSpec
	if err := json.Unmarshal(spec.Payload, &ps); err != nil {
		return nil, nil, fmt.Errorf("reading %s spec: %w", spec.Action, err)
	}
	c, err := openCacheAt(ps.CacheDir)
	return &ps, c, err
}

// pullJob downloads an element's artifact from the first remote that has it. A remote
// that lacks it, or sends bytes that do not match their digest (a warning, and
// pullResult.Wrong names it), is passed over; if none has it the job is skipped, but
// fails when a remote sent wrong bytes (the pull command exits 1; a build falls back
// to building it, see recoverPull). Unavailable remotes make the job fail
// temporarily (the scheduler retries it); Result.Data names them (pullResult).
func pullJob(ctx context.Context, spec job.Spec, r *job.Reporter) (job.Result, error) {
	ps, c, lock, err := openPullSpec(ctx, spec, r)
	if err != nil {
		return job.Result{}, err
	}
	defer lock.Unlock()
	var pr pullResult
	if ps.Lease != nil {
		if res, pull := askLease(ctx, ps, &pr, r); !pull {
			return res, nil
		}
	}
	var failure, corrupt error
	for _, rs := range ps.Remotes {
		store, err := remote.Open(rs)
		if err != nil {
			pr.Down, pr.Reasons = append(pr.Down, rs.Display()), append(pr.Reasons, err.Error())
			failure = err
			continue
		}
		r.Status("pulling from " + store.Name())
		t, err := remote.PullArtifact(ctx, c, store, ps.Project, ps.Element, ps.Key, r.Progress)
		store.Close()
		switch {
		case err == nil:
			r.Log(fmt.Sprintf("pulled %s from %s: %d blobs, %s", ps.Element, store.Name(), t.Blobs, units.Bytes(t.Bytes)))
			pr.From = store.Name()
			data, err := json.Marshal(pr)
			return job.Result{OK: true, Data: data}, err
		case ctx.Err() != nil:
			return job.Result{}, err
		case errors.Is(err, cache.ErrNotFound):
			r.Log(fmt.Sprintf("%s does not have %s", store.Name(), ps.Element))
		case remote.IsKind(err, remote.Corrupt):
			w := fmt.Sprintf("%v: the artifact was not pulled from it", err)
			pr.Warning = joinWarnings(pr.Warning, w)
			r.Log("warning: " + w)
			wrong := wrongBytes{Remote: store.Name()}
			if _, d, ok := remote.WrongBytes(err); ok {
				wrong.Blob = d
			}
			pr.Wrong = append(pr.Wrong, wrong)
			corrupt = err
		case remote.IsKind(err, remote.Unavailable) || remote.IsKind(err, remote.Auth):
			pr.Down, pr.Reasons = append(pr.Down, store.Name()), append(pr.Reasons, err.Error())
			failure = err
		default:
			return job.Result{}, err // the local cache failed: not the remote's fault
		}
	}
	data, _ := json.Marshal(pr)
	if failure != nil {
		return job.Result{Temporary: remote.IsKind(failure, remote.Unavailable), Data: data}, failure
	}
	if corrupt != nil {
		return job.Result{Data: data}, corrupt
	}
	why := "no remote has it"
	if len(ps.Remotes) == 0 {
		why = "every remote is down for this session"
	}
	return job.Result{OK: true, Skipped: true, Error: why, Data: data}, nil
}

// pushJob uploads an element's artifact to every push remote that lacks it, and to
// every push remote the session found serving wrong bytes for it (pullSpec.Repair),
// which gets it again in full (cache.RepairArtifact), with a warning. A blob of the
// artifact found missing or damaged while it is read for the upload drops the
// artifact (compare-and-delete) and fails the job with an element.DamagedDependency
// naming the element itself: a build session builds it again and pushes that
// (queues' heal), the push command fails.
func pushJob(ctx context.Context, spec job.Spec, r *job.Reporter) (job.Result, error) {
	ps, c, lock, err := openPullSpec(ctx, spec, r)
	if err != nil {
		return job.Result{}, err
	}
	defer lock.Unlock()
	a, err := c.Lookup(ps.Project, ps.Element, ps.Key)
	if err != nil {
		return job.Result{}, fmt.Errorf("pushing %s: %w", ps.Element, err)
	}
	res, err := pushArtifact(ctx, ps, c, a, r)
	var damaged *cache.BlobError
	if !errors.As(err, &damaged) {
		return res, err
	}
	dropped, derr := c.DropArtifact(a)
	if derr != nil {
		return job.Result{}, fmt.Errorf("%w; dropping the artifact: %w", err, derr)
	}
	if !dropped {
		// Another process replaced the damaged artifact meanwhile: push that one.
		if b, lerr := c.Lookup(ps.Project, ps.Element, ps.Key); lerr == nil && b.Record != a.Record {
			return pushArtifact(ctx, ps, c, b, r)
		}
	}
	data, jerr := json.Marshal(element.DamagedDependency{Element: ps.Element, Key: ps.Key, Blob: damaged.Digest.String(), Problem: damaged.Error(),
		Removals: c.Removals()})
	if jerr != nil {
		return job.Result{}, errors.Join(err, jerr)
	}
	return job.Result{Data: data}, fmt.Errorf("%w; dropped the artifact %s from the cache: the remotes got neither this blob nor the artifact's entry; build %s again to push it",
		err, ps.Key[:min(len(ps.Key), 8)], ps.Element)
}

// pushResult is a push job's Result.Data when it succeeds.
type pushResult struct {
	Warning string `json:"warning,omitempty"` // remotes repaired
}

// pushArtifact pushes a to the remotes of ps.
func pushArtifact(ctx context.Context, ps *pullSpec, c *cache.Cache, a *cache.Artifact, r *job.Reporter) (job.Result, error) {
	pushed := false
	var pr pushResult
	for _, rs := range ps.Remotes {
		store, err := remote.Open(rs)
		if err != nil {
			return job.Result{}, err
		}
		r.Status("pushing to " + store.Name())
		pctx := ctx
		if ps.Lease != nil && ps.Lease.Display() == rs.Display() {
			pctx = remote.WithFencingToken(ctx, ps.Fence)
		}
		var t remote.Transfer
		did := false
		if wrong, ok := ps.Repair[rs.Display()]; ok {
			var rep remote.Repair
			t, rep, err = remote.RepairArtifact(pctx, c, store, a, wrong, r.Progress)
			if err == nil {
				did = true
				pr.Warning = joinWarnings(pr.Warning, repairWarning(store.Name(), ps.Element, rep))
			}
		} else {
			t, did, err = remote.PushArtifact(pctx, c, store, a, r.Progress)
		}
		store.Close()
		if err != nil {
			return job.Result{Temporary: remote.IsKind(err, remote.Unavailable)}, err
		}
		if did {
			pushed = true
			r.Log(fmt.Sprintf("pushed %s to %s: %d blobs, %s", ps.Element, store.Name(), t.Blobs, units.Bytes(t.Bytes)))
		} else {
			r.Log(fmt.Sprintf("%s already has %s", store.Name(), ps.Element))
		}
	}
	if !pushed {
		return job.Result{OK: true, Skipped: true, Error: "the remotes have it already"}, nil
	}
	data, err := json.Marshal(pr)
	return job.Result{OK: true, Data: data}, err
}

// repairWarning says what a repair of remote name did for element.
func repairWarning(name, element string, rep remote.Repair) string {
	w := fmt.Sprintf("remote %s served wrong bytes for %s", name, element)
	if len(rep.Replaced) > 0 {
		w += fmt.Sprintf(" (blob %s)", digestList(rep.Replaced))
	}
	w += ": uploaded it again from this session's build, replacing its entry and every blob of it"
	if len(rep.NotInArtifact) > 0 {
		w += fmt.Sprintf("; blob %s is not in this build (the element's build is not reproducible): the entry no longer names it", digestList(rep.NotInArtifact))
	}
	return w
}

func digestList(ds []cache.Digest) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ", ")
}

// joinWarnings joins two warnings, either of which may be "".
func joinWarnings(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}
