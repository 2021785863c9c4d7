package actions

import (
	"context"
	"io/fs"
	"path/filepath"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/job"
)

// lockCache takes the cache lock shared for staging or committing, saying in
// the job's status line when it has to wait for another process's cleanup.
func lockCache(ctx context.Context, c *cache.Cache, r *job.Reporter) (*cache.Lock, error) {
	return c.Lock(ctx, cache.Shared, r.Notice)
}

// underLock runs f holding the cache lock shared.
func underLock(ctx context.Context, c *cache.Cache, r *job.Reporter, f func() error) error {
	lock, err := lockCache(ctx, c, r)
	if err != nil {
		return &infraError{err}
	}
	defer lock.Unlock()
	return f()
}

// touchStaged records the use of the staged dependencies this session had not staged
// before (stagedArtifact.Touch): cleanup removes the least recently used artifacts
// first, and a use a session already recorded need not be recorded again for each
// build that stages the artifact (a utimes per dependency per job, about 15 per job
// at 2,000 elements). The ref's time is then the session's first use of it, or its
// commit, whichever came later; while the session lives, cleanup keeps what it
// needs whatever the times (cache.Session.Need).
func touchStaged(c *cache.Cache, spec *buildSpec) {
	for _, s := range spec.Stage {
		if s.Touch {
			c.Touch(s.project(spec), s.Element, s.Key)
		}
	}
}

// cachedBytes is about what a build added to the cache: the install tree, the
// build tree of a failure, and the log. Blobs the cache already had count
// too, so it is an upper bound, which is what the quota needs.
func cachedBytes(workDir string, failed bool, logPath string) int64 {
	dirs := []string{filepath.Join(workDir, "install")}
	if failed {
		dirs = append(dirs, filepath.Join(workDir, "build"))
	}
	if logPath != "" {
		dirs = append(dirs, logPath)
	}
	var n int64
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(_ string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				if info, err := e.Info(); err == nil {
					n += info.Size()
				}
			}
			return nil
		})
	}
	return n
}
