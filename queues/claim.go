package queues

import (
	"time"
)

// Build-once claims: another builder has it — wait, then reuse. Two sessions may
// want the same artifact at once. Against gantry's server the Pull queue asks
// for the artifact's build-once lease (actions.PullQueue); on one cache, a
// Claimer queue claims the item, with its tokens in hand, just before its job
// would start (the build command: the artifact's build lock in the cache). The
// claim either
//
//   - is this session's (Claimed): the job starts, and the claim is released
//     when the job has ended (finish), its artifact or cached failure committed
//     or nothing committed at all;
//   - finds the work done meanwhile by another builder (Built, BuiltFailed): the
//     item takes the artifact, or its cached failure, as its own result;
//   - is held by another builder (Busy): the item gives its tokens back and is
//     parked, and a goroutine waits on the claim itself (Claim.Wait, no polling);
//     its answer reaches the loop as a message, and the item goes on as that
//     answer says. A holder that dies frees the claim at once (the kernel drops
//     its lock): the waiter gets it and does the work.

// Claimer is a queue whose items are claimed before their jobs start (see above).
type Claimer interface {
	// Claim claims it without waiting. Called on the scheduler goroutine: it must
	// be quick (a lock try and a lookup).
	Claim(it *Item) Claim
}

// ClaimOutcome is what claiming an item found.
type ClaimOutcome int

const (
	Claimed     ClaimOutcome = iota // this session does the work
	Busy                            // another builder does it: wait
	Built                           // another builder made the artifact meanwhile
	BuiltFailed                     // another builder's build failed: its failure is cached
)

func (o ClaimOutcome) String() string {
	return [...]string{"claimed", "busy", "built", "built-failed"}[o]
}

// Claim is the answer of Claimer.Claim or Claim.Wait.
type Claim struct {
	Outcome ClaimOutcome
	// Release gives a Claimed claim up; nil when nothing is held (the claim could
	// not be taken and the work is done without: Text says why).
	Release func()
	// Wait, for Busy, blocks until the other builder is done, or stop is closed,
	// and claims again: never Busy unless stopped. It runs on a goroutine of its
	// own; should its claim arrive once the session has ended, it is released.
	Wait func(stop <-chan struct{}) Claim
	// Text: for Busy, what the item waits for; for BuiltFailed, the failure; for
	// Claimed, a warning to show, if any.
	Text string
}

// release gives cl up if it is a claim taken.
func (cl Claim) release() {
	if cl.Outcome == Claimed && cl.Release != nil {
		cl.Release()
	}
}

// claimDone is Claim.Wait's answer for a parked item.
type claimDone struct {
	e     entry
	qs    *queueState
	claim Claim
}

// claim claims it, with its job's tokens reserved, before its job starts. It
// reports whether the job is to start; if not, the caller gives the tokens back,
// and it has gone where the claim said: skipped, failed, or parked until the
// other builder is done.
func (s *Scheduler) claim(qs *queueState, it *Item) bool {
	c, ok := qs.q.(Claimer)
	if !ok || s.claims[it] != nil {
		return true // not claimed, or claimed already (after a wait)
	}
	cl := c.Claim(it)
	if cl.Outcome == Claimed {
		s.keepClaim(it, cl)
		return true
	}
	qs.move(it, stateWaiting)
	s.claimed(qs, it, cl, false)
	return false
}

// claimed moves it, in no list of its queue, on as cl says; waited: cl ends a wait
// for another builder (ElementWaiting was published).
func (s *Scheduler) claimed(qs *queueState, it *Item, cl Claim, waited bool) {
	switch cl.Outcome {
	case Claimed:
		if s.quitting {
			cl.release() // it will not start: another session may build it meanwhile
		} else {
			s.keepClaim(it, cl)
		}
		qs.requeue(it)
	case Built:
		it.Cached = true
		s.skipWaited(qs, it, "built by another gantry process on this cache: reused", waited)
	case BuiltFailed:
		s.fail(qs, it, cl.Text, "")
	case Busy:
		if cl.Wait == nil || s.quitting {
			qs.requeue(it)
			return
		}
		qs.move(it, stateParked)
		s.claimWaits++
		s.claimWG.Add(1)
		e := entry{it, it.slot.gen}
		go func() {
			defer s.claimWG.Done()
			done := claimDone{e, qs, cl.Wait(s.ended)}
			select {
			case s.inbox <- done:
			case <-s.ended:
				done.claim.release()
			}
		}()
		s.cfg.Publish(ElementWaiting{Base: Base{time.Now()}, Action: qs.q.Action(), Element: it.Name(), Key: it.Element.Key, Reason: cl.Text})
	}
}

// endClaimWait books the end of a parked item's wait for another builder.
func (s *Scheduler) endClaimWait(m claimDone) {
	s.claimWaits--
	if !m.e.live(stateParked) {
		m.claim.release() // moved meanwhile: it cannot be, but a claim must never leak
		return
	}
	m.qs.move(m.e.it, stateWaiting)
	s.claimed(m.qs, m.e.it, m.claim, true)
}

// keepClaim keeps a claim it took until its job ends (unclaim).
func (s *Scheduler) keepClaim(it *Item, cl Claim) {
	s.warn(it, cl.Text)
	if cl.Release == nil {
		return // nothing held
	}
	if s.claims == nil {
		s.claims = map[*Item]func(){}
	}
	s.claims[it] = cl.Release
}

// unclaim releases it's claim, if it holds one: its job has ended, and what it
// committed is in the cache (finish calls it after the job's end was booked and
// its hook ran), or it could not start.
func (s *Scheduler) unclaim(it *Item) {
	if release := s.claims[it]; release != nil {
		delete(s.claims, it)
		release()
	}
}

// endClaims, once the session has ended (s.ended closed), waits for the
// goroutines waiting on claims (they stop at once) and releases every claim
// still held: those of items that never started, and those the waits took as
// the session ended.
func (s *Scheduler) endClaims() {
	s.claimWG.Wait()
	for {
		select {
		case m := <-s.inbox:
			if d, ok := m.(claimDone); ok {
				d.claim.release()
			}
		default:
			for it := range s.claims {
				s.unclaim(it)
			}
			return
		}
	}
}
