package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/queues/queuestest"
)

// TestMakespanPolicy pins the build order policy in simulated time (Run: the real
// loop and build rules, jobs lasting exactly their durations, no overhead): on two builders, graphs
// where the order ready builds start in decides the makespan finish at their lower
// bound, max(critical path, work / builders), once durations are known (a second
// run), and where the plan's shape alone tells (hops), on a first run too.
func TestMakespanPolicy(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type graph struct {
		lines []string
		dur   map[string]time.Duration
	}
	// chainLast: 12 independent tasks of 25 ms declared first, then a chain of 4 of
	// 100 ms, the critical path: it must start at once, which declaration order does not.
	chainLast := func() graph {
		g := graph{dur: map[string]time.Duration{}}
		for i := range 12 {
			name := fmt.Sprintf("short%02d", i)
			g.lines, g.dur[name] = append(g.lines, name), ms(25)
		}
		for i := range 4 {
			name, line := fmt.Sprintf("chain%d", i), fmt.Sprintf("chain%d", i)
			if i > 0 {
				line += fmt.Sprintf(": chain%d", i-1)
			}
			g.lines, g.dur[name] = append(g.lines, line), ms(100)
		}
		return g
	}
	// hops: three chains of 8 hops of 10 ms declared first, then a chain of 2 tasks of
	// 120 ms: counting hops starts the short chains first, durations the long one.
	hops := func() graph {
		g := graph{dur: map[string]time.Duration{}}
		for c := range 3 {
			for h := range 8 {
				name, line := fmt.Sprintf("c%dh%d", c, h), fmt.Sprintf("c%dh%d", c, h)
				if h > 0 {
					line += fmt.Sprintf(": c%dh%d", c, h-1)
				}
				g.lines, g.dur[name] = append(g.lines, line), ms(10)
			}
		}
		g.lines = append(g.lines, "long0", "long1: long0")
		g.dur["long0"], g.dur["long1"] = ms(120), ms(120)
		return g
	}
	tests := []struct {
		name  string
		graph graph
		known bool // the plan knows the durations (a second run)
		want  time.Duration
	}{
		{"chain-last, first run", chainLast(), false, ms(400)},
		{"chain-last, second run", chainLast(), true, ms(400)},
		{"hops, second run", hops(), true, ms(240)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := queuestest.Graph(t, tc.graph.lines...)
			if lb := lowerBound(g, tc.graph.dur, 2); lb != tc.want {
				t.Fatalf("lower bound %v, want %v: the test's graph is wrong", lb, tc.want)
			}
			if got := simulated(t, g, tc.graph.dur, tc.known); got != tc.want {
				t.Errorf("makespan %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMakespanRandom: on random DAGs where first-come-first-served order loses 4–8%,
// a second run (durations known) finishes within 0.5% of the lower bound.
func TestMakespanRandom(t *testing.T) {
	for _, tc := range []struct {
		n    int
		seed uint64
	}{{20, 1}, {30, 2}, {30, 4}} {
		t.Run(fmt.Sprintf("n=%d seed=%d", tc.n, tc.seed), func(t *testing.T) {
			g := queuestest.RandomGraph(t, tc.n, 3, tc.seed)
			rng := rand.New(rand.NewPCG(tc.seed, 2))
			dur := map[string]time.Duration{}
			for _, e := range g.Order {
				dur[e.Name] = time.Duration(rng.IntN(301)) * time.Millisecond
			}
			lb := lowerBound(g, dur, 2)
			if got := simulated(t, g, dur, true); got > lb+lb/200 {
				t.Errorf("makespan %v, more than 0.5%% over the lower bound %v", got, lb)
			}
		})
	}
}

// simulated is the makespan of a build of every element of g on two builders, jobs
// lasting dur; known says whether the plan knows dur.
func simulated(t *testing.T, g *element.Graph, dur map[string]time.Duration, known bool) time.Duration {
	t.Helper()
	var opts queues.PlanOptions
	if known {
		opts.Estimate = func(e *element.Element) (time.Duration, bool) { return dur[e.Name], true }
	}
	sim := Options{Builders: 2, Duration: func(it *queues.Item) time.Duration { return dur[it.Name()] },
		Queues: Queues(false)}
	span, err := Run(plan(t, g, opts), sim)
	if err != nil {
		t.Fatal(err)
	}
	// Builds that wait at their gates do the same work in the same order (Gater).
	sim.Queues = Queues(true)
	gated, err := Run(plan(t, g, opts), sim)
	if err != nil {
		t.Fatal(err)
	}
	if gated != span {
		t.Errorf("makespan %v with gated builds, %v without: gates must not change the order", gated, span)
	}
	return span
}

// lowerBound is max(critical path, total work / builders) of g with durations dur.
func lowerBound(g *element.Graph, dur map[string]time.Duration, builders int) time.Duration {
	finish := map[*element.Element]time.Duration{}
	var critical, work time.Duration
	for _, e := range g.Order { // dependencies first
		var start time.Duration
		for _, d := range e.BuildDeps {
			start = max(start, finish[d])
		}
		finish[e] = start + dur[e.Name]
		critical, work = max(critical, finish[e]), work+dur[e.Name]
	}
	return max(critical, work/time.Duration(builders))
}

// plan plans a build of every element of g, nothing cached.
func plan(t testing.TB, g *element.Graph, opts queues.PlanOptions) []*queues.Item {
	t.Helper()
	opts.Artifact = func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing }
	items, err := queues.Plan(g, g.Order, opts)
	if err != nil {
		t.Fatal(err)
	}
	return items
}
