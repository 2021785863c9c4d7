package queues

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
)

// A diamond: base is staged by left and right, top stages both. right's build is the
// longer one, so the critical path runs base → right → top, and the two middle builds
// share the build queue's two slots.
func TestRecorderCriticalPathAndSlots(t *testing.T) {
	item := func(name string, stage ...*Item) *Item {
		return &Item{Element: &element.Element{Name: name}, Stage: stage}
	}
	base := item("base")
	left, right := item("left", base), item("right", base)
	top := item("top", left, right, base)
	r := NewRecorder([]*Item{base, left, right, top})
	t0 := time.Unix(1000, 0)
	at := func(s float64) Base { return Base{t0.Add(time.Duration(s * float64(time.Second)))} }
	start := func(s float64, id string, a Action, el string) JobStart {
		return JobStart{Base: at(s), JobID: id, Action: a, Element: el, Attempt: 1}
	}
	end := func(s float64, id string, a Action, el string) JobEnd {
		return JobEnd{Base: at(s), JobID: id, Action: a, Element: el, Result: ResultSuccess}
	}
	summary := &Summary{}
	for _, e := range []Event{
		SessionStart{Base: at(0)},
		start(0, "f1", Fetch, "base"), end(1, "f1", Fetch, "base"),
		start(1, "b1", Build, "base"), end(3, "b1", Build, "base"),
		start(3, "b2", Build, "left"), start(3, "b3", Build, "right"),
		end(4, "b2", Build, "left"),
		Suspended{Base: at(5)}, Resumed{Base: at(5.25)},
		end(7, "b3", Build, "right"),
		start(7.5, "b4", Build, "top"), end(9, "b4", Build, "top"),
		SessionEnd{Base: at(9), Summary: summary},
	} {
		r.Observe(e)
	}
	var got []string
	for _, l := range summary.CriticalPath {
		got = append(got, string(l.Action)+" "+l.Element+" "+l.Duration.String())
	}
	// right's build ran 4s, 0.25s of it suspended, which the path does not count.
	want := []string{"fetch base 1s", "build base 2s", "build right 3.75s", "build top 1.5s"}
	if len(got) != len(want) {
		t.Fatalf("critical path %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("critical path %q, want %q", got, want)
		}
	}
	if w := summary.CriticalPath[3].Wait; w != 500*time.Millisecond {
		t.Errorf("top waited %v after right's build, want 500ms", w)
	}
	slots := map[string]int{}
	for _, sp := range r.Spans() {
		slots[sp.Element+"/"+string(sp.Action)] = sp.Slot
	}
	if slots["left/build"] == slots["right/build"] {
		t.Errorf("left and right built at once on the same slot %d", slots["left/build"])
	}
	if slots["top/build"] != 0 {
		t.Errorf("top built on slot %d once every slot was free, want 0", slots["top/build"])
	}
	var buf bytes.Buffer
	if err := r.WriteTrace(&buf); err != nil {
		t.Fatal(err)
	}
	var trace struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			Ts, Dur       int64
		}
	}
	if err := json.Unmarshal(buf.Bytes(), &trace); err != nil {
		t.Fatalf("trace is not JSON: %v\n%s", err, &buf)
	}
	waits, suspensions := 0, 0
	for _, e := range trace.TraceEvents {
		if e.Ph == "X" && e.Name == "suspended" {
			suspensions++
			if e.Ts != 5_000_000 || e.Dur != 250_000 {
				t.Errorf("suspension at %dµs for %dµs, want 5000000 for 250000", e.Ts, e.Dur)
			}
		}
		if e.Ph == "b" && e.Name == "wait build: top" {
			waits++
			if e.Ts != 7_000_000 {
				t.Errorf("top's wait starts at %dµs, want 7000000 (right's build ended)", e.Ts)
			}
		}
	}
	if suspensions != 1 {
		t.Errorf("%d suspension spans, want 1", suspensions)
	}
	if waits != 1 {
		t.Errorf("%d waits for top's build, want 1", waits)
	}
}

// A build whose artifact was available before its job ended: the build staging it
// started in between, and the critical path runs through both, the first lasting
// until it was available.
func TestRecorderCriticalPathThroughAvailable(t *testing.T) {
	base := &Item{Element: &element.Element{Name: "base"}}
	app := &Item{Element: &element.Element{Name: "app"}, Stage: []*Item{base}}
	r := NewRecorder([]*Item{base, app})
	t0 := time.Unix(1000, 0)
	at := func(s float64) Base { return Base{t0.Add(time.Duration(s * float64(time.Second)))} }
	summary := &Summary{}
	for _, e := range []Event{
		SessionStart{Base: at(0)},
		JobStart{Base: at(0), JobID: "b1", Action: Build, Element: "base", Attempt: 1},
		JobMessage{Base: at(2), JobID: "b1", Action: Build, Element: "base", Kind: "available"},
		JobStart{Base: at(2.25), JobID: "b2", Action: Build, Element: "app", Attempt: 1},
		JobEnd{Base: at(2.5), JobID: "b1", Action: Build, Element: "base", Result: ResultSuccess},
		JobEnd{Base: at(4), JobID: "b2", Action: Build, Element: "app", Result: ResultSuccess},
		SessionEnd{Base: at(4), Summary: summary},
	} {
		r.Observe(e)
	}
	var got []string
	for _, l := range summary.CriticalPath {
		got = append(got, l.Element+" "+l.Duration.String()+" after "+l.Wait.String())
	}
	if want := []string{"base 2s after 0s", "app 1.75s after 250ms"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("critical path %q, want %q", got, want)
	}
}

// The critical path counts the session's clock: a job's time and a wait leave out
// the time the session was suspended, also a suspension still open at the end.
func TestRecorderCriticalPathLeavesOutSuspendedTime(t *testing.T) {
	a := &Item{Element: &element.Element{Name: "a"}}
	b := &Item{Element: &element.Element{Name: "b"}, Stage: []*Item{a}}
	r := NewRecorder([]*Item{a, b})
	t0 := time.Unix(1000, 0)
	at := func(s float64) Base { return Base{t0.Add(time.Duration(s * float64(time.Second)))} }
	summary := &Summary{}
	for _, e := range []Event{
		SessionStart{Base: at(0)},
		Suspended{Base: at(0.5)}, Resumed{Base: at(1.5)}, // before a started: its wait
		JobStart{Base: at(2), JobID: "a", Action: Build, Element: "a", Attempt: 1},
		Suspended{Base: at(3)}, Resumed{Base: at(9)}, // during a's build: 6s of 10s
		JobEnd{Base: at(12), JobID: "a", Action: Build, Element: "a", Result: ResultSuccess},
		JobStart{Base: at(12), JobID: "b", Action: Build, Element: "b", Attempt: 1},
		Suspended{Base: at(13)}, // never resumed: the session ended suspended
		JobEnd{Base: at(14), JobID: "b", Action: Build, Element: "b", Result: ResultTerminated},
		SessionEnd{Base: at(14), Summary: summary},
	} {
		r.Observe(e)
	}
	var got []string
	for _, l := range summary.CriticalPath {
		got = append(got, fmt.Sprintf("%s %s %v (waited %v)", l.Action, l.Element, l.Duration, l.Wait))
	}
	want := []string{"build a 4s (waited 1s)", "build b 1s (waited 0s)"}
	if !slices.Equal(got, want) {
		t.Errorf("critical path %q, want %q", got, want)
	}
	if d := r.running(at(12).Time, at(14).Time); d != time.Second {
		t.Errorf("b ran %v of the session's clock, want 1s (suspended from 13s to the end)", d)
	}
}

// The summary says how long the session was suspended; its elapsed time leaves it out.
func TestSummarySaysHowLongTheSessionWasSuspended(t *testing.T) {
	g := newGraph(t, "a")
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: buildPool(1)})
	a := h.expect(Build, "a")
	h.s.Send(CmdSuspend)
	suspended := waitEvent(t, h.events, func(Suspended) bool { return true })
	h.s.Send(CmdResume)
	resumed := waitEvent(t, h.events, func(Resumed) bool { return true })
	a.Succeed(t)
	sum := h.wait()
	if want := resumed.Time.Sub(suspended.Time); sum.Suspended != want || want <= 0 {
		t.Errorf("summary says suspended %v, want %v", sum.Suspended, want)
	}
}
