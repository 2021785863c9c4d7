package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// sources/junctions/ holds the projects of tar and git junctions, each staged once per
// source key (element's junctionDir names the directory). A new version of a junction
// stages a new directory and nothing else refers to the old one, so each load marks the
// directory it uses (its modification time, at most once a day), as loads/ files are
// marked, and `cache gc` removes those no load used for junctionMaxAge (leftovers).
//
// A load may read a staged project for as long as its session lasts (the local sources
// of the sub-project's elements are staged from it by the build jobs), so a cleanup
// must never remove one a running session uses. A load that finds its directory's mark
// older than junctionUseStep marks it again under the shared cache lock, and a cleanup
// lists and removes directories under the exclusive lock: either the mark comes first
// and the cleanup sees a directory used just now, or the cleanup comes first and the
// load finds the directory gone and stages it again. A mark younger than
// junctionUseStep needs no lock: the directory is junctionMaxAge-junctionUseStep away
// from any cleanup. Staging itself holds the shared lock from its temporary directory
// to the rename, so a cleanup may remove every temporary directory it finds older than
// staleTempAge (one a crashed load left).

const (
	junctionsDir = "junctions"
	// junctionStaging starts the name of a directory being staged, renamed into place
	// when complete.
	junctionStaging = ".staging-"
	// junctionMaxAge: a staged junction no load has used for this long is removed by
	// `cache gc` (cargo removes the registry sources it extracted after a month unused).
	junctionMaxAge = 30 * 24 * time.Hour
	// junctionUseStep: a staged junction is marked used when its mark is older.
	junctionUseStep = 24 * time.Hour
)

// JunctionStaging says how StagedJunction makes a junction's directory when it is not
// there.
type JunctionStaging struct {
	// Fetch brings the junction's source into the source cache (run without the lock:
	// it may take long, over the network).
	Fetch func() error
	// Stage stages the project into dir, a new empty directory, under the shared lock.
	Stage func(dir string) error
	// Waiting, if set, is told what a load waits for when a cleanup holds the cache.
	Waiting func(string)
}

// StagedJunction returns sources/junctions/NAME of the cache whose source cache is
// sourcesDir (SourcesDirOf): the project a tar or git junction holds, marked used.
// When it is not there, it is fetched and staged (o) into a temporary directory that is
// renamed into place, so a load never sees half a project. The caller must not hold
// the cache lock: a cleanup waiting at the turnstile would wait for it, and it for the
// cleanup (commands load their graph before they lock the cache).
func StagedJunction(sourcesDir, name string, o JunctionStaging) (string, error) {
	dir := filepath.Join(sourcesDir, junctionsDir, name)
	if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) < junctionUseStep {
		return dir, nil // marked lately: far from any cleanup
	}
	c, err := At(filepath.Dir(sourcesDir))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("preparing the source cache: %w", err)
	}
	used, err := c.markJunction(dir, o.Waiting)
	if used || err != nil {
		return dir, err
	}
	if err := o.Fetch(); err != nil {
		return "", err
	}
	lock, err := c.Lock(context.Background(), Shared, o.Waiting)
	if err != nil {
		return "", err
	}
	defer lock.Unlock()
	if used, err := markUsed(dir); used || err != nil {
		return dir, err // staged by another load meanwhile
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), junctionStaging)
	if err != nil {
		return "", err
	}
	defer removeAll(tmp) // after the rename: nothing to remove
	if err := o.Stage(tmp); err != nil {
		return "", err
	}
	// Staging may give the directory its archive's time: the mark is now.
	now := time.Now()
	if err := os.Chtimes(tmp, now, now); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			return dir, nil // another load staged it meanwhile
		}
		return "", err
	}
	return dir, nil
}

// markJunction marks the staged junction dir used under the shared lock, if it is there.
func (c *Cache) markJunction(dir string, waiting func(string)) (bool, error) {
	lock, err := c.Lock(context.Background(), Shared, waiting)
	if err != nil {
		return false, err
	}
	defer lock.Unlock()
	return markUsed(dir)
}

// markUsed sets dir's modification time to now, if dir is there.
func markUsed(dir string) (bool, error) {
	now := time.Now()
	err := os.Chtimes(dir, now, now)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("marking the staged junction %s used: %w", dir, err)
	}
	return true, nil
}

// staleJunctions lists the staged junctions no load used for junctionMaxAge, and
// temporary directories of stagings that crashed (older than staleTempAge). Called
// under the exclusive lock (Cleanup).
func (c *Cache) staleJunctions() ([]string, error) {
	return staleEntries(filepath.Join(c.SourcesDir(), junctionsDir), fs.ModeDir, junctionMaxAge, junctionStaging)
}
