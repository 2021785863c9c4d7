package queues

import (
	"fmt"
	"time"

	"github.com/gantry-build/gantry/element"
)

// defaultEstimate is the build time assumed for an element never built before.
const defaultEstimate = 2 * time.Second

// PlanOptions says how to plan a build session.
type PlanOptions struct {
	// Artifact says what the local cache holds for an element's key.
	Artifact func(e *element.Element) element.ArtifactStatus
	// RetryFailed builds elements whose failure is cached instead of reporting it.
	RetryFailed bool
	// Estimate is the expected build time of an element (learned durations).
	Estimate func(e *element.Element) (time.Duration, bool)
	// OnRemote, when set, says which of the elements (none cached locally) a remote
	// holds: those are pulled instead of built (see planWithRemotes). It is called
	// with no element when everything the targets need is cached.
	OnRemote func(es []*element.Element) []bool
}

// NoRefError says which element cannot be planned because a source has no ref.
type NoRefError struct {
	Element string
	Source  int // 1-based
	Desc    string
}

func (e *NoRefError) Error() string {
	return fmt.Sprintf("element %s has no ref for source %d (%s): run `gantry track %s`", e.Element, e.Source, e.Desc, e.Element)
}

// noRef is the error for e's first source without a ref; nil when every source has one.
func noRef(e *element.Element) *NoRefError {
	for i, s := range e.Sources {
		if s.NeedsRef() && s.Ref == "" {
			return &NoRefError{Element: e.Name, Source: i + 1, Desc: s.Describe()}
		}
	}
	return nil
}

// WithoutRef lists the elements among elements and everything they depend on that
// have a source without a ref, dependencies first, each with its first such source.
func WithoutRef(g *element.Graph, elements []*element.Element) []*NoRefError {
	var out []*NoRefError
	for _, e := range g.Select(elements, element.DepsAll) {
		if err := noRef(e); err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Plan returns the items a build of targets works on, dependencies first: the targets,
// what they need at run time, and — only for elements that are not cached — what they
// need to build. Below a cached element nothing needs building, so nothing is planned.
func Plan(g *element.Graph, targets []*element.Element, opts PlanOptions) ([]*Item, error) {
	if opts.OnRemote != nil {
		return planWithRemotes(g, targets, opts)
	}
	order, err := walkPlan(g, targets, opts, func(e *element.Element) *Item { return &Item{Element: e} }, nil)
	if err != nil {
		return nil, err
	}
	setPriorities(order, opts.Estimate)
	return order, nil
}

// walkPlan walks from the targets as Plan describes, taking each element's item from
// itemOf, and returns the items it reached, dependencies first. An element without a
// key ends the walk with MissingRef's error, unless noKey takes it (and returns nil).
func walkPlan(g *element.Graph, targets []*element.Element, opts PlanOptions, itemOf func(*element.Element) *Item, noKey func(*Item, error) error) ([]*Item, error) {
	items := make(map[*element.Element]*Item, len(g.Order)) // a session plans most of its graph
	stages := map[*Item][]*element.Element{}
	var order []*Item
	var visit func(e *element.Element) error
	visit = func(e *element.Element) error {
		if _, ok := items[e]; ok {
			return nil
		}
		it := itemOf(e)
		items[e] = it
		if err := MissingRef(e); err != nil {
			if noKey == nil {
				return err
			}
			order = append(order, it)
			return noKey(it, err)
		}
		status := opts.Artifact(e)
		it.Cached = status == element.ArtifactSuccess
		it.Failed = status == element.ArtifactFailure && !opts.RetryFailed
		if !it.Cached && !it.Failed {
			stages[it] = g.StageDeps(e)
			for _, d := range stages[it] {
				if err := visit(d); err != nil {
					return err
				}
			}
		}
		for _, d := range e.RunDeps {
			if err := visit(d); err != nil {
				return err
			}
		}
		order = append(order, it)
		return nil
	}
	for _, t := range targets {
		if err := visit(t); err != nil {
			return nil, err
		}
	}
	for _, it := range order {
		it.Stage = it.Stage[:0]
		for _, d := range stages[it] {
			it.Stage = append(it.Stage, items[d])
		}
	}
	return order, nil
}

// MissingRef says which source (of e or below it) has no ref when e has no cache key,
// and what to run; nil when e has a key.
func MissingRef(e *element.Element) error {
	if e.Key != "" {
		return nil
	}
	seen := map[*element.Element]bool{}
	var find func(e *element.Element) error
	find = func(e *element.Element) error {
		if seen[e] {
			return nil
		}
		seen[e] = true
		if e.NoRef {
			if err := noRef(e); err != nil {
				return err
			}
		}
		for _, d := range append(append([]*element.Element{}, e.BuildDeps...), e.RunDeps...) {
			if err := find(d); err != nil {
				return err
			}
		}
		return nil
	}
	if err := find(e); err != nil {
		return err
	}
	return fmt.Errorf("element %s has no cache key", e.Name)
}

// setPriorities gives each item the length of the longest chain of builds from it to
// the end of the plan: the build queue starts the longest critical path first; and
// the longest chain before it (its Depth): among equals, the deepest first.
func setPriorities(order []*Item, estimate func(*element.Element) (time.Duration, bool)) {
	// Each item's Priority first holds the longest chain after it: every item that
	// stages it comes later in order, so it is final when the walk back reaches it.
	for _, it := range order {
		it.Priority = 0
	}
	for i := len(order) - 1; i >= 0; i-- {
		it := order[i]
		own, unlearned := time.Duration(0), false
		if !it.Cached && !it.Failed {
			own, unlearned = defaultEstimate, true
			if estimate != nil {
				if d, ok := estimate(it.Element); ok {
					own, unlearned = d, false
				}
			}
		}
		it.Estimate, it.Unlearned = own, unlearned
		it.Priority += own
		for _, d := range it.Stage {
			d.Priority = max(d.Priority, it.Priority)
		}
	}
	// Every item it stages comes before it in order: its Depth is final when reached.
	for _, it := range order {
		it.Depth = 0
		for _, d := range it.Stage {
			it.Depth = max(it.Depth, d.Depth+d.Estimate)
		}
	}
}
