package queues

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
)

// Healing a damaged dependency within the session. A build job that finds a
// blob of a staged dependency's artifact missing or corrupt drops that
// artifact from the cache and says so in its result (element.DamagedDependency).
// The loop then takes the dependency back into the pipeline — from the first
// queue after Track, so it is pulled, fetched and built again as needed — and
// puts the element back in its queue to wait for it. Each dependency is healed
// at most once per session: damaged again, the element's failure stands.

// heal handles a failed build whose result names a damaged dependency, and
// reports whether it did; false leaves the failure to finish. Loop goroutine
// only.
func (s *Scheduler) heal(a *activeJob, res job.Result, end JobEnd) bool {
	if a.qs.q.Action() != Build || len(res.Data) == 0 || s.quitting {
		return false
	}
	var damaged element.DamagedDependency
	if json.Unmarshal(res.Data, &damaged) != nil || damaged.Element == "" {
		return false
	}
	it := a.item
	dep := s.itemToHeal(it, damaged.Element)
	if dep == nil {
		return false
	}
	dep.healed, dep.Cached = true, false
	if !slices.Contains(it.Stage, dep) {
		it.Stage = append(it.Stage, dep)
	}
	s.requeue(dep, s.firstQueueAfterTrack())
	s.requeue(it, slices.Index(s.queues, a.qs))
	end.Result, end.WillRetry = ResultFailure, true
	s.cfg.Publish(end)
	s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Element: dep.Name(),
		Text: fmt.Sprintf("the artifact of %s was damaged (%s): building it again before %s", dep.Name(), damaged.Problem, it.Name())})
	return true
}

// itemToHeal finds the session's item for the dependency named name of it,
// making one if the plan has none (the dependency was below a cached element).
// It returns nil if the dependency is not one of it's, was healed already, is
// not cached (something else is already building it) or is still in a queue.
func (s *Scheduler) itemToHeal(it *Item, name string) *Item {
	for _, d := range s.cfg.Items {
		if d.Name() == name {
			if d.healed || !d.Cached || d.Failed || d.queue != -1 {
				return nil
			}
			return d
		}
	}
	e := findDependency(it.Element, name, map[*element.Element]bool{})
	if e == nil {
		return nil
	}
	d := &Item{Element: e, Cached: true, queue: -1, Priority: it.Priority + DefaultEstimate}
	s.cfg.Items = append(s.cfg.Items, d)
	s.done++ // out of the pipeline, as a cached item would be by now; requeue takes it back
	return d
}

// findDependency finds the element named name among e's dependencies, direct
// or not.
func findDependency(e *element.Element, name string, seen map[*element.Element]bool) *element.Element {
	for _, d := range slices.Concat(e.BuildDeps, e.RunDeps) {
		if seen[d] {
			continue
		}
		seen[d] = true
		if d.Name == name {
			return d
		}
		if f := findDependency(d, name, seen); f != nil {
			return f
		}
	}
	return nil
}

// firstQueueAfterTrack is where a dependency to rebuild starts again: Pull,
// Fetch or Build, whichever comes first.
func (s *Scheduler) firstQueueAfterTrack() int {
	for i, qs := range s.queues {
		if qs.q.Action() != Track {
			return i
		}
	}
	return 0
}

// requeue puts it back into queue i; an item that had left the pipeline
// counts as not done again.
func (s *Scheduler) requeue(it *Item, i int) {
	if it.queue == -1 {
		s.done--
	}
	it.queue = i
	it.retryAt = time.Time{}
	s.queues[i].add(it)
}
