package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/internal/units"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/resources"
)

// pushJob uploads an element's artifact to every push remote that lacks it, and to
// every push remote the session found serving wrong bytes for it (pullSpec.Repair),
// which gets it again in full (remote.RepairArtifact), with a warning. A blob of the
// artifact found missing or damaged while it is read for the upload drops the
// artifact (compare-and-delete) and fails the job with an queues.DamagedDependency
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
	data, jerr := json.Marshal(queues.DamagedDependency{Element: ps.Element, Key: ps.Key, Blob: damaged.Digest.String(), Problem: damaged.Error(),
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

// PushQueue is the Push queue of a session: it uploads artifacts to the push
// remotes. Its methods run on the scheduler goroutine.
type PushQueue struct {
	remoteJobs
	// all pushes every cached item (the push command); otherwise only what this
	// session built or pulled.
	all bool
}

// PushQueue is the session's Push queue; all: see PushQueue.all.
func (rs *Remotes) PushQueue(c *cache.Cache, all bool) *PushQueue {
	return &PushQueue{remoteJobs: remoteJobs{rs, c}, all: all}
}

func (*PushQueue) Action() queues.Action { return queues.Push }

func (q *PushQueue) Status(it *queues.Item) (queues.Status, string) {
	switch {
	case !it.Cached:
		return queues.Skip, "not cached"
	case !q.all && !it.Built && !it.Pulled:
		return queues.Skip, "cached before this session"
	}
	if why := q.skip(it); why != "" {
		return queues.Skip, why
	}
	return queues.Ready, ""
}

// skip is why it is not pushed although it is cached: every push remote is down,
// or the push remotes are those it was pulled from; "" to push it.
func (q *PushQueue) skip(it *queues.Item) string {
	up := q.rs.up(true)
	if len(up) == 0 {
		return "every push remote is down for this session"
	}
	from := q.rs.from[it]
	if from == "" {
		return ""
	}
	for _, r := range up {
		if r.Display() != from {
			return ""
		}
	}
	return "pulled from the push remote"
}

// Resources: an upload slot.
func (*PushQueue) Resources(*queues.Item) resources.Request {
	return resources.Request{Shared: []resources.Resource{resources.Upload}}
}

func (q *PushQueue) Payload(it *queues.Item) (job.Input, error) {
	return jsonInput(q.rs.payload(q.c, it, true))
}

func (*PushQueue) Done(*queues.Item, job.Result) {}

// Warning makes PushQueue a Warner: a push remote that served wrong bytes was
// repaired.
func (*PushQueue) Warning(it *queues.Item, res job.Result) string {
	var pr pushResult
	if err := decodeResult(res.Data, &pr); err != nil {
		return fmt.Sprintf("reading what the push of %s reported: %v", it.Name(), err)
	}
	return pr.Warning
}
