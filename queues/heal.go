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
// staged dependency's artifact gone from the cache, or a blob of it missing or
// corrupt (then it drops the artifact), says so in its result
// (DamagedDependency, below). The loop then takes the dependency back into the
// pipeline — from the first queue after Track, so it is pulled, fetched and
// built again as needed — publishes the changed plan (Config.Needs) and puts
// the element back in its queue to wait for it.
//
// A cache race is never the element's failure, so there is no count of heals;
// what bounds them is the cache's count of cleanups that removed something
// (DamagedDependency.Removals). A dependency is healed again only when the
// count has grown since its last heal (a cleanup in another process may have
// taken it: each heal needs another such cleanup), or when the job that found
// it damaged began before that heal (it staged the artifact the heal
// replaced). Damaged again with no cleanup between, the fault would repeat:
// the element's failure stands.

// DamagedDependency is the Data of a failed job's result that the loop heals:
// a build's staging found a dependency's artifact gone from the cache, or a
// blob of it missing or corrupt, or a push's upload found such a blob in the
// element's own artifact. The job has removed a corrupt blob and dropped the
// artifact from the cache, so that it is built (or pulled) again before the
// element is built or pushed. It is the loop's to define, beside Claim: the
// jobs (actions) report it, the loop reads it.
type DamagedDependency struct {
	Element string `json:"element"`
	Key     string `json:"key"`
	Blob    string `json:"blob,omitempty"` // the blob's digest, "hash/size"
	Problem string `json:"problem"`
	// Removals is the cache's count of cleanups that removed something
	// (cache.Removals) when the damage was found: the scheduler heals the
	// dependency again only when it has grown since the last heal, that is
	// when a cleanup in another process may have taken it.
	Removals uint64 `json:"removals"`
}

// heal handles a failed build whose result names a damaged dependency, and
// reports whether it did; false leaves the failure to finish. Loop goroutine
// only.
func (s *Scheduler) heal(a *activeJob, res job.Result, end JobEnd) bool {
	if a.qs.q.Action() != Build || len(res.Data) == 0 || s.quitting {
		return false
	}
	var damaged DamagedDependency
	if json.Unmarshal(res.Data, &damaged) != nil || damaged.Element == "" {
		return false
	}
	it := a.item
	dep, rebuild := s.itemToHeal(it, damaged, a.started)
	if dep == nil {
		return false
	}
	if rebuild {
		if dep.plan.later != nil {
			// A tracked plan: the dependency is needed now. What it stages that
			// the plan did not reach is below a cached element, so taken as
			// cached (its build checks).
			dep.plan.later.needed = true
			dep.Stage = slices.DeleteFunc(slices.Clone(dep.Stage), unneeded)
		}
		s.takeBack(dep, damaged)
		s.publishNeeds(s.keep())
		s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Element: dep.Name(),
			Text: fmt.Sprintf("the artifact of %s was damaged (%s): building it again before %s", dep.Name(), damaged.Problem, it.Name())})
	}
	if !slices.Contains(it.Stage, dep) {
		it.Stage = append(it.Stage, dep)
	}
	s.requeue(it, slices.Index(s.queues, a.qs))
	end.Result, end.WillRetry = ResultFailure, true
	s.jobEnded(a, end)
	return true
}

// takeBack sends it, whose artifact damaged says is damaged or gone, back into
// the pipeline from the first queue after Track, to be built again, and books
// the heal (see the top of this file).
func (s *Scheduler) takeBack(it *Item, damaged DamagedDependency) {
	it.Cached = false
	it.healedAt, it.healRemovals = time.Now(), damaged.Removals
	s.requeue(it, s.firstQueueAfterTrack())
}

// healed reports whether it went back into the pipeline to heal (takeBack).
func (it *Item) healed() bool { return !it.healedAt.IsZero() }

// itemToHeal finds the session's item for it's dependency damaged names,
// making one if the plan has none (the dependency was below a cached element),
// and says whether it must be built again. A dependency already being built
// again (another dependant found it damaged first) is returned to wait for, and
// so is one healed since the job that found it damaged began (started). It
// returns nil when the failure stands: the dependency failed, was damaged again
// after being healed with no cleanup between (see the top of this file), is not
// a dependency of it, or has a job running.
func (s *Scheduler) itemToHeal(it *Item, damaged DamagedDependency, started time.Time) (dep *Item, rebuild bool) {
	for _, d := range s.cfg.Items {
		if d.Name() != damaged.Element {
			continue
		}
		switch {
		case d.healed() && !d.Cached && !d.Failed && !d.stopped():
			return d, false
		case d.healed() && d.Cached && started.Before(d.healedAt):
			return d, false // it staged what the heal replaced: try again as it is
		case d.healed() && damaged.Removals <= d.healRemovals:
			return nil, false
		case !(d.Cached || unneeded(d)) || !s.leaveQueue(d):
			return nil, false
		}
		return d, true
	}
	e := findDependency(it.Element, damaged.Element, map[*element.Element]bool{})
	if e == nil {
		return nil, false
	}
	d := &Item{Element: e, Cached: true, state: stateDone, Priority: it.Priority + defaultEstimate}
	s.cfg.Items = append(s.cfg.Items, d)
	s.done++ // out of the pipeline, as a cached item would be by now; requeue takes it back
	return d, true
}

// unneeded reports whether a tracked plan left it out: it is below a cached
// element, so taken as cached, though the plan never asked.
func unneeded(it *Item) bool { return it.plan.later != nil && !it.plan.later.needed }

// leaveQueue takes a cached item out of the queue it still waits in (say
// Push), and reports whether it could: not while a job runs for it.
func (s *Scheduler) leaveQueue(it *Item) bool {
	if it.state.out() {
		return true
	}
	return s.queues[it.queue].leave(it)
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

// requeue puts it, in no list of a queue, back into queue i; an item that had
// left the pipeline counts as not done again.
func (s *Scheduler) requeue(it *Item, i int) {
	if it.state.out() {
		s.done--
	}
	it.queue = i
	it.retryAt = time.Time{}
	s.add(s.queues[i], it)
}
