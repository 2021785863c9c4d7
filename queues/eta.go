package queues

import (
	"time"

	"github.com/gantry-build/gantry/resources"
)

// The session's ETA: how long the builds left should take, from each element's
// learned build time (Item.Estimate) and the critical path through what is left
// (Item.Priority). Called only from the scheduler goroutine.

// etaState caches the last estimate: it is recomputed (a walk over the items) only
// when a build job starts or ends, and counted down in between.
type etaState struct {
	key   [3]int // the Build queue's processed, failed and running when computed
	at    time.Time
	value time.Duration
	valid bool
}

// remaining is the estimated build time left at now: the longer of the critical
// path through the elements still to build and their total build time shared among
// the builders (a running build counts what its estimate has left).
func (s *Scheduler) remaining(now time.Time) time.Duration {
	build := -1
	for i, qs := range s.queues {
		if qs.q.Action() == Build {
			build = i
		}
	}
	if build < 0 {
		return 0
	}
	bq := s.queues[build]
	key := [3]int{bq.processed, bq.failed, bq.running}
	if s.eta.valid && s.eta.key == key {
		return max(0, s.eta.value-now.Sub(s.eta.at))
	}
	ran := map[*Item]time.Duration{}
	for _, a := range s.active {
		if a.item != nil && a.qs == bq {
			ran[a.item] = now.Sub(a.started)
		}
	}
	builders := 1
	if s.cfg.Pool != nil {
		builders = max(1, s.cfg.Pool.Limit(resources.Process))
	}
	v := estimateRemaining(s.cfg.Items, build, ran, builders)
	s.eta = etaState{key: key, at: now, value: v, valid: true}
	return v
}

// estimateRemaining is the ETA of items with the Build queue at index build: the
// items not yet past it (not cached or failed) are still to build; ran holds how
// long each running build has run.
func estimateRemaining(items []*Item, build int, ran map[*Item]time.Duration, builders int) time.Duration {
	var work, critical time.Duration
	for _, it := range items {
		if it.Cached || it.Failed || it.queue < 0 || it.queue > build {
			continue
		}
		elapsed := ran[it]
		work += max(0, it.Estimate-elapsed)
		critical = max(critical, it.Priority-elapsed)
	}
	return max(critical, work/time.Duration(builders))
}
