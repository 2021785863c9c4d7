package actions

import (
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
)

// ResolveNonStrict keys g for a non-strict session from the local cache c
// (element.Graph.ResolveNonStrict): an element whose artifact is not cached at its key
// reuses the latest successful artifact with its weak key.
func ResolveNonStrict(g *element.Graph, c *cache.Cache) {
	g.ResolveNonStrict(nonStrictCache{q: CacheQuery{Cache: c}, project: g.Project.Name})
}

// nonStrictCache answers element.NonStrictCache from the local cache, about each
// element's artifacts under its own project and name (Element.ArtifactName).
type nonStrictCache struct {
	q       CacheQuery
	project string // the graph's
}

func (n nonStrictCache) Succeeded(e *element.Element, key string) bool {
	project, name := e.ArtifactName(n.project)
	return n.q.Artifact(project, name, key) == element.ArtifactSuccess
}

func (n nonStrictCache) ByWeakKey(e *element.Element) (string, bool) {
	if e.WeakKey == "" {
		return "", false
	}
	project, name := e.ArtifactName(n.project)
	a, err := n.q.Cache.LookupWeak(project, name, e.WeakKey)
	if err != nil { // none, or gone: built
		return "", false
	}
	return a.Key, true
}

// reuseExplanation says why e, reused in a non-strict session, is not built: which of
// the dependencies its artifact a was built against changed.
func reuseExplanation(g *element.Graph, e *element.Element, a *cache.Artifact) element.Explanation {
	var recorded map[string]string
	if in, ok := decodeInputs(a); ok {
		recorded = in.Deps
	}
	return g.ExplainReuse(e, recorded)
}
