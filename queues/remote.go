package queues

import (
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
)

// Planning with remotes (DESIGN.md §5, §7), and what the loop asks of the queues
// that talk to them (Recoverer, Warner).
//
// Planning asks the remotes, level by level from the targets, about the elements the
// local cache lacks (PlanOptions.OnRemote): an element a remote has is pulled instead of
// fetched and built, so its build dependencies are not looked up, fetched or built. They
// are still items, spare ones: they wait while a pull they might be needed for is
// pending, are skipped as not needed once every such pull is done, and go through the
// pipeline if a pull falls back to building (the remote lost the artifact, sent bad
// bytes or went down).

// Recoverer is a queue that can turn a job's failure or skip into a skip of its own:
// the element goes on to the next queue instead of failing. Recover returns ok to do
// so, and a warning to show (once per cause) or "".
type Recoverer interface {
	Recover(it *Item, res job.Result) (warning string, ok bool)
}

// Warner is a queue whose successful jobs may carry a warning to show (a remote
// that served wrong bytes, a remote repaired): Warning returns it, or "".
type Warner interface {
	Warning(it *Item, res job.Result) string
}

// pullPlan tracks the pulls a plan relies on, and the spare items below them.
// Called only from the scheduler goroutine.
type pullPlan struct {
	targets []*Item
	stages  map[*Item][]*Item // every item's full stage list
	pending int               // planned pulls not yet resolved: done, failed or fallen back
	settled map[*Item]bool    // pulls resolved
	fell    map[*Item]bool    // pulls that fell back to building
	needed  map[*Item]bool    // recomputed when a pull falls back
}

// pullEnded books the end of it's job in the Pull queue for the plan: pulled,
// fallen back to building (fellBack), or failed. Either way the spare items below
// it wait for it no longer.
func (s *Scheduler) pullEnded(qs *queueState, it *Item, fellBack bool) {
	if p := it.plan.pulls; p != nil && qs.q.Action() == Pull {
		p.resolve(it, fellBack)
	}
}

// resolve books the end of a planned pull (once: a failure retried by the user may
// end again).
func (p *pullPlan) resolve(it *Item, fellBack bool) {
	if !it.Remote || p.settled[it] {
		return
	}
	p.settled[it] = true
	p.pending--
	if fellBack {
		p.fell[it] = true
		it.Stage = p.stages[it]
		p.needed = p.reach()
	}
}

// reach walks from the targets as the plan did, with fallen-back pulls expanding to
// their build dependencies like any element to build.
func (p *pullPlan) reach() map[*Item]bool {
	seen := map[*Item]bool{}
	var visit func(it *Item)
	visit = func(it *Item) {
		if seen[it] {
			return
		}
		seen[it] = true
		if it.plan.expand && (!it.Remote || p.fell[it]) {
			for _, d := range p.stages[it] {
				visit(d)
			}
		}
		for _, d := range it.plan.runDeps {
			visit(d)
		}
	}
	for _, t := range p.targets {
		visit(t)
	}
	return seen
}

// spareStatus is the plan's gate for a spare item (Item.planGate): when it does not
// decide (ok false), the queue's own rule applies.
func spareStatus(it *Item) (st Status, reason string, ok bool) {
	p := it.plan.spare
	switch {
	case p == nil || p.needed[it]:
		return 0, "", false
	case p.pending > 0:
		return Wait, "needed only if a pull fails", true
	}
	return Skip, "not needed: what depends on it was pulled", true
}

// planWithRemotes is Plan when opts.OnRemote is set: it looks the uncached elements up
// on the remotes level by level, then plans pulls for those found and keeps their
// build dependencies as spare items.
func planWithRemotes(g *element.Graph, targets []*element.Element, opts PlanOptions) ([]*Item, error) {
	// Both walks ask about the same elements: ask the local cache once.
	status := map[*element.Element]element.ArtifactStatus{}
	artifact := opts.Artifact
	opts.Artifact = func(e *element.Element) element.ArtifactStatus {
		st, ok := status[e]
		if !ok {
			st = artifact(e)
			status[e] = st
		}
		return st
	}
	found, err := lookUpRemotes(g, targets, opts)
	if err != nil {
		return nil, err
	}
	// Everything that could be needed, as if nothing could be pulled.
	all, err := walkPlan(g, targets, opts, func(e *element.Element) *Item { return &Item{Element: e} }, nil)
	if err != nil {
		return nil, err
	}
	byElement := make(map[*element.Element]*Item, len(all))
	for _, it := range all {
		byElement[it.Element] = it
	}
	p := &pullPlan{stages: make(map[*Item][]*Item, len(all)), settled: map[*Item]bool{}, fell: map[*Item]bool{}}
	for _, it := range all {
		p.stages[it] = it.Stage
		it.plan.expand = !it.Cached && !it.Failed
		for _, d := range it.Element.RunDeps {
			it.plan.runDeps = append(it.plan.runDeps, byElement[d])
		}
		if found[it.Element] {
			it.Remote, it.plan.pulls = true, p
			it.Stage = nil
			p.pending++
		}
	}
	for _, t := range targets {
		p.targets = append(p.targets, byElement[t])
	}
	p.needed = p.reach()
	for _, it := range all {
		if !p.needed[it] {
			it.plan.spare = p
		}
	}
	setPriorities(all, opts.Estimate)
	return all, nil
}

// lookUpRemotes asks OnRemote about the uncached elements a build of targets reaches,
// one level at a time: below an element found on a remote, nothing is asked.
func lookUpRemotes(g *element.Graph, targets []*element.Element, opts PlanOptions) (map[*element.Element]bool, error) {
	found := map[*element.Element]bool{}
	seen := map[*element.Element]bool{}
	level := targets
	for len(level) > 0 {
		var ask, next []*element.Element
		status := make(map[*element.Element]element.ArtifactStatus, len(level))
		for _, e := range level {
			if seen[e] {
				continue
			}
			seen[e] = true
			if err := MissingRef(e); err != nil {
				return nil, err
			}
			status[e] = opts.Artifact(e)
			if status[e] == element.ArtifactMissing || (status[e] == element.ArtifactFailure && opts.RetryFailed) {
				ask = append(ask, e)
			}
		}
		hits := opts.OnRemote(ask)
		for i, e := range ask {
			found[e] = hits[i]
		}
		for _, e := range level {
			st, ok := status[e]
			if !ok {
				continue
			}
			delete(status, e)
			if st == element.ArtifactMissing && !found[e] || st == element.ArtifactFailure && opts.RetryFailed && !found[e] {
				next = append(next, g.StageDeps(e)...)
			}
			next = append(next, e.RunDeps...)
		}
		level = next
	}
	return found, nil
}
