package queues

import (
	"container/heap"
	"slices"
	"strings"

	"github.com/gantry-build/gantry/resources"
)

// Readiness is kept incrementally, as ninja's Plan does. An item waiting in
// a queue is in one of three places, its state (state.go) says which:
//
//   - the wait list (stateWaiting), asked for its Status every turn: items new
//     to the queue, waiting out a retry's backoff, or waiting for a reason the
//     loop cannot follow;
//   - a ready heap (stateReady): Status said Ready and the tokens were not
//     there; one heap per request shape, highest priority first, so a turn
//     starts jobs by popping heads and stops at the first head refused, never
//     walking the rest;
//   - parked (stateParked): Status said Wait and the queue (a Waiter) named the
//     item it waits on; it is asked again only when that item's job ends or it
//     is skipped.
//
// A turn then costs what it starts, skips or wakes, not what waits: the loop stays
// flat as the graph grows. Every place keeps the wait list's order: priority, then
// depth, then the order items entered the queue.

// Waiter is implemented by a queue that can say what a waiting item waits for.
type Waiter interface {
	// WaitsOn is the item whose job ending (or skip) may end its wait, when Status says Wait;
	// nil when the wait may end for any other reason (the loop then asks every turn).
	// The loop asks only about items the plan's gate lets through (itemPlan.open).
	WaitsOn(it *Item) *Item
}

// slot is the loop's bookkeeping of an item's order in its queue. Where it waits
// is its state: stateWaiting, stateReady or stateParked.
type slot struct {
	gen  uint32 // bumped on every move: heap and waiter entries of older moves are stale
	seq  uint64 // when it entered its queue: the order among equal priorities
	turn uint64 // the turn its Status last said Ready
}

// entry is an item as a heap or a waiter list saw it.
type entry struct {
	it  *Item
	gen uint32
}

func (e entry) live(st state) bool { return e.it.state == st && e.it.slot.gen == e.gen }

// before is the order of every place: higher priority first, then deeper first (see
// Item.Depth), then first come.
func before(a, b *Item) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.Depth != b.Depth {
		return a.Depth > b.Depth
	}
	return a.slot.seq < b.slot.seq
}

func byOrder(a, b *Item) int {
	switch {
	case before(a, b):
		return -1
	case before(b, a):
		return 1
	}
	return 0
}

// readyGroup holds the ready items of one queue that ask for the same resources.
type readyGroup struct {
	key     string
	entries []entry
	refused bool // this turn: its head was refused tokens
}

func (g *readyGroup) Len() int           { return len(g.entries) }
func (g *readyGroup) Less(i, j int) bool { return before(g.entries[i].it, g.entries[j].it) }
func (g *readyGroup) Swap(i, j int)      { g.entries[i], g.entries[j] = g.entries[j], g.entries[i] }
func (g *readyGroup) Push(x any)         { g.entries = append(g.entries, x.(entry)) }
func (g *readyGroup) Pop() any {
	e := g.entries[len(g.entries)-1]
	g.entries[len(g.entries)-1] = entry{}
	g.entries = g.entries[:len(g.entries)-1]
	return e
}

// head is the group's first live item, nil when it has none; stale entries go.
func (g *readyGroup) head() *Item {
	for len(g.entries) > 0 {
		if e := g.entries[0]; e.live(stateReady) {
			return e.it
		}
		heap.Pop(g)
	}
	return nil
}

// requestKey names a request's shape: requests with equal keys are granted or
// refused alike within a turn.
func requestKey(r resources.Request) string {
	var b strings.Builder
	for _, res := range r.Shared {
		b.WriteString(string(res))
		b.WriteByte(',')
	}
	b.WriteByte('|')
	for _, res := range r.Exclusive {
		b.WriteString(string(res))
		b.WriteByte(',')
	}
	return b.String()
}

// request is what the current queue's job needs for it. Harvest asks often and the
// answer only changes with the queue, so it is kept with its key.
func (s *Scheduler) request(qs *queueState, it *Item) resources.Request {
	if it.reqOf != qs {
		it.req, it.reqOf = qs.q.Resources(it), qs
		it.reqKey = requestKey(it.req)
	}
	return it.req
}

// move puts it, an item of qs, in state to, keeping qs's counts of its ready and
// parked items. It takes it out of no list: the wait list is the caller's, and
// heap and waiter entries go stale.
func (qs *queueState) move(it *Item, to state) {
	switch it.state {
	case stateReady:
		qs.ready--
	case stateParked:
		qs.parked--
	}
	switch to {
	case stateReady:
		qs.ready++
	case stateParked:
		qs.parked++
	}
	it.state = to
	it.slot.gen++
}

// pushReady puts it in its queue's ready heap for its request shape.
func (s *Scheduler) pushReady(qs *queueState, it *Item) {
	s.request(qs, it)
	i := slices.IndexFunc(qs.groups, func(g *readyGroup) bool { return g.key == it.reqKey })
	if i < 0 {
		i = len(qs.groups)
		qs.groups = append(qs.groups, &readyGroup{key: it.reqKey})
	}
	qs.move(it, stateReady)
	it.slot.turn = s.turn
	heap.Push(qs.groups[i], entry{it, it.slot.gen})
}

// park keeps it aside until dep's job ends.
func (s *Scheduler) park(qs *queueState, it, dep *Item) {
	qs.move(it, stateParked)
	if s.waiters == nil {
		s.waiters = map[*Item][]entry{}
	}
	s.waiters[dep] = append(s.waiters[dep], entry{it, it.slot.gen})
}

// wake returns the items parked on it to their queues' wait lists: its job ended or
// it was skipped.
func (s *Scheduler) wake(it *Item) {
	ws, ok := s.waiters[it]
	if !ok {
		return
	}
	delete(s.waiters, it)
	for _, e := range ws {
		if !e.live(stateParked) {
			continue
		}
		qs := s.queues[e.it.queue]
		qs.move(e.it, stateWaiting)
		qs.requeue(e.it)
	}
}

// place decides where it waits after Status said st: it is skipped, made ready,
// parked, or (false) stays in the wait list.
func (s *Scheduler) place(qs *queueState, it *Item, st Status, reason string) bool {
	switch st {
	case Skip:
		s.skip(qs, it, reason)
		return true
	case Ready:
		s.pushReady(qs, it)
		return true
	}
	if w, ok := qs.q.(Waiter); ok && it.plan.open() {
		if dep := w.WaitsOn(it); dep != nil {
			s.park(qs, it, dep)
			return true
		}
	}
	return false
}

// startReady starts the ready items of qs the tokens allow, highest priority first
// across its request shapes and the jobs waiting at their gates (a Gater's): such a
// job is opened when it comes first and its token is free. An item whose Status
// changed since it was found ready goes where its Status says.
func (s *Scheduler) startReady(qs *queueState, refused *[]resources.Request) {
	gateRefused := false // this turn: the gate token was not there
	for {
		var best *readyGroup
		for _, g := range qs.groups {
			if g.refused {
				continue
			}
			if h := g.head(); h != nil && (best == nil || before(h, best.entries[0].it)) {
				best = g
			}
		}
		if a := qs.firstGated(); a != nil && !gateRefused && (best == nil || !before(best.entries[0].it, a.item)) {
			gateRefused = !s.open(qs, a)
			continue
		}
		if best == nil {
			break
		}
		it := best.entries[0].it
		if it.slot.turn != s.turn || qs.volatile() {
			if st, reason := s.status(qs, it); st != Ready {
				qs.move(it, stateWaiting)
				if !s.place(qs, it, st, reason) {
					qs.requeue(it)
				}
				continue
			}
		}
		if !s.spawn(qs, it, refused) {
			best.refused = true
		} // else it runs, failed to start, or another builder has it (claim.go)
	}
	for _, g := range qs.groups {
		g.refused = false
	}
}

// volatile says whether qs's Status must be asked again right before each start
// (Volatile).
func (qs *queueState) volatile() bool {
	v, ok := qs.q.(Volatile)
	return ok && v.Volatile()
}

// requeue returns it to the wait list, keeping its place in the queue's order.
func (qs *queueState) requeue(it *Item) {
	if n := len(qs.wait); n > 0 && before(it, qs.wait[n-1]) {
		qs.unsorted = true
	}
	qs.wait = append(qs.wait, it)
}

// sortWait restores the wait list's order after requeues.
func (qs *queueState) sortWait() {
	if qs.unsorted {
		slices.SortFunc(qs.wait, byOrder)
		qs.unsorted = false
	}
}

// waiting lists every item waiting in the queue at index i, in the queue's order.
func (s *Scheduler) waiting(i int) []*Item {
	qs := s.queues[i]
	qs.sortWait()
	items := slices.Clone(qs.wait)
	for _, it := range s.cfg.Items {
		if it.queue == i && (it.state == stateReady || it.state == stateParked) {
			items = append(items, it)
		}
	}
	slices.SortStableFunc(items, byOrder)
	return items
}

// leave takes it out of the queue it waits in, leaving it in no list; false when it
// is not waiting there (it runs, or its queue is done with it).
func (qs *queueState) leave(it *Item) bool {
	switch it.state {
	case stateReady, stateParked:
		qs.move(it, stateWaiting)
		return true
	case stateWaiting:
		i := slices.Index(qs.wait, it)
		if i < 0 {
			return false
		}
		qs.wait = slices.Delete(qs.wait, i, i+1)
		return true
	}
	return false
}
