package queues

import (
	"slices"
	"time"
)

// The session's ETA: how long the builds left should take, from each element's
// learned build time (Item.Estimate) and the critical path through what is left
// (Item.Priority). It is known only while every element left to build has a
// learned build time: one never built before (Item.Unlearned) makes it unknown,
// rather than a guess (a first build of a big element would show "~6s left" for
// minutes). Called only from the scheduler goroutine.
//
// It is kept incrementally, so that a loop turn pays O(running builds), not a walk
// over every item: left holds the items to build that have not left the Build queue
// (an item leaves it when it is promoted past it or fails), work the sum of their
// estimates, and byPriority lists them highest priority first, with next the first
// one that may still be left (items only ever leave).
type etaState struct {
	started    bool
	build      int // index of the Build queue; -1: none
	left       map[*Item]bool
	work       time.Duration
	byPriority []*Item
	next       int
	unlearned  int // items left whose build time was never learned: no ETA
}

// startETA sets the ETA up once the items are queued.
func (s *Scheduler) startETA() {
	e := &s.eta
	e.started, e.build, e.left = true, -1, map[*Item]bool{}
	for i, qs := range s.queues {
		if qs.q.Action() == Build {
			e.build = i
		}
	}
	for _, it := range s.cfg.Items {
		if e.build >= 0 && !it.Cached && !it.Failed && it.state.queued() {
			e.left[it] = true
			e.work += it.Estimate
			e.byPriority = append(e.byPriority, it)
			if it.Unlearned {
				e.unlearned++
			}
		}
	}
	slices.SortStableFunc(e.byPriority, func(a, b *Item) int { return int(b.Priority - a.Priority) })
}

// leaving books that it leaves the Build queue, or the pipeline before it.
func (s *Scheduler) leaving(it *Item) {
	if s.eta.left[it] {
		delete(s.eta.left, it)
		s.eta.work -= it.Estimate
		if it.Unlearned {
			s.eta.unlearned--
		}
	}
}

// remaining is the estimated build time left at now: the longer of the critical
// path through the elements still to build and their total build time shared among
// the builders (a running build counts what its estimate has left); 0 when it is
// unknown (an element left was never built before) or nothing is left.
func (s *Scheduler) remaining(now time.Time) time.Duration {
	e := &s.eta
	if !e.started || e.build < 0 || e.unlearned > 0 {
		return 0
	}
	work, critical := e.work, time.Duration(0)
	running := map[*Item]bool{}
	for _, a := range s.active {
		if a.item != nil && a.qs == s.queues[e.build] {
			elapsed := now.Sub(a.started) - a.gateWait
			switch {
			case a.gated: // waiting at its gate: none of its work is done
				elapsed = 0
			case a.ended: // available, making it durable: all of it is done
				elapsed = a.item.Estimate
			}
			running[a.item] = true
			work -= min(a.item.Estimate, elapsed)
			critical = max(critical, a.item.Priority-elapsed)
		}
	}
	for e.next < len(e.byPriority) && !e.left[e.byPriority[e.next]] {
		e.next++
	}
	for _, it := range e.byPriority[e.next:] {
		if running[it] || !e.left[it] {
			continue // at most the running builds and what left out of order
		}
		critical = max(critical, it.Priority)
		break
	}
	builders := 1
	if s.cfg.Pool != nil {
		builders = max(1, s.cfg.Pool.Limit(tailToken(s.queues[e.build]))) // the builders, or the remote slots
	}
	return max(critical, work/time.Duration(builders))
}
