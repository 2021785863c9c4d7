package cli

import (
	"os"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/queues"
)

// liveSession is a scheduler session's entry in its cache's sessions/
// (cache.StartSession): its lock proves the session's tmp/ entries, and its jobs',
// live, and what it publishes there (need) no cleanup in another process removes.
type liveSession struct {
	cs      *cache.Session
	project string
}

func startLiveSession(c *cache.Cache, project string) (*liveSession, error) {
	cs, err := c.StartSession()
	if err != nil {
		return nil, openCacheError(c.Root, err)
	}
	return &liveSession{cs: cs, project: project}, nil
}

// jobEnv is the environment of the session's job workers: they name their tmp/
// entries after the session.
func (l *liveSession) jobEnv() []string {
	return append(os.Environ(), cache.SessionEnv+"="+l.cs.ID)
}

// need publishes what the session still needs (queues.Config.Needs).
func (l *liveSession) need(keys []queues.ArtifactKey) error {
	refs := make([]cache.ArtifactRef, len(keys))
	for i, k := range keys {
		refs[i] = cache.ArtifactRef{Project: l.project, Element: k.Element, Key: k.Key}
	}
	return l.cs.Need(refs)
}

func (l *liveSession) end() { l.cs.End() }
