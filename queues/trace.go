package queues

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gantry-build/gantry/job"
)

// Recorder follows a session's events and keeps one span per job: which slot of its
// queue ran it, when it became ready and when it started and ended. It is a consumer of
// the event stream, called on the scheduler goroutine before each event is published
// (Observe is cheap: a map lookup and an append). At SessionEnd it names the session's
// critical path in the summary; WriteTrace writes the spans as a Chrome trace.
type Recorder struct {
	start    time.Time
	end      time.Time
	stage    map[string][]string // element -> elements its build stages
	spans    []*Span
	open     map[string]*Span // by job ID
	tails    map[string]*Span // by job ID: ended when available, not yet durable
	slots    map[Action][]bool
	lastEnd  map[string]time.Time // element -> end of its last successful job
	builtAt  map[string]time.Time // element -> end of its successful build
	suspends []interval
	pausedAt time.Time
}

// Span is one job as the trace shows it.
type Span struct {
	JobID   string
	Action  Action
	Element string
	Key     string
	Slot    int // 0-based index among its queue's jobs running at once
	Attempt int
	Ready   time.Time // when nothing but a free slot kept it from starting
	Start   time.Time // when it began its work (its JobStart: for a gated job, its gate's opening)
	// Prepared: a gated job's (JobStart.Prepared, see Gater): when it began to
	// prepare, waiting for a slot; zero for another job.
	Prepared time.Time
	End      time.Time
	Result   JobResult
	// Available: when its element was available to the jobs after it, before it
	// ended (job.MessageAvailable); zero if not before.
	Available time.Time
	// SlotDone: when it gave its slot back, its work that needs one over
	// (KindSlotDone); zero if it kept it until it was available or ended.
	SlotDone time.Time
}

type interval struct{ start, end time.Time }

// PathLink is one job on a session's critical path.
type PathLink struct {
	Action   Action        `json:"action"`
	Element  string        `json:"element"`
	Duration time.Duration `json:"duration"`
	// Wait runs from the previous link's end (or the session's start) to this job's
	// start: the time it was ready but queued, waiting for a free slot (or token).
	Wait time.Duration `json:"wait"`
}

// NewRecorder follows a session over items (their Stage links tell when a build could
// start).
func NewRecorder(items []*Item) *Recorder {
	r := &Recorder{stage: map[string][]string{}, open: map[string]*Span{}, tails: map[string]*Span{}, slots: map[Action][]bool{},
		lastEnd: map[string]time.Time{}, builtAt: map[string]time.Time{}}
	for _, it := range items {
		for _, d := range it.Stage {
			r.stage[it.Element.Name] = append(r.stage[it.Element.Name], d.Element.Name)
		}
	}
	return r
}

// Observe records e. At SessionEnd it sets the summary's critical path.
func (r *Recorder) Observe(e Event) {
	switch e := e.(type) {
	case SessionStart:
		r.start = e.Time
	case JobStart:
		if r.start.IsZero() {
			r.start = e.Time
		}
		sp := &Span{JobID: e.JobID, Action: e.Action, Element: e.Element, Key: e.Key, Attempt: e.Attempt,
			Start: e.Time, Ready: r.ready(e.Action, e.Element), Slot: -1}
		if e.Gated {
			sp.Prepared = e.Prepared // its slot came with its gate's opening
		}
		r.takeSlot(sp)
		r.open[e.JobID] = sp
		r.spans = append(r.spans, sp)
	case JobMessage:
		sp := r.open[e.JobID]
		switch {
		case sp == nil:
		case e.Kind == KindSlotDone:
			sp.SlotDone = e.Time
			r.freeSlot(sp)
		case e.Kind == string(job.MessageAvailable):
			// The rest of the job (making its output durable) holds no slot.
			sp.Available = e.Time
			if sp.SlotDone.IsZero() {
				r.freeSlot(sp)
			}
			if sp.Action == Build {
				r.builtAt[sp.Element] = e.Time // its dependants may start from now on
			}
		}
	case JobEnd:
		sp := r.open[e.JobID]
		if sp == nil {
			return
		}
		delete(r.open, e.JobID)
		if !sp.Available.IsZero() {
			r.tails[e.JobID] = sp // its end comes with its JobDurable
		}
		if sp.Available.IsZero() && sp.SlotDone.IsZero() {
			r.freeSlot(sp)
		}
		sp.End, sp.Result = e.Time, e.Result
		if e.Result == ResultSuccess {
			r.lastEnd[sp.Element] = e.Time
			if sp.Action == Build {
				r.builtAt[sp.Element] = e.Time
				if !sp.Available.IsZero() {
					r.builtAt[sp.Element] = sp.Available
				}
			}
		} else if !sp.Available.IsZero() && sp.Action == Build {
			delete(r.builtAt, sp.Element) // not built after all
		}
	case JobDurable:
		if sp := r.tails[e.JobID]; sp != nil {
			delete(r.tails, e.JobID)
			sp.End = e.Time
			r.lastEnd[sp.Element] = e.Time // its next stage starts after that
		}
	case Suspended:
		r.pausedAt = e.Time
	case Resumed:
		if !r.pausedAt.IsZero() {
			r.suspends = append(r.suspends, interval{r.pausedAt, e.Time})
			r.pausedAt = time.Time{}
		}
	case SessionEnd:
		r.end = e.Time
		if e.Summary != nil {
			e.Summary.CriticalPath = r.CriticalPath()
		}
	}
}

// takeSlot gives sp the first free slot of its queue.
func (r *Recorder) takeSlot(sp *Span) {
	used := r.slots[sp.Action]
	sp.Slot = slices.Index(used, false)
	if sp.Slot < 0 {
		sp.Slot = len(used)
		used = append(used, false)
	}
	used[sp.Slot] = true
	r.slots[sp.Action] = used
}

// freeSlot gives sp's slot back, if it holds one.
func (r *Recorder) freeSlot(sp *Span) {
	if used := r.slots[sp.Action]; sp.Slot >= 0 && sp.Slot < len(used) {
		used[sp.Slot] = false
	}
}

// ready is when a job of action for element could have started: the end of the
// element's previous stage and, for a build, of the builds of what it stages.
func (r *Recorder) ready(action Action, element string) time.Time {
	t := r.start
	if end, ok := r.lastEnd[element]; ok && end.After(t) {
		t = end
	}
	if action == Build {
		for _, d := range r.stage[element] {
			if end, ok := r.builtAt[d]; ok && end.After(t) {
				t = end
			}
		}
	}
	return t
}

// Spans returns the finished jobs' spans, in start order.
func (r *Recorder) Spans() []*Span {
	var out []*Span
	for _, sp := range r.spans {
		if !sp.End.IsZero() {
			out = append(out, sp)
		}
	}
	return out
}

// CriticalPath is the chain of jobs that set the session's wall time: from the job that
// ended last (or whose element was available last: a job's tail, making its output
// durable, is no part of it), back through whatever it waited for last (the element's previous stage,
// or for a build the build of something it stages), to a job that waited for nothing.
func (r *Recorder) CriticalPath() []PathLink {
	spans := r.Spans()
	var last *Span
	for _, sp := range spans {
		if last == nil || sp.usable().After(last.usable()) {
			last = sp
		}
	}
	var chain []*Span
	for sp := last; sp != nil; sp = r.predecessor(spans, sp) {
		chain = append(chain, sp)
	}
	slices.Reverse(chain)
	links := make([]PathLink, len(chain))
	prevEnd := r.start
	for i, sp := range chain {
		links[i] = PathLink{Action: sp.Action, Element: sp.Element, Duration: r.running(sp.Start, sp.usable()), Wait: r.running(prevEnd, sp.Start)}
		prevEnd = sp.usable()
	}
	return links
}

// running is the time from a to b the session was not suspended (0 if b is before a):
// the critical path counts the clock the session's elapsed time counts.
func (r *Recorder) running(a, b time.Time) time.Duration {
	d := max(b.Sub(a), 0)
	suspends := r.suspends
	if !r.pausedAt.IsZero() {
		suspends = append(slices.Clip(suspends), interval{r.pausedAt, b})
	}
	for _, s := range suspends {
		lo, hi := s.start, s.end
		if lo.Before(a) {
			lo = a
		}
		if hi.After(b) {
			hi = b
		}
		if hi.After(lo) {
			d -= hi.Sub(lo)
		}
	}
	return max(d, 0)
}

// predecessor is the job sp waited for last: among the element's earlier jobs and, for a
// build, the builds of what it stages, the one that ended last before sp started.
func (r *Recorder) predecessor(spans []*Span, sp *Span) *Span {
	var best *Span
	for _, o := range spans {
		if o == sp || o.usable().After(sp.Start) || o.Result != ResultSuccess {
			continue
		}
		if o.Element != sp.Element && !(sp.Action == Build && o.Action == Build && slices.Contains(r.stage[sp.Element], o.Element)) {
			continue
		}
		if best == nil || o.usable().After(best.usable()) {
			best = o
		}
	}
	return best
}

// usable is when the jobs after sp could start: when its element was available, or
// its end.
func (sp *Span) usable() time.Time {
	if !sp.Available.IsZero() {
		return sp.Available
	}
	return sp.End
}

// traceEvent is one event of the Chrome trace-event format (the "JSON object format"
// that Perfetto and chrome://tracing read); times in microseconds.
type traceEvent struct {
	Name  string         `json:"name"`
	Cat   string         `json:"cat,omitempty"`
	Ph    string         `json:"ph"`
	Ts    int64          `json:"ts"`
	Dur   *int64         `json:"dur,omitempty"`
	Pid   int            `json:"pid"`
	Tid   int            `json:"tid"`
	ID    string         `json:"id,omitempty"`
	Scope string         `json:"s,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
}

// Trace process ids: the session's own track, queue waits, then one per action.
const (
	tracePidSession = 1
	tracePidWaits   = 2
)

// WriteTrace writes the session as Chrome trace-event JSON: one process per queue with a
// track per slot and one complete span per job on it, queue waits as async spans, and
// suspensions on the session's track.
func (r *Recorder) WriteTrace(w io.Writer) error {
	us := func(t time.Time) int64 { return t.Sub(r.start).Microseconds() }
	dur := func(a, b time.Time) *int64 { d := max(b.Sub(a).Microseconds(), 0); return &d }
	meta := func(kind string, pid, tid int, name string) traceEvent {
		return traceEvent{Name: kind, Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}}
	}
	events := []traceEvent{meta("process_name", tracePidSession, 0, "session"), meta("process_name", tracePidWaits, 0, "queue waits")}
	pids := map[Action]int{}
	threads := map[[2]int]bool{}
	spans := r.Spans()
	for _, sp := range spans {
		pid, ok := pids[sp.Action]
		if !ok {
			pid = tracePidWaits + 1 + len(pids)
			pids[sp.Action] = pid
			events = append(events, meta("process_name", pid, 0, string(sp.Action)))
		}
		tid := sp.Slot + 1
		if !threads[[2]int{pid, tid}] {
			threads[[2]int{pid, tid}] = true
			events = append(events, meta("thread_name", pid, tid, fmt.Sprintf("%s slot %d", sp.Action, tid)))
		}
		args := map[string]any{"job": sp.JobID, "result": string(sp.Result), "attempt": sp.Attempt}
		if sp.Key != "" {
			args["key"] = sp.Key
		}
		if !sp.Available.IsZero() {
			// The span lasts while the job held its slot; then it made its output durable.
			args["durable_after_ms"] = float64(sp.End.Sub(sp.Available).Microseconds()) / 1000
		}
		if !sp.Prepared.IsZero() {
			// Before it, the job prepared and waited at its gate for the slot.
			args["gated_ms"] = float64(sp.Start.Sub(sp.Prepared).Microseconds()) / 1000
		}
		end := sp.usable()
		if !sp.SlotDone.IsZero() {
			// The span lasts while the job held its slot; then it cached its output.
			end = sp.SlotDone
			args["available_after_ms"] = float64(sp.usable().Sub(sp.SlotDone).Microseconds()) / 1000
		}
		events = append(events, traceEvent{Name: sp.Element, Cat: string(sp.Action), Ph: "X", Ts: us(sp.Start),
			Dur: dur(sp.Start, end), Pid: pid, Tid: tid, Args: args})
		if sp.Start.After(sp.Ready) {
			name := "wait " + string(sp.Action) + ": " + sp.Element
			events = append(events,
				traceEvent{Name: name, Cat: "wait", Ph: "b", Ts: us(sp.Ready), Pid: tracePidWaits, Tid: 1, ID: sp.JobID},
				traceEvent{Name: name, Cat: "wait", Ph: "e", Ts: us(sp.Start), Pid: tracePidWaits, Tid: 1, ID: sp.JobID})
		}
	}
	for _, s := range r.suspends {
		events = append(events, traceEvent{Name: "suspended", Cat: "session", Ph: "X", Ts: us(s.start), Dur: dur(s.start, s.end),
			Pid: tracePidSession, Tid: 1})
	}
	if !r.end.IsZero() {
		events = append(events, traceEvent{Name: "session", Cat: "session", Ph: "X", Ts: 0, Dur: dur(r.start, r.end), Pid: tracePidSession, Tid: 0})
	}
	enc := json.NewEncoder(w)
	return enc.Encode(struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
	}{events, "ms"})
}
