package queues

import (
	"fmt"
	"slices"
	"time"

	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// Preparer is a Gater whose jobs prepare on another token than their gate's
// (PrepareOn: the builders, for builds with remote execution, whose gate is a
// remote slot). Its jobs always start gated, holding PrepareOn's token instead
// of the gate's; a job gives it back when it reaches its gate (job.MessageGate),
// and its gate opens only then, with the gate's token. Its tail (after
// job.MessageSlotDone or job.MessageAvailable) counts against PrepareOn's limit,
// as its preparation does. A remote build thus stages and caches on this
// machine's builders and holds a remote slot only for its action.
type Preparer interface {
	Gater
	PrepareOn() resources.Resource // "": as a Gater's jobs
}

// gatedRequest is req without the token qs's jobs wait for at their gate (and with
// the one they prepare on, a Preparer's), when a job for it may start gated: qs is
// a Gater whose token req asks for, and fewer of its jobs than the token's limit
// wait at their gates, its tails past the limit counted among them (see tailRoom).
func (s *Scheduler) gatedRequest(qs *queueState, req resources.Request) (resources.Request, bool) {
	token := gateToken(qs)
	if token == "" || !slices.Contains(req.Shared, token) {
		return req, false
	}
	if limit := s.cfg.Pool.Limit(token); limit == 0 || len(qs.gated)+qs.pastTails(limit) >= limit {
		return req, false
	}
	shared := without(req.Shared, token)
	if p := prepareToken(qs); p != "" && !slices.Contains(shared, p) {
		shared = append(shared, p)
	}
	return resources.Request{Shared: shared, Exclusive: req.Exclusive}, true
}

// mustGate says whether a job of qs asking for req starts only gated: qs is a
// Preparer, and req asks for its gate's token, which has a limit.
func (s *Scheduler) mustGate(qs *queueState, req resources.Request) bool {
	token := gateToken(qs)
	return prepareToken(qs) != "" && slices.Contains(req.Shared, token) && s.cfg.Pool.Limit(token) > 0
}

// prepareToken is the token the jobs of qs prepare on before their gate (see
// Preparer), or "".
func prepareToken(qs *queueState) resources.Resource {
	if p, ok := qs.q.(Preparer); ok {
		return p.PrepareOn()
	}
	return ""
}

// atGate books a gated job's word that it has prepared and waits at its gate
// (job.MessageGate): the token it prepared on goes back (see Preparer), and its
// gate may open. It reports whether anything changed.
func (s *Scheduler) atGate(a *activeJob) bool {
	if a.atGate {
		return false
	}
	a.atGate = true
	if p := prepareToken(a.qs); p != "" && a.tokens.holds(p) {
		a.tokens.giveBack(p)
	}
	return true
}

// gateToken is the token the jobs of qs may start without and wait for at their
// gates (see Gater), or "" when they start only with every token.
func gateToken(qs *queueState) resources.Resource {
	if g, ok := qs.q.(Gater); ok {
		return g.GateOn()
	}
	return ""
}

// without is rs less r, in a new slice.
func without(rs []resources.Resource, r resources.Resource) []resources.Resource {
	return slices.DeleteFunc(slices.Clone(rs), func(x resources.Resource) bool { return x == r })
}

// firstGated is the job of qs waiting at its gate that comes first in the queue's
// order, or nil. A Preparer's job waits there only once it said it has got there.
func (qs *queueState) firstGated() *activeJob {
	var first *activeJob
	preparer := prepareToken(qs) != ""
	for _, a := range qs.gated {
		if preparer && !a.atGate {
			continue
		}
		if first == nil || before(a.item, first.item) {
			first = a
		}
	}
	return first
}

// open gives a its queue's gate token and opens its gate: the job is announced
// then (its JobStart, with Gated and Prepared), or when its worker begins it if it
// has not yet. It returns false, doing nothing, when the token is not free.
func (s *Scheduler) open(qs *queueState, a *activeJob) bool {
	if !a.tokens.take(gateToken(qs)) {
		return false
	}
	s.ungate(a)
	s.count(a)
	now := time.Now()
	a.gateWait = s.elapsed(now) - a.startedAt
	if err := a.running.Open(); err != nil {
		// Its worker is gone, and the job ends with that: the token goes back then.
		action, element := a.describe()
		s.cfg.Publish(Notice{Base: Base{now}, Level: "warning", Element: element,
			Text: fmt.Sprintf("%s job %s: opening its gate: %v", action, a.id, err)})
		return true
	}
	if a.begun {
		s.announce(a, now) // else when it begins
	}
	return true
}

// KindSlotDone is the JobMessage kind that says a job's work that needs its slot is
// over (job.MessageSlotDone): it gave its queue's GateOn token back (see slotDone).
const KindSlotDone = string(job.MessageSlotDone)

// slotDone books a job's word that the work that needs its slot is over
// (job.MessageSlotDone: a build's commands ended): its queue's gate token (the
// builder) goes back, so that the next build's commands start while this job moves
// its install root into the cache, and its tail begins (see available) — unless as
// many jobs of its queue are in their tails already as the builders, which bounds
// them. It reports whether anything changed.
func (s *Scheduler) slotDone(a *activeJob, m job.Message) bool {
	token := gateToken(a.qs)
	if a.tail || a.gated || token == "" || !a.tokens.holds(token) {
		return false
	}
	// Its artifact is not available yet: the builds it makes ready come then. Giving
	// the builder to a less urgent build now would make the most urgent of those wait
	// for it (a critical path through this job), so the builder goes back now only to
	// a build at least as urgent as they are; else at available, as it would anyway.
	next := a.qs.nextUp()
	if next == nil || next.Priority < a.item.Priority-a.item.Estimate {
		return false
	}
	opens := a.qs.firstGated()
	if opens != nil && opens.item != next {
		opens = nil
	}
	if !s.beginTail(a, opens) {
		return false
	}
	a.tokens.giveBack(token)
	s.cfg.Publish(JobMessage{Base: Base{m.Time}, JobID: a.id, Action: a.qs.q.Action(), Element: a.item.Name(),
		Key: a.item.Element.Key, Kind: KindSlotDone, Text: "commands done; caching"})
	if opens != nil {
		s.open(a.qs, opens) // now, before anything else can take the builder (see tailRoom)
	}
	return true
}

// nextUp is the item that would get a free token of qs first: the first of its ready
// items and of its jobs waiting at their gates, in the queue's order; nil if none.
func (qs *queueState) nextUp() *Item {
	var next *Item
	for _, g := range qs.groups {
		if h := g.head(); h != nil && (next == nil || before(h, next)) {
			next = h
		}
	}
	if a := qs.firstGated(); a != nil && (next == nil || before(a.item, next)) {
		next = a.item
	}
	return next
}

// ungate takes a off its queue's list of jobs waiting at their gates. It reports
// whether a was there.
func (s *Scheduler) ungate(a *activeJob) bool {
	if !a.gated {
		return false
	}
	a.gated = false
	a.qs.gated = slices.DeleteFunc(a.qs.gated, func(x *activeJob) bool { return x == a })
	return true
}

// withdrawGated terminates the jobs waiting at their gates when the session quits:
// none has begun its work, and a quitting session starts no new work. Each goes
// back to its queue when its job ends (see finish), and the summary counts it as
// not started.
func (s *Scheduler) withdrawGated() {
	for _, qs := range s.queues {
		for _, a := range qs.gated {
			if err := a.running.Terminate(); err != nil {
				action, element := a.describe()
				s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Element: element,
					Text: fmt.Sprintf("%s job %s: withdrawing it at its gate: %v", action, a.id, err)})
			}
		}
	}
}
