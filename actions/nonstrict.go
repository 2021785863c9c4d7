package actions

import (
	"context"
	"fmt"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
)

// ResolveNonStrict keys g for a non-strict session from the local cache c and, when
// rs is not nil, the remotes (element.Graph.ResolveNonStrict): an element whose
// artifact is not cached at its key, locally or on a remote, reuses the latest
// successful artifact with its weak key, local first; one found on a remote is pulled
// by its key as any other. The remotes are asked one element at a time, in dependency
// order: each answer can change the keys of the elements above.
func ResolveNonStrict(g *element.Graph, c *cache.Cache, rs *Remotes) {
	// The outcome memo answers for refs unchanged since it was saved (read only here).
	n := nonStrictCache{q: CacheQuery{Cache: c, Memo: c.OpenOutcomeMemo(g.Project.Name)}, project: g.Project.Name, rs: rs}
	if rs != nil {
		n.wait = rs.retryWaits()
	}
	g.ResolveNonStrict(n)
}

// nonStrictCache answers element.NonStrictCache from the local cache, about each
// element's artifacts under its own project and name (Element.ArtifactName), then
// from the remotes rs (nil: none).
type nonStrictCache struct {
	q       CacheQuery
	project string // the graph's
	rs      *Remotes
	wait    func(attempt int) time.Duration // rs's retry waits
}

func (n nonStrictCache) Succeeded(e *element.Element, key string) bool {
	project, name := e.ArtifactName(n.project)
	if n.q.Artifact(project, name, key) == element.ArtifactSuccess {
		return true
	}
	return n.rs != nil && n.rs.firstRemote(n.wait, func(store remote.Store) error {
		_, err := store.GetEntry(context.Background(), key)
		return err
	})
}

func (n nonStrictCache) ByWeakKey(e *element.Element) (string, bool) {
	if e.WeakKey == "" {
		return "", false
	}
	project, name := e.ArtifactName(n.project)
	if a, err := n.q.Cache.LookupWeak(project, name, e.WeakKey); err == nil {
		return a.Key, true
	}
	var key string
	found := n.rs != nil && n.rs.firstRemote(n.wait, func(store remote.Store) error {
		var err error
		key, err = remote.WeakArtifactKey(context.Background(), store, e.WeakKey)
		return err
	})
	return key, found
}

// reusedBuildError refuses to build e under the key of an artifact a non-strict
// session reused (found by its weak key): that key was computed from other
// dependencies than the ones a build would stage. It happens when the artifact
// cannot be pulled after all, or is found damaged or gone during the session.
func reusedBuildError(e *element.Element) error {
	return fmt.Errorf("%s: its artifact %s, which this non-strict session reuses (found by its weak key), is not in the local cache and could not be pulled; run the build again, or with --strict", e.Name, e.ShortKey())
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
