package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/internal/units"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/resources"
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
	c, err := cache.Open(ps.CacheDir)
	if err != nil {
		return nil, nil, OpenCacheError(ps.CacheDir, err)
	}
	return &ps, c, nil
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
	data, _ := json.Marshal(pr) // plain fields only: it always encodes
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

// joinWarnings joins two warnings, either of which may be "".
func joinWarnings(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// pullSpec is the payload of pull and push jobs. It carries the remotes' settings
// (token-file paths, never tokens); it travels to the job on a pipe, never on disk.
type pullSpec struct {
	CacheDir string        `json:"cache-dir"`
	Project  string        `json:"project"`
	Element  string        `json:"element"`
	Key      string        `json:"key"`
	Remotes  []remote.Spec `json:"remotes"`
	// Lease: a pull asks this remote for the build-once lease first; a push carries
	// Fence, the token of the lease the session holds, to it.
	Lease *remote.Spec `json:"lease,omitempty"`
	Fence uint64       `json:"fence,omitempty"`
	// Repair: a push sends the artifact again in full to these remotes (by
	// Display), which served wrong bytes for it: the blobs named, or its entry.
	Repair map[string][]cache.Digest `json:"repair,omitempty"`
}

// pullResult is a pull job's Result.Data.
type pullResult struct {
	From    string       `json:"from,omitempty"`    // the remote it was pulled from
	Down    []string     `json:"down,omitempty"`    // remotes that were unavailable or refused the credentials
	Reasons []string     `json:"reasons,omitempty"` // why, for each
	Warning string       `json:"warning,omitempty"` // a remote sent bad bytes
	Wrong   []wrongBytes `json:"wrong,omitempty"`   // which remotes, about which blobs
	// Lease: this session holds the element's build-once lease and builds it.
	Lease *remote.LeaseReply `json:"lease,omitempty"`
	// NoLeases: the lease remote does not grant leases after all.
	NoLeases bool `json:"no-leases,omitempty"`
}

// wrongBytes is a remote that served wrong bytes for an artifact: for blob Blob, or,
// when it is zero, for the artifact's entry or tree.
type wrongBytes struct {
	Remote string       `json:"remote"`
	Blob   cache.Digest `json:"blob"`
}

// noteWrong remembers the push remotes that served wrong bytes for the artifact of it
// (pr.Wrong), for its push to repair. Scheduler goroutine only.
func (rs *Remotes) noteWrong(it *queues.Item, pr pullResult) {
	for _, w := range pr.Wrong {
		if !slices.ContainsFunc(rs.specs, func(r remote.Spec) bool { return r.Push && r.Display() == w.Remote }) {
			continue
		}
		key := it.Element.Key
		if rs.wrong[key] == nil {
			rs.wrong[key] = map[string][]cache.Digest{}
		}
		blobs := rs.wrong[key][w.Remote]
		if !w.Blob.IsZero() && !slices.Contains(blobs, w.Blob) {
			blobs = append(blobs, w.Blob)
		}
		rs.wrong[key][w.Remote] = blobs
	}
}

func (rs *Remotes) payload(c *cache.Cache, it *queues.Item, push bool) (json.RawMessage, error) {
	remotes := rs.up(push)
	if len(remotes) == 0 && push {
		return nil, fmt.Errorf("every push remote is down for this session")
	}
	project, name := it.Element.ArtifactName(rs.project) // shared with a direct build of its own project
	ps := pullSpec{CacheDir: c.Root, Project: project, Element: name, Key: it.Element.Key, Remotes: remotes}
	if push {
		for _, r := range remotes {
			if blobs, ok := rs.wrong[it.Element.Key][r.Display()]; ok {
				if ps.Repair == nil {
					ps.Repair = map[string][]cache.Digest{}
				}
				ps.Repair[r.Display()] = blobs
			}
		}
	}
	if l := rs.leases[it.Element.Key]; push && l != nil {
		ps.Lease, ps.Fence = rs.lease, l.token
	} else if !push && rs.leasing(it) {
		ps.Lease = rs.lease
		rs.asking[it.Element.Key] = true
	}
	// A pull with every remote down runs and is skipped: the element is built.
	return json.Marshal(ps)
}

// recoverPull books a pull that did not pull (PullQueue.Recover): the
// remotes it found down are marked so, with one warning each, and the element is
// built instead.
func (rs *Remotes) recoverPull(it *queues.Item, res job.Result) (string, bool) {
	var pr pullResult
	if decodeResult(res.Data, &pr) != nil {
		// Not a remote's finding: the element fails, its job's own error says why.
		return "", false
	}
	rs.bookLease(it, pr)
	rs.noteWrong(it, pr)
	var warnings []string
	if pr.Warning != "" {
		w := pr.Warning + "; it is built here instead"
		if len(rs.wrong[it.Element.Key]) > 0 {
			w += ", then uploaded again to the push remote that served wrong bytes"
		}
		warnings = append(warnings, w)
	}
	for i, name := range pr.Down {
		if !rs.down[name] {
			rs.down[name] = true
			why := "remote " + name + " is unavailable"
			if i < len(pr.Reasons) {
				why = pr.Reasons[i]
			}
			warnings = append(warnings, downWarning(why))
		}
	}
	if len(pr.Down) == 0 && pr.Warning == "" && !res.OK {
		// Not a remote's fault (the local cache, say): the element fails.
		return "", false
	}
	msg := ""
	for i, w := range warnings {
		if i > 0 {
			msg += "; "
		}
		msg += w
	}
	return msg, true
}

// PullQueue is the Pull queue of a session: it downloads artifacts from the remotes
// instead of fetching and building them. Its methods run on the scheduler goroutine.
type PullQueue struct {
	remoteJobs
	// found limits pulls to the items the plan found on a remote (build): a pull
	// that did not pull is booked (recoverPull) and the element is built instead,
	// and an item no remote had asks a push remote for its build-once lease
	// (leasing). Without it every uncached item is tried (the pull command), and a
	// failed pull fails.
	found bool
}

// PullQueue is the session's Pull queue; found: the plan looked the items up
// (gantry build), see PullQueue.found.
func (rs *Remotes) PullQueue(c *cache.Cache, found bool) *PullQueue {
	return &PullQueue{remoteJobs: remoteJobs{rs, c}, found: found}
}

func (*PullQueue) Action() queues.Action { return queues.Pull }

func (q *PullQueue) Status(it *queues.Item) (queues.Status, string) {
	switch {
	case it.Cached:
		return queues.Skip, "cached"
	case q.found && !it.Remote && !it.Spare() && !q.leasing(it):
		// Spare items needed after all were never looked up: they are tried.
		return queues.Skip, "not on a remote"
	case q.leasing(it) && uncachedStage(it) != nil:
		return queues.Wait, "waiting for dependencies before asking for the build-once lease"
	case q.leasing(it) && !q.rs.leaseSlotFree():
		return queues.Wait, "waiting for a free builder before asking for the build-once lease"
	}
	return queues.Ready, ""
}

// leasing says whether the job for it, which no remote had, asks a push remote for
// its build-once lease (gantry's server): the job pulls if the entry is there, skips
// if this session holds the lease (the element is built), and waits
// (job.Result.WaitMs) while another session builds it. The lease is asked once its
// build dependencies are cached: a session holds the lease only of what it can
// build now, and never of what a failed dependency stops.
func (q *PullQueue) leasing(it *queues.Item) bool { return q.found && !it.Remote && q.rs.leasing(it) }

// Volatile makes PullQueue a queues.Volatile while it asks for leases: each ask takes
// one of the session's lease slots, so the next item's Status changes when one starts.
func (q *PullQueue) Volatile() bool { return q.found && q.rs.lease != nil }

// WaitsOn is, for an item waiting to ask for its lease, the first build dependency
// not yet cached; nil otherwise.
func (q *PullQueue) WaitsOn(it *queues.Item) *queues.Item {
	if !q.leasing(it) {
		return nil
	}
	return uncachedStage(it)
}

// Resources: a download slot and the cache.
func (*PullQueue) Resources(*queues.Item) resources.Request {
	return resources.Request{Shared: []resources.Resource{resources.Download, resources.Cache}}
}

func (q *PullQueue) Payload(it *queues.Item) (job.Input, error) {
	return jsonInput(q.rs.payload(q.c, it, false))
}

// Done books a pull: where from, the lease it was granted, the remotes that served
// wrong bytes.
func (q *PullQueue) Done(it *queues.Item, res job.Result) {
	it.Cached, it.Pulled = true, true
	var pr pullResult
	if json.Unmarshal(res.Data, &pr) == nil {
		q.rs.from[it] = pr.From
		q.rs.bookLease(it, pr)
		q.rs.noteWrong(it, pr)
		if len(pr.Wrong) > 0 {
			q.rs.wrongPulls = append(q.rs.wrongPulls, it.Name())
		}
	}
}

// jsonInput is a job input whose payload is data, JSON, with no shared parts.
func jsonInput(data []byte, err error) (job.Input, error) { return job.Input{Payload: data}, err }

// Warning makes PullQueue a Warner: a remote served wrong bytes, another had it.
func (*PullQueue) Warning(it *queues.Item, res job.Result) string {
	var pr pullResult
	if json.Unmarshal(res.Data, &pr) != nil || pr.Warning == "" {
		return ""
	}
	return pr.Warning + "; pulled from " + pr.From + " instead"
}

// Recover makes PullQueue a Recoverer: a pull that did not pull is a skip (the
// remotes lack it) or, when the plan looked it up, a remote's fault booked by
// recoverPull; the element is then fetched and built, with its build dependencies.
func (q *PullQueue) Recover(it *queues.Item, res job.Result) (string, bool) {
	warning, ok := "", res.OK // a skip (the remotes lack it) always recovers
	if q.found {
		w, rok := q.rs.recoverPull(it, res)
		warning, ok = w, ok || rok
	}
	return warning, ok
}
