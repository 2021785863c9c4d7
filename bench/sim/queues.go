package sim

import (
	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/resources"
)

// Queues are the Fetch and Build queues for Run: every element's sources are
// cached, and the builds follow Build's own rules — when a build is ready and what
// it waits on (Status, WaitsOn), the tokens it takes (Resources), what its success
// makes cached (Done) and, when gated, its wait at the gate for a builder (GateOn)
// — with no payload, no claim and no cache.
func Queues(gated bool) []queues.Queue {
	return []queues.Queue{simulatedFetch{}, &simulatedBuild{gated: gated}}
}

// simulatedFetch is actions.FetchQueue where every element's sources are cached.
type simulatedFetch struct{}

func (simulatedFetch) Action() queues.Action { return queues.Fetch }

func (simulatedFetch) Status(it *queues.Item) (queues.Status, string) {
	if it.Cached {
		return queues.Skip, "cached"
	}
	return queues.Skip, "sources cached"
}

func (simulatedFetch) Resources(it *queues.Item) resources.Request {
	return (&actions.FetchQueue{}).Resources(it)
}

func (simulatedFetch) Payload(*queues.Item) (job.Input, error) { return job.Input{}, nil }
func (simulatedFetch) Done(*queues.Item, job.Result)           {}
func (simulatedFetch) Retries() int                            { return 0 }

// simulatedBuild is actions.Build without its payload, claims and cache: its rules are
// asked of a Build that has none.
type simulatedBuild struct {
	rules actions.Build // zero: only its rules answer
	gated bool
}

func (*simulatedBuild) Action() queues.Action { return queues.Build }

func (q *simulatedBuild) Status(it *queues.Item) (queues.Status, string) { return q.rules.Status(it) }
func (q *simulatedBuild) WaitsOn(it *queues.Item) *queues.Item           { return q.rules.WaitsOn(it) }
func (q *simulatedBuild) Resources(it *queues.Item) resources.Request    { return q.rules.Resources(it) }
func (*simulatedBuild) Payload(*queues.Item) (job.Input, error)          { return job.Input{}, nil }
func (q *simulatedBuild) Done(it *queues.Item, res job.Result)           { q.rules.Done(it, res) }
func (q *simulatedBuild) Retries() int                                   { return q.rules.Retries() }

// GateOn: a gated build waits at its gate for a builder as actions.Build's do; the order of
// the work is the same either way.
func (q *simulatedBuild) GateOn() resources.Resource {
	if !q.gated {
		return ""
	}
	return q.rules.GateOn()
}
