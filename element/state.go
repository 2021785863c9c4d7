package element

// State is what `show` says about an element: how far it is from being cached.
type State string

const (
	StateNoRef       State = "no-ref"       // a source has no ref: run `gantry track`
	StateWaiting     State = "waiting"      // a dependency is not built yet (or has no key)
	StateFetchNeeded State = "fetch-needed" // sources are not in the source cache
	StateBuildable   State = "buildable"    // everything needed to build is at hand
	StateCached      State = "cached"       // a successful artifact is in the local cache
	StateFailed      State = "failed"       // a failed build is cached (`build --retry-failed`)
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

// States computes the state of the given elements (and, as needed, of their dependencies).
func (g *Graph) States(elements []*Element, q CacheQuery) map[*Element]State {
	artifacts := map[*Element]ArtifactStatus{}
	status := func(e *Element) ArtifactStatus {
		s, ok := artifacts[e]
		if !ok {
			s = ArtifactMissing
			if e.Key != "" {
				s = q.Artifact(g.Project.Name, e.Name, e.Key)
			}
			artifacts[e] = s
		}
		return s
	}
	// runReady: e and everything it needs at run time are cached (memoised: O(N+E)).
	runReady := map[*Element]bool{}
	var ready func(e *Element) bool
	ready = func(e *Element) bool {
		r, ok := runReady[e]
		if ok {
			return r
		}
		runReady[e] = false // a cycle cannot happen in a loaded graph; be safe anyway
		r = status(e) == ArtifactSuccess
		for _, d := range e.RunDeps {
			r = r && ready(d)
		}
		runReady[e] = r
		return r
	}
	out := make(map[*Element]State, len(elements))
	for _, e := range elements {
		out[e] = g.state(e, status, ready, q)
	}
	return out
}

func (g *Graph) state(e *Element, status func(*Element) ArtifactStatus, ready func(*Element) bool, q CacheQuery) State {
	switch {
	case e.NoRef:
		return StateNoRef
	case e.Key == "":
		return StateWaiting
	}
	switch status(e) {
	case ArtifactSuccess:
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
