package actions

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/units"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
)

// cleanupSpec is the payload of a cache cleanup job.
type cleanupSpec struct {
	CacheDir string               `json:"cache-dir"`
	Project  string               `json:"project"`
	Target   int64                `json:"target"` // bytes
	Keep     []queues.ArtifactKey `json:"keep"`
}

// CleanupConfig keeps the cache under quota (bytes, not 0) in a build session of the
// targets of g. The session's targets and their runtime dependencies are always kept.
func CleanupConfig(c *cache.Cache, g *element.Graph, quota int64) (*queues.CleanupConfig, error) {
	used, err := c.Usage()
	if err != nil {
		return nil, err
	}
	deliver := map[*element.Element]bool{}
	for _, e := range g.Select(g.Targets, element.DepsRun) {
		deliver[e] = true
	}
	low := int64(float64(quota) * cache.LowWater)
	return &queues.CleanupConfig{
		Quota: quota, LowWater: low, Used: used,
		Deliver: func(it *queues.Item) bool { return deliver[it.Element] },
		Payload: func(keep []queues.ArtifactKey) (json.RawMessage, error) {
			return json.Marshal(cleanupSpec{CacheDir: c.Root, Project: g.Project.Name, Target: low, Keep: keep})
		},
	}, nil
}

// cleanupJob is the child side of a cleanup job: it takes the cache lock exclusively
// (waiting for other processes' staging and commits) and removes least recently used
// artifacts down to the target, keeping the session's, then unreferenced blobs.
func cleanupJob(ctx context.Context, spec job.Spec, r *job.Reporter) (job.Result, error) {
	var sp cleanupSpec
	if err := json.Unmarshal(spec.Payload, &sp); err != nil {
		return job.Result{}, fmt.Errorf("reading cleanup spec: %w", err)
	}
	c, err := cache.Attach(sp.CacheDir)
	if err != nil {
		return job.Result{}, err
	}
	lock, err := c.Lock(ctx, cache.Exclusive, r.Notice)
	if err != nil {
		return job.Result{}, err
	}
	defer lock.Unlock()
	r.Status(fmt.Sprintf("removing least recently used artifacts down to %s", units.Bytes(sp.Target)))
	keep := make(map[cache.ArtifactRef]bool, len(sp.Keep))
	for _, k := range sp.Keep {
		keep[cache.ArtifactRef{Project: cmp.Or(k.Project, sp.Project), Element: k.Element, Key: k.Key}] = true
	}
	rep, err := c.Cleanup(cache.CleanupOptions{Target: sp.Target, Protect: func(a cache.ArtifactRef) bool { return keep[a] }})
	if err != nil {
		return job.Result{}, err
	}
	for _, a := range rep.Artifacts {
		r.Log(fmt.Sprintf("removed %s (%s)", a.ArtifactRef, units.Bytes(a.Bytes)))
	}
	r.Log(fmt.Sprintf("removed %d artifacts and %d blobs, freed %s: %s → %s", len(rep.Artifacts), rep.Blobs,
		units.Bytes(rep.Freed), units.Bytes(rep.Before), units.Bytes(rep.After)))
	if rep.Live > 0 {
		r.Log(KeptForLiveSessions(rep))
	}
	data, err := json.Marshal(queues.CleanupResult{Before: rep.Before, After: rep.After, Freed: rep.Freed,
		Artifacts: len(rep.Artifacts), Short: rep.Short, Duration: rep.Duration, Live: rep.Live, LiveBytes: rep.LiveBytes})
	return job.Result{OK: true, Data: data}, err
}

// KeptForLiveSessions says what a cleanup kept because running sessions need it.
func KeptForLiveSessions(rep *cache.CleanupReport) string {
	return fmt.Sprintf("kept %d artifacts (%s) that running gantry sessions need", rep.Live, units.Bytes(rep.LiveBytes))
}
