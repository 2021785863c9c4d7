package cli

import (
	"fmt"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/source"
)

// cacheQuery answers element states from the local cache.
type cacheQuery struct {
	c *cache.Cache
}

func (s *session) openCache() (*cache.Cache, error) { return openCacheAt(s.cacheRoot()) }

func openCacheAt(root string) (*cache.Cache, error) {
	c, err := cache.Open(root)
	if err != nil {
		return nil, fmt.Errorf("opening the cache at %s: %w (set --cache-dir or GANTRY_CACHE_DIR to use another)", root, err)
	}
	return c, nil
}

func (s *session) cacheQuery() (element.CacheQuery, error) {
	c, err := s.openCache()
	if err != nil {
		return nil, err
	}
	return cacheQuery{c}, nil
}

func (q cacheQuery) Artifact(project, name, key string) element.ArtifactStatus {
	a, err := q.c.Lookup(project, name, key)
	switch {
	case err != nil: // absent, or a damaged ref (`cache verify` reports it): not cached
		return element.ArtifactMissing
	case a.Success:
		return element.ArtifactSuccess
	}
	return element.ArtifactFailure
}

func (q cacheQuery) SourcesCached(p *element.Project, e *element.Element) bool {
	if e.Workspace != "" {
		return true // it builds from its workspace
	}
	for i := range e.Sources {
		if !source.Cached(q.c.SourcesDir(), &e.Sources[i]) {
			return false
		}
	}
	return true
}
