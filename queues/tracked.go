package queues

import (
	"fmt"

	"github.com/gantry-build/gantry/element"
)

// PlanTracked plans `build --track`: tracking and building in one session, with Track
// as the first queue. Every element the targets depend on is tracked, so every one is
// an item. Cache keys follow from the refs tracking finds, so which elements are cached
// — and so which need building at all — is decided in the loop once every track job is
// done (a target's key depends on every ref below it, so little could start earlier).
// Until then the later queues hold the items waiting; afterwards they see exactly what
// Plan would have planned, and skip the rest as not needed.
//
// The caller's Track queue gives each element its new refs (element.Graph.SetRefs)
// before the item leaves it.
func PlanTracked(g *element.Graph, targets []*element.Element, opts PlanOptions) []*Item {
	elements := g.Select(targets, element.DepsAll)
	tp := &trackedPlan{g: g, targets: targets, opts: opts, byElement: map[*element.Element]*Item{}}
	for _, e := range elements {
		it := &Item{Element: e, plan: itemPlan{later: &deferred{plan: tp}}}
		tp.items = append(tp.items, it)
		tp.byElement[e] = it
	}
	// Until the decision, an item's Stage is everything its build could stage.
	for _, it := range tp.items {
		for _, d := range g.StageDeps(it.Element) {
			it.Stage = append(it.Stage, tp.byElement[d])
		}
	}
	return tp.items
}

// trackedPlan is the decision PlanTracked defers. Called only from the scheduler
// goroutine (through the plan's gate, Scheduler.status).
type trackedPlan struct {
	g         *element.Graph
	targets   []*element.Element
	opts      PlanOptions
	items     []*Item // dependencies first
	byElement map[*element.Element]*Item
	scan      int  // items[:scan] are past the Track queue
	decided   bool // keys are computed and the plan is made
}

// deferred is an item's share of a tracked plan.
type deferred struct {
	plan    *trackedPlan
	needed  bool   // the plan reached it
	blocked string // why it cannot be built though needed (set with the decision)
}

// tracked reports whether the item is past the Track queue (the first one): moved on,
// or out of the pipeline for a reason other than failing there.
func (it *Item) tracked() bool {
	switch it.state {
	case stateUnqueued:
		return false
	case stateDone, stateFailed:
		return !it.Failed
	}
	return it.queue > 0
}

// decide makes the plan once every item is past tracking, and reports whether it is
// made. Items leave the Track queue for good, so a cursor over them makes the wait
// O(items) for the whole session.
func (tp *trackedPlan) decide() bool {
	if tp.decided {
		return true
	}
	for tp.scan < len(tp.items) {
		it := tp.items[tp.scan]
		if !it.tracked() && !(it.state.out() && it.Failed) {
			return false
		}
		tp.scan++
	}
	for _, e := range tp.g.Order { // dependencies first
		if tp.byElement[e] != nil {
			tp.g.ComputeKey(e)
		}
	}
	itemOf := func(e *element.Element) *Item { return tp.byElement[e] }
	noKey := func(it *Item, err error) error {
		it.plan.later.blocked = tp.whyNoKey(it.Element, err)
		return nil
	}
	order, _ := walkPlan(tp.g, tp.targets, tp.opts, itemOf, noKey) // noKey never fails it
	for _, it := range order {
		it.plan.later.needed = true
	}
	setPriorities(order, tp.opts.Estimate)
	tp.decided = true
	return true
}

// whyNoKey names the dependency whose tracking failed, when one did.
func (tp *trackedPlan) whyNoKey(e *element.Element, err error) string {
	for _, d := range tp.g.Select([]*element.Element{e}, element.DepsAll) {
		if it := tp.byElement[d]; it != nil && it.Failed {
			if d == e {
				return "tracking failed"
			}
			return fmt.Sprintf("dependency %s failed", d.Name)
		}
	}
	return err.Error()
}

// deferredStatus is the plan's gate for an item of a tracked plan (Item.planGate):
// when it does not decide (ok false), the queue's own rule applies.
func deferredStatus(it *Item) (st Status, reason string, ok bool) {
	d := it.plan.later
	if d == nil {
		return 0, "", false
	}
	switch {
	case !d.plan.decide():
		return Wait, "waiting for tracking to finish", true
	case !d.needed:
		return Skip, "not needed: what depends on it is cached", true
	case d.blocked != "":
		return Wait, d.blocked, true
	case it.Failed:
		return Skip, "a failed build is cached (use --retry-failed to build again)", true
	}
	return 0, "", false
}
