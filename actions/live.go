package actions

import (
	"cmp"
	"fmt"
	"os"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/queues"
)

// LiveSession is a scheduler session's entry in its cache's sessions/
// (cache.StartSession): its lock proves the session's tmp/ entries, and its jobs',
// live, and what it publishes there (need) no cleanup in another process removes.
type LiveSession struct {
	cs      *cache.Session
	project string
}

// StartLiveSession enters a session of project in the sessions/ of c.
func StartLiveSession(c *cache.Cache, project string) (*LiveSession, error) {
	cs, err := c.StartSession()
	if err != nil {
		return nil, OpenCacheError(c.Root, err)
	}
	return &LiveSession{cs: cs, project: project}, nil
}

// JobEnv is the environment of the session's job workers: they name their tmp/
// entries after the session.
func (l *LiveSession) JobEnv() []string {
	return append(os.Environ(), cache.SessionEnv+"="+l.cs.ID)
}

// Need publishes what the session still needs (queues.Config.Needs).
func (l *LiveSession) Need(keys []queues.ArtifactKey) error {
	refs := make([]cache.ArtifactRef, len(keys))
	for i, k := range keys {
		refs[i] = cache.ArtifactRef{Project: cmp.Or(k.Project, l.project), Element: k.Element, Key: k.Key}
	}
	return l.cs.Need(refs)
}

// End leaves the sessions/ of the cache.
func (l *LiveSession) End() { l.cs.End() }

// OpenCacheError is the error of a cache at root that could not be opened.
func OpenCacheError(root string, err error) error {
	return fmt.Errorf("opening the cache at %s: %w (set --cache-dir or GANTRY_CACHE_DIR to use another)", root, err)
}
