package queues

import (
	"maps"
	"testing"

	"github.com/gantry-build/gantry/element"
)

// TestStateNames: every state has its own name.
func TestStateNames(t *testing.T) {
	seen := map[string]state{}
	for st := stateUnqueued; st <= stateFailed; st++ {
		name := st.String()
		if name == "unknown" {
			t.Errorf("state %d has no name", st)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("states %d and %d are both %q", other, st, name)
		}
		seen[name] = st
	}
	if got := (stateFailed + 1).String(); got != "unknown" {
		t.Errorf("a state past the last is %q, want unknown", got)
	}
}

// TestItemStates follows items through sessions: where each is when a job ends
// (OnJobEnd runs on the loop goroutine) and when the session is over.
func TestItemStates(t *testing.T) {
	failedA := func(e *element.Element) element.ArtifactStatus {
		if e.Name == "a" {
			return element.ArtifactFailure
		}
		return element.ArtifactMissing
	}
	cases := []struct {
		name     string
		graph    []string
		opts     PlanOptions
		cached   []string
		builders int
		drive    func(t *testing.T, h *session)
		// atEnd is every item's state when the named element's job ended.
		atEnd map[string]map[string]state
		after map[string]state
	}{{
		name: "built", graph: []string{"a", "b: a", "c"}, builders: 1,
		drive: func(t *testing.T, h *session) {
			h.expect(Build, "a").Succeed(t)
			h.next().Succeed(t)
			h.next().Succeed(t)
		},
		// b was parked on a and is woken by its end; c waits for the one builder.
		atEnd: map[string]map[string]state{"a": {"a": statePassed, "b": stateWaiting, "c": stateReady}},
		after: map[string]state{"a": stateDone, "b": stateDone, "c": stateDone},
	}, {
		name: "skipped as cached", graph: []string{"a", "b"}, cached: []string{"b"}, builders: 1,
		drive: func(t *testing.T, h *session) { h.expect(Build, "a").Succeed(t) },
		atEnd: map[string]map[string]state{"a": {"a": statePassed, "b": stateDone}},
		after: map[string]state{"a": stateDone, "b": stateDone},
	}, {
		name: "failed, the session quits", graph: []string{"a", "b: a"}, builders: 1,
		drive: func(t *testing.T, h *session) { h.expect(Build, "a").Fail(t, "broken") },
		// The hook runs before the failure is booked.
		atEnd: map[string]map[string]state{"a": {"a": stateRunning, "b": stateWaiting}},
		after: map[string]state{"a": stateFailed, "b": stateWaiting},
	}, {
		name: "terminated", graph: []string{"a", "b: a"}, builders: 1,
		drive: func(t *testing.T, h *session) {
			h.sync(h.expect(Build, "a"))
			h.s.Send(CmdTerminate)
		},
		atEnd: map[string]map[string]state{"a": {"a": stateStopped, "b": stateWaiting}},
		after: map[string]state{"a": stateStopped, "b": stateWaiting},
	}, {
		name: "a cached failure is never queued", graph: []string{"a", "b: a"}, opts: PlanOptions{Artifact: failedA}, builders: 1,
		drive: func(*testing.T, *session) {},
		after: map[string]state{"a": stateFailed, "b": stateParked},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGraph(t, tc.graph...)
			items := plan(t, g, tc.opts, tc.cached...)
			for _, it := range items {
				if it.state != stateUnqueued {
					t.Fatalf("%s is %v when planned, want unqueued", it.Name(), it.state)
				}
			}
			states := func() map[string]state {
				m := map[string]state{}
				for _, it := range items {
					m[it.Name()] = it.state
				}
				return m
			}
			atEnd := map[string]map[string]state{}
			onJobEnd := func(end JobEnd) error {
				atEnd[end.Element] = states() // the loop goroutine
				return nil
			}
			h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: items, Pool: buildPool(tc.builders), OnJobEnd: onJobEnd})
			tc.drive(t, h)
			h.wait()
			for name, want := range tc.atEnd {
				if got := atEnd[name]; !maps.Equal(got, want) {
					t.Errorf("when %s's job ended: %v, want %v", name, got, want)
				}
			}
			if got := states(); !maps.Equal(got, tc.after) {
				t.Errorf("after the session: %v, want %v", got, tc.after)
			}
		})
	}
}
