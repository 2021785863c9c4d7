package actions

import (
	"errors"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
)

// CacheQuery answers element states from the local cache (element.CacheQuery): the
// plan's and show's questions.
type CacheQuery struct {
	Cache *cache.Cache
	Memo  *cache.OutcomeMemo // artifacts' outcomes by record; nil: read every record
	// subMemos are the outcome memos of the junctions' sub-projects, by project name
	// (opened by WithArtifacts): their artifacts are kept under their own projects.
	subMemos map[string]*cache.OutcomeMemo
}

func (q CacheQuery) Artifact(project, name, key string) element.ArtifactStatus {
	m := q.Memo
	if sub := q.subMemos[project]; sub != nil {
		m = sub
	}
	found, success, err := q.Cache.OutcomeMemoized(m, project, name, key)
	switch {
	case err != nil || !found: // absent, or a damaged ref (`cache verify` reports it): not cached
		return element.ArtifactMissing
	case success:
		return element.ArtifactSuccess
	}
	return element.ArtifactFailure
}

// KnownArtifacts is a CacheQuery that asked about many artifacts at once
// (WithArtifacts); it asks the cache again only about others. Read-only once made.
type KnownArtifacts struct {
	CacheQuery
	known map[string]knownArtifact // by project/element, the artifact's names
	// empty is the project whose cache had no ref when asked (a new cache), and no
	// element of another project was asked about: known is not made (a map of every
	// element, 3% of a first show of 100,000), every artifact of it is missing.
	empty string
}

type knownArtifact struct {
	key    string
	status element.ArtifactStatus
}

// WithArtifacts asks the cache about the artifacts of elements (those with a key) all
// at once, on every CPU, through the project's outcome memo (q's, or opened now): a null
// build asks about every element of the graph, and each answer is a ref's stat (or a
// read of the ref, and of the record when the memo does not know it). An element of a
// junction's sub-project is asked about under its own project and name
// (Element.ArtifactName), through that project's memo (which a direct build of it
// shares). The error is a memo's, which cannot be saved: a warning.
func (q CacheQuery) WithArtifacts(project string, elements []*element.Element) (KnownArtifacts, error) {
	if q.Memo == nil {
		q.Memo = q.Cache.OpenOutcomeMemo(project)
	}
	keyed := slices.DeleteFunc(slices.Clone(elements), func(e *element.Element) bool { return e.Key == "" })
	q.subMemos = map[string]*cache.OutcomeMemo{}
	for _, e := range keyed {
		if p, _ := e.ArtifactName(project); p != project && q.subMemos[p] == nil {
			q.subMemos[p] = q.Cache.OpenOutcomeMemo(p)
		}
	}
	statuses := make([]element.ArtifactStatus, len(keyed)) // ArtifactMissing
	asking := len(keyed)
	if !q.Cache.HasRefs(project) && len(q.subMemos) == 0 {
		asking = 0 // a new cache: every artifact is missing
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(2*runtime.GOMAXPROCS(0), asking) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(keyed); i = int(next.Add(1)) - 1 {
				statuses[i] = q.Of(project, keyed[i])
			}
		})
	}
	wg.Wait()
	k := KnownArtifacts{CacheQuery: q}
	if asking == 0 {
		k.empty = project
	} else {
		k.known = make(map[string]knownArtifact, len(keyed))
		for i, e := range keyed {
			p, name := e.ArtifactName(project)
			k.known[p+"/"+name] = knownArtifact{key: e.Key, status: statuses[i]}
		}
	}
	errs := []error{q.Memo.Save()}
	for _, p := range slices.Sorted(maps.Keys(q.subMemos)) {
		errs = append(errs, q.subMemos[p].Save())
	}
	return k, errors.Join(errs...)
}

// Of is the state of e's artifact, in a graph of project top: under e's own project and
// name (Element.ArtifactName).
func (q CacheQuery) Of(top string, e *element.Element) element.ArtifactStatus {
	project, name := e.ArtifactName(top)
	return q.Artifact(project, name, e.Key)
}

func (k KnownArtifacts) Artifact(project, name, key string) element.ArtifactStatus {
	if k.empty != "" && project == k.empty {
		return element.ArtifactMissing
	}
	if a, ok := k.known[project+"/"+name]; ok && a.key == key {
		return a.status
	}
	return k.CacheQuery.Artifact(project, name, key)
}

// Of is CacheQuery.Of, answered from what WithArtifacts asked.
func (k KnownArtifacts) Of(top string, e *element.Element) element.ArtifactStatus {
	project, name := e.ArtifactName(top)
	return k.Artifact(project, name, e.Key)
}

func (q CacheQuery) SourcesCached(p *element.Project, e *element.Element) bool {
	return SourcesCached(q.Cache.SourcesDir(), e)
}
