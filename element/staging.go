package element

import "slices"

// Staging order: the order in which artifacts are staged into one directory (a
// build's sysroot, a compose, a checkout with dependencies), which decides which of two
// artifacts installing the same path wins (the later). It is depth-first, every
// element after its dependencies, and among the dependencies of one element (its
// siblings) in the order of their names, as BuildStream sorts them: so the order follows
// from the names and the edges of the graph, which its cache keys hold, and never
// from the order a file lists its dependencies in, which they do not.
//
// A dependency is visited in the run scope: after its runtime dependencies (depends
// and runtime-depends), never its build-only ones. Each element is staged once, where
// the walk first finishes it.

// StageDeps returns what a build of e stages into its sysroot, in staging order: its
// build dependencies and, transitively, their runtime dependencies.
func (g *Graph) StageDeps(e *Element) []*Element {
	return g.Staging([]*Element{e}, DepsBuild)
}

// Staging returns the elements deps selects for targets (as Select does) in staging
// order: DepsRun stages each target after its runtime dependencies, DepsBuild what
// the targets build on (not the targets), DepsAll every dependency, build and
// runtime, and the targets, DepsNone the targets alone. Targets are walked in the
// order given.
func (g *Graph) Staging(targets []*Element, deps Deps) []*Element {
	w := stagingWalk{seen: map[*Element]bool{}}
	for _, t := range targets {
		switch deps {
		case DepsNone:
			w.add(t)
		case DepsRun:
			w.run(t)
		case DepsBuild:
			var buf [16]*Element
			for _, d := range byNames(buf[:0], t.BuildDeps) {
				w.run(d)
			}
		default:
			w.all(t)
		}
	}
	return w.out
}

// stagingWalk is one walk of Staging: what it has visited, and the order it found.
type stagingWalk struct {
	seen map[*Element]bool
	out  []*Element
}

func (w *stagingWalk) add(e *Element) {
	if !w.seen[e] {
		w.seen[e] = true
		w.out = append(w.out, e)
	}
}

// run stages e after its runtime dependencies.
func (w *stagingWalk) run(e *Element) {
	if w.seen[e] {
		return
	}
	w.seen[e] = true
	var buf [16]*Element // most elements have fewer dependencies: no allocation per visit
	for _, d := range byNames(buf[:0], e.RunDeps) {
		w.run(d)
	}
	w.out = append(w.out, e)
}

// all stages e after all of its dependencies, build and runtime.
func (w *stagingWalk) all(e *Element) {
	if w.seen[e] {
		return
	}
	w.seen[e] = true
	var buf [16]*Element
	for _, d := range byNames(buf[:0], append(slices.Clip(e.BuildDeps), e.RunDeps...)) {
		w.all(d)
	}
	w.out = append(w.out, e)
}

// byNames is deps in the order of their names: deps itself when it is so already,
// else a sorted copy appended to buf.
func byNames(buf, deps []*Element) []*Element {
	if slices.IsSortedFunc(deps, byName) {
		return deps
	}
	sorted := append(buf, deps...)
	slices.SortFunc(sorted, byName)
	return sorted
}
