package cli

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
)

// cacheQuery answers element states from the local cache.
type cacheQuery struct {
	c    *cache.Cache
	memo *cache.OutcomeMemo // artifacts' outcomes by record; nil: read every record
}

func (q cacheQuery) Artifact(project, name, key string) element.ArtifactStatus {
	found, success, err := q.c.OutcomeMemoized(q.memo, project, name, key)
	switch {
	case err != nil || !found: // absent, or a damaged ref (`cache verify` reports it): not cached
		return element.ArtifactMissing
	case success:
		return element.ArtifactSuccess
	}
	return element.ArtifactFailure
}

// knownArtifacts is a cacheQuery that asked about many artifacts at once
// (withArtifacts); it asks the cache again only about others. Read-only once made.
type knownArtifacts struct {
	cacheQuery
	known map[string]knownArtifact // by element name
}

type knownArtifact struct {
	key    string
	status element.ArtifactStatus
}

// withArtifacts asks the cache about the artifacts of elements (those with a key) all
// at once, on every CPU, through the project's outcome memo (q's, or opened now): a null
// build asks about every element of the graph, and each answer is a ref's stat (or a
// read of the ref, and of the record when the memo does not know it). The error is the
// memo's, which cannot be saved: a warning.
func (q cacheQuery) withArtifacts(project string, elements []*element.Element) (knownArtifacts, error) {
	if q.memo == nil {
		q.memo = q.c.OpenOutcomeMemo(project)
	}
	keyed := slices.DeleteFunc(slices.Clone(elements), func(e *element.Element) bool { return e.Key == "" })
	statuses := make([]element.ArtifactStatus, len(keyed)) // ArtifactMissing
	asking := len(keyed)
	if !q.c.HasRefs(project) {
		asking = 0 // a new cache: every artifact is missing
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(2*runtime.GOMAXPROCS(0), asking) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(keyed); i = int(next.Add(1)) - 1 {
				statuses[i] = q.Artifact(project, keyed[i].Name, keyed[i].Key)
			}
		})
	}
	wg.Wait()
	k := knownArtifacts{cacheQuery: q, known: make(map[string]knownArtifact, len(keyed))}
	for i, e := range keyed {
		k.known[e.Name] = knownArtifact{key: e.Key, status: statuses[i]}
	}
	return k, q.memo.Save()
}

func (k knownArtifacts) Artifact(project, name, key string) element.ArtifactStatus {
	if a, ok := k.known[name]; ok && a.key == key {
		return a.status
	}
	return k.cacheQuery.Artifact(project, name, key)
}

func (q cacheQuery) SourcesCached(p *element.Project, e *element.Element) bool {
	return actions.SourcesCached(q.c.SourcesDir(), e)
}
