package element

// State is what `show` says about an element: how far it is from being cached.
type State string

const (
	StateNoRef       State = "no-ref"       // a source has no ref: run `gantry track`
	StateWaiting     State = "waiting"      // a dependency is not built yet (or has no key)
	StateFetchNeeded State = "fetch-needed" // sources are not in the source cache
	StateBuildable   State = "buildable"    // everything needed to build is at hand
	StateCached      State = "cached"       // a successful artifact is in the local cache
	StateReused      State = "reused"       // cached by its weak key: a non-strict session reuses it although a dependency changed
	StateFailed      State = "failed"       // a failed build is cached (`build --retry-failed`)
	StateJunction    State = "junction"     // a junction with a ref: it holds a project, never built
)

// ArtifactStatus is what the local cache holds for one key.
type ArtifactStatus int

const (
	ArtifactMissing ArtifactStatus = iota
	ArtifactSuccess
	ArtifactFailure
)

// CacheQuery answers state questions about the local caches.
type CacheQuery interface {
	Artifact(project, element, key string) ArtifactStatus
	SourcesCached(project *Project, e *Element) bool
}

// States computes the state of each of the given elements (and, as needed, of their
// dependencies), in their order. What it learns is kept by graph position, not in maps:
// show asks about every element of graphs of 100,000.
func (g *Graph) States(elements []*Element, q CacheQuery) []State {
	const unknown = -1
	artifacts := make([]ArtifactStatus, len(g.Order))
	for i := range artifacts {
		artifacts[i] = unknown
	}
	status := func(e *Element) ArtifactStatus {
		s := artifacts[e.position]
		if s == unknown {
			s = ArtifactMissing
			if e.Key != "" {
				project, name := e.ArtifactName(g.Project.Name)
				s = q.Artifact(project, name, e.Key)
			}
			artifacts[e.position] = s
		}
		return s
	}
	// runReady: e and everything it needs at run time are cached (memoised: O(N+E)).
	const (
		notAsked = iota
		asking   // a cycle cannot happen in a loaded graph; be safe anyway
		notReady
		ready
	)
	runReady := make([]uint8, len(g.Order))
	var isReady func(e *Element) bool
	isReady = func(e *Element) bool {
		switch runReady[e.position] {
		case asking, notReady:
			return false
		case ready:
			return true
		}
		runReady[e.position] = asking
		r := status(e) == ArtifactSuccess
		for _, d := range e.RunDeps {
			r = r && isReady(d)
		}
		runReady[e.position] = notReady
		if r {
			runReady[e.position] = ready
		}
		return r
	}
	out := make([]State, len(elements))
	for i, e := range elements {
		out[i] = g.state(e, status, isReady, q)
	}
	return out
}

func (g *Graph) state(e *Element, status func(*Element) ArtifactStatus, ready func(*Element) bool, q CacheQuery) State {
	switch {
	case e.NoRef:
		return StateNoRef
	case e.IsJunction():
		return StateJunction
	case e.Key == "":
		return StateWaiting
	}
	switch status(e) {
	case ArtifactSuccess:
		if e.Reused {
			return StateReused
		}
		return StateCached
	case ArtifactFailure:
		return StateFailed
	}
	if !q.SourcesCached(g.Project, e) {
		return StateFetchNeeded
	}
	for _, d := range e.BuildDeps {
		if !ready(d) {
			return StateWaiting
		}
	}
	return StateBuildable
}
