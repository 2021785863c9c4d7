package sim

import (
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/queues/queuestest"
)

// TestQueuesFollowTheBuildRules: the simulation's queues are the session's
// build rules: on two builders, a chain of two 100 ms builds (dependency first) and
// two 50 ms ones finish at the lower bound, 200 ms, once durations are known, gated
// or not.
func TestQueuesFollowTheBuildRules(t *testing.T) {
	g := queuestest.Graph(t, "short1", "short2", "chain0", "chain1: chain0")
	dur := map[string]time.Duration{"short1": 50 * time.Millisecond, "short2": 50 * time.Millisecond,
		"chain0": 100 * time.Millisecond, "chain1": 100 * time.Millisecond}
	for _, gated := range []bool{false, true} {
		items, err := queues.Plan(g, g.Order, queues.PlanOptions{
			Artifact: func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing },
			Estimate: func(e *element.Element) (time.Duration, bool) { return dur[e.Name], true },
		})
		if err != nil {
			t.Fatal(err)
		}
		span, err := Run(items, Options{Queues: Queues(gated), Builders: 2,
			Duration: func(it *queues.Item) time.Duration { return dur[it.Name()] }})
		if err != nil {
			t.Fatal(err)
		}
		if span != 200*time.Millisecond {
			t.Errorf("gated %v: makespan %v, want 200ms", gated, span)
		}
	}
}
