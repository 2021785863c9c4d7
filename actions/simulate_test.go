package actions

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
)

// TestSimulationQueuesFollowTheBuildRules: the simulation's queues are the session's
// build rules: on two builders, a chain of two 100 ms builds (dependency first) and
// two 50 ms ones finish at the lower bound, 200 ms, once durations are known, gated
// or not.
func TestSimulationQueuesFollowTheBuildRules(t *testing.T) {
	manual, ok := element.LookupKind("manual")
	if !ok {
		t.Fatal("no manual kind")
	}
	g := &element.Graph{Elements: map[string]*element.Element{}}
	dur := map[string]time.Duration{}
	for _, d := range []struct {
		name, dep string
		ms        int
	}{{"short1", "", 50}, {"short2", "", 50}, {"chain0", "", 100}, {"chain1", "chain0", 100}} {
		e := &element.Element{Name: d.name, File: "elements/" + d.name, Kind: manual, Key: fmt.Sprintf("%x", sha256.Sum256([]byte(d.name)))}
		if d.dep != "" {
			e.Depends, e.BuildDeps = []string{d.dep}, []*element.Element{g.Elements[d.dep]}
		}
		g.Elements[d.name], g.Order = e, append(g.Order, e)
		dur[d.name] = time.Duration(d.ms) * time.Millisecond
	}
	for _, gated := range []bool{false, true} {
		items, err := queues.Plan(g, g.Order, queues.PlanOptions{
			Artifact: func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing },
			Estimate: func(e *element.Element) (time.Duration, bool) { return dur[e.Name], true },
		})
		if err != nil {
			t.Fatal(err)
		}
		span, err := queues.Simulate(items, queues.Simulation{Queues: SimulationQueues(gated), Builders: 2,
			Duration: func(it *queues.Item) time.Duration { return dur[it.Name()] }})
		if err != nil {
			t.Fatal(err)
		}
		if span != 200*time.Millisecond {
			t.Errorf("gated %v: makespan %v, want 200ms", gated, span)
		}
	}
}
