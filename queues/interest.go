package queues

import "github.com/gantry-build/gantry/resources"

// interest is an item's registered exclusive interest: the resources and the
// queue whose job asked for them.
type interest struct {
	res   []resources.Resource
	queue int
}

// registerInterest records that it waits for res exclusively: no new shared
// holder gets them until it is granted or withdrawn.
func (s *Scheduler) registerInterest(it *Item, res []resources.Resource) {
	s.cfg.Pool.RegisterExclusiveInterest(res, it.Name())
	if s.interests == nil {
		s.interests = map[*Item]interest{}
	}
	s.interests[it] = interest{res: res, queue: it.queue}
}

// withdrawInterest removes it's exclusive interest, if any.
func (s *Scheduler) withdrawInterest(it *Item) {
	if in, ok := s.interests[it]; ok {
		s.cfg.Pool.UnregisterExclusiveInterest(in.res, it.Name())
		delete(s.interests, it)
	}
}

// withdrawStaleInterest withdraws every exclusive interest that can no longer
// be granted: its item left the queue that asked (skipped, failed, promoted),
// is no longer ready (a dependency failed), or the session stopped starting
// its queue's jobs. Left registered, it would keep shared holders out for the
// rest of the session. The cleanup's interest goes when the session
// terminates. Runs at the start of every harvest.
func (s *Scheduler) withdrawStaleInterest() {
	if s.terminating && s.clean.pending {
		s.clean.pending = false
		s.cfg.Pool.UnregisterExclusiveInterest([]resources.Resource{resources.Cache}, cleanupOwner)
	}
	for it, in := range s.interests {
		stale := it.queue != in.queue || it.state.out() || it.Failed || s.terminating
		if !stale {
			qs := s.queues[it.queue]
			st, _ := s.status(qs, it)
			stale = st != Ready || (s.quitting && qs.q.Action() != Push)
		}
		if stale {
			s.withdrawInterest(it)
		}
	}
}
