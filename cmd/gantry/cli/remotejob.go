package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/ui"
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
// that lacks it, or sends bytes that do not match their digest (a warning), is passed
// over; if none has it the job is skipped. Unavailable remotes make the job fail
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
	var failure error
	for _, rs := range ps.Remotes {
		store, err := cache.OpenRemote(rs)
		if err != nil {
			pr.Down, pr.Reasons = append(pr.Down, rs.Display()), append(pr.Reasons, err.Error())
			failure = err
			continue
		}
		r.Status("pulling from " + store.Name())
		t, err := c.PullArtifact(ctx, store, ps.Project, ps.Element, ps.Key, r.Progress)
		store.Close()
		switch {
		case err == nil:
			r.Log(fmt.Sprintf("pulled %s from %s: %d blobs, %s", ps.Element, store.Name(), t.Blobs, ui.ByteSize(t.Bytes)))
			pr.From = store.Name()
			data, err := json.Marshal(pr)
			return job.Result{OK: true, Data: data}, err
		case ctx.Err() != nil:
			return job.Result{}, err
		case errors.Is(err, cache.ErrNotFound):
			r.Log(fmt.Sprintf("%s does not have %s", store.Name(), ps.Element))
		case cache.IsRemoteKind(err, cache.RemoteCorrupt):
			pr.Warning = fmt.Sprintf("%v: the artifact was not pulled from it", err)
			r.Log("warning: " + pr.Warning)
		case cache.IsRemoteKind(err, cache.RemoteUnavailable) || cache.IsRemoteKind(err, cache.RemoteAuth):
			pr.Down, pr.Reasons = append(pr.Down, store.Name()), append(pr.Reasons, err.Error())
			failure = err
		default:
			return job.Result{}, err // the local cache failed: not the remote's fault
		}
	}
	data, _ := json.Marshal(pr)
	if failure != nil {
		return job.Result{Temporary: cache.IsRemoteKind(failure, cache.RemoteUnavailable), Data: data}, failure
	}
	why := "no remote has it"
	switch {
	case len(ps.Remotes) == 0:
		why = "every remote is down for this session"
	case pr.Warning != "":
		why = "no remote has it intact"
	}
	return job.Result{OK: true, Skipped: true, Error: why, Data: data}, nil
}

// pushJob uploads an element's artifact to every push remote that lacks it.
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
	pushed := false
	for _, rs := range ps.Remotes {
		store, err := cache.OpenRemote(rs)
		if err != nil {
			return job.Result{}, err
		}
		r.Status("pushing to " + store.Name())
		pctx := ctx
		if ps.Lease != nil && ps.Lease.Display() == rs.Display() {
			pctx = cache.WithFencingToken(ctx, ps.Fence)
		}
		t, did, err := c.PushArtifact(pctx, store, a, r.Progress)
		store.Close()
		if err != nil {
			return job.Result{Temporary: cache.IsRemoteKind(err, cache.RemoteUnavailable)}, err
		}
		if did {
			pushed = true
			r.Log(fmt.Sprintf("pushed %s to %s: %d blobs, %s", ps.Element, store.Name(), t.Blobs, ui.ByteSize(t.Bytes)))
		} else {
			r.Log(fmt.Sprintf("%s already has %s", store.Name(), ps.Element))
		}
	}
	if !pushed {
		return job.Result{OK: true, Skipped: true, Error: "the remotes have it already"}, nil
	}
	return job.Result{OK: true}, nil
}
