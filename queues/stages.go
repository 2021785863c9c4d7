package queues

import (
	"encoding/json"

	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// BuildQueue builds elements whose staged dependencies are all cached. Its jobs say
// when their artifact is in the cache, before they end (Available): its dependants
// can be built from then on.
type BuildQueue struct {
	PayloadFunc func(it *Item) (json.RawMessage, error)
	// AvailableFunc, if set, is told what a build job made available (its message's
	// data: the artifact's digests), for the payloads of the builds that stage it.
	AvailableFunc func(it *Item, data json.RawMessage)
	// Gated: a build may start while the builders are busy, stage, and wait at its
	// gate for a free builder (see Gater); the job handler must call
	// job.Reporter.Gate before its commands.
	Gated bool
	// ClaimFunc, if set, claims an item before its build starts (see Claimer): the
	// build command takes the artifact's build-once lock in the cache, so that
	// sessions sharing the cache build each artifact once.
	ClaimFunc func(it *Item) Claim
}

func (BuildQueue) Action() Action { return Build }

func (BuildQueue) Status(it *Item) (Status, string) {
	if it.Cached {
		return Skip, "cached"
	}
	if uncachedStage(it) != nil {
		return Wait, "waiting for dependencies to build"
	}
	return Ready, ""
}

// WaitsOn is the first staged dependency not yet cached: only its job ending can
// make it ready.
func (BuildQueue) WaitsOn(it *Item) *Item { return uncachedStage(it) }

// uncachedStage is the first staged dependency of it not yet cached, or nil.
func uncachedStage(it *Item) *Item {
	for _, d := range it.Stage {
		if !d.Cached {
			return d
		}
	}
	return nil
}

func (BuildQueue) Resources(it *Item) resources.Request {
	req := resources.Request{Shared: []resources.Resource{resources.Process, resources.Cache}}
	if p := it.Element.Pool; p != "" {
		req.Shared = append(req.Shared, resources.PoolResource(p))
	}
	return req
}

// GateOn makes BuildQueue a Gater when Gated: a build stages while the builders are
// busy and runs its commands once one is free.
func (q BuildQueue) GateOn() resources.Resource {
	if !q.Gated {
		return ""
	}
	return resources.Process
}

func (q BuildQueue) Payload(it *Item) (json.RawMessage, error) { return q.PayloadFunc(it) }

// Claim makes BuildQueue a Claimer: without a ClaimFunc every build is claimed.
func (q BuildQueue) Claim(it *Item) Claim {
	if q.ClaimFunc == nil {
		return Claim{Outcome: Claimed}
	}
	return q.ClaimFunc(it)
}

func (BuildQueue) Done(it *Item, res job.Result) { it.Cached, it.Built = true, true }

// Available makes it count as cached for the builds that stage it.
func (q BuildQueue) Available(it *Item, data json.RawMessage) {
	it.Cached, it.Built = true, true
	if q.AvailableFunc != nil {
		q.AvailableFunc(it, data)
	}
}

func (BuildQueue) Retries() int { return 0 }

// FetchQueue downloads the sources of elements that will be built. Whether an
// element's sources are cached is asked once per session: the answer may cost a git
// run, and Status is asked often. Sources fetched meanwhile for another element with
// the same source make its fetch job find them in place. Use it as a pointer: it
// keeps the answers.
type FetchQueue struct {
	SourcesCached  func(it *Item) bool
	PayloadFunc    func(it *Item) (json.RawMessage, error)
	NetworkRetries int

	sourcesCached map[*Item]bool // SourcesCached's answers, by item
}

func (*FetchQueue) Action() Action { return Fetch }

func (q *FetchQueue) Status(it *Item) (Status, string) {
	if it.Cached {
		return Skip, "cached"
	}
	cached, asked := q.sourcesCached[it]
	if !asked { // asked once: it may run git
		if q.sourcesCached == nil {
			q.sourcesCached = map[*Item]bool{}
		}
		cached = q.SourcesCached(it)
		q.sourcesCached[it] = cached
	}
	if cached {
		return Skip, "sources cached"
	}
	return Ready, ""
}

func (*FetchQueue) Resources(*Item) resources.Request {
	return resources.Request{Shared: []resources.Resource{resources.Download}}
}

func (q *FetchQueue) Payload(it *Item) (json.RawMessage, error) { return q.PayloadFunc(it) }

func (*FetchQueue) Done(*Item, job.Result) {}

func (q *FetchQueue) Retries() int { return q.NetworkRetries }

// TrackQueue resolves each source's track (branch, tag, URL) to a ref.
type TrackQueue struct {
	PayloadFunc    func(it *Item) (json.RawMessage, error)
	DoneFunc       func(it *Item, res job.Result)
	NetworkRetries int
}

func (TrackQueue) Action() Action { return Track }

func (TrackQueue) Status(it *Item) (Status, string) {
	for i := range it.Element.Sources {
		if it.Element.Sources[i].Trackable() {
			return Ready, ""
		}
	}
	return Skip, "nothing to track"
}

func (TrackQueue) Resources(*Item) resources.Request {
	return resources.Request{Shared: []resources.Resource{resources.Download}}
}

func (q TrackQueue) Payload(it *Item) (json.RawMessage, error) { return q.PayloadFunc(it) }

func (q TrackQueue) Done(it *Item, res job.Result) { q.DoneFunc(it, res) }

func (q TrackQueue) Retries() int { return q.NetworkRetries }
