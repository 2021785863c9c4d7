package cache

import (
	"errors"
	"slices"
	"strings"
	"time"
)

// ArtifactUsage is one artifact's share of the cache.
type ArtifactUsage struct {
	ArtifactRef
	Success bool      `json:"success"`
	Bytes   int64     `json:"bytes"` // its blobs on disk, shared ones included
	Own     int64     `json:"own"`   // what deleting only it would free
	LastUse time.Time `json:"last-use"`
}

// ProjectUsage is one project's share of the cache.
type ProjectUsage struct {
	Project   string `json:"project"`
	Artifacts int    `json:"artifacts"`
	Bytes     int64  `json:"bytes"` // blobs its artifacts reach, each once
}

// UsageReport is what `gantry cache usage` shows.
type UsageReport struct {
	Root              string          `json:"root"`
	Total             int64           `json:"total"` // the cache directory on disk, hard links once
	CAS               int64           `json:"cas"`   // cas/ on disk
	Blobs             int             `json:"blobs"`
	Twins             int             `json:"executable-twins"`       // in exec/ (made for hard-linked staging)
	TwinBytes         int64           `json:"executable-twins-bytes"` // exec/ on disk
	Artifacts         int             `json:"artifacts"`
	Failed            int             `json:"failed"`
	Unreferenced      int             `json:"unreferenced-blobs"` // blobs no artifact reaches (gc removes them)
	UnreferencedBytes int64           `json:"unreferenced-bytes"`
	Projects          []ProjectUsage  `json:"projects"`
	Largest           []ArtifactUsage `json:"largest"`
	Problems          []string        `json:"problems,omitempty"` // refs that could not be read
}

// Report measures the cache: its size on disk, its blobs and artifacts, per
// project, and the largest n artifacts. A cache not made yet (At) is reported
// empty, and is not made.
func (c *Cache) Report(n int) (*UsageReport, error) {
	inv, err := c.takeInventory()
	if err != nil {
		return nil, err
	}
	rep := &UsageReport{Root: c.Root, Total: inv.total, CAS: inv.casBytes, Twins: inv.twins, TwinBytes: inv.twinBytes, Artifacts: len(inv.artifacts),
		Projects: []ProjectUsage{}, Problems: errorStrings(inv.problems)}
	for _, b := range inv.blobs {
		if !b.present() {
			continue
		}
		if b.onDisk {
			rep.Blobs++
		}
		if b.refs == 0 {
			rep.Unreferenced++
			rep.UnreferencedBytes += b.disk
		}
	}
	projects := map[string]int{}
	mark := make([]int32, len(inv.blobs)) // project index + 1 that last counted a blob
	for _, a := range inv.artifacts {
		if !a.Success {
			rep.Failed++
		}
		pi, ok := projects[a.Project]
		if !ok {
			pi = len(rep.Projects)
			projects[a.Project] = pi
			rep.Projects = append(rep.Projects, ProjectUsage{Project: a.Project})
		}
		p := &rep.Projects[pi]
		p.Artifacts++
		for _, b := range a.blobs {
			if mark[b] != int32(pi+1) {
				mark[b] = int32(pi + 1)
				p.Bytes += inv.blobs[b].disk
			}
		}
	}
	rep.Largest = inv.usages("")
	slices.SortStableFunc(rep.Largest, func(a, b ArtifactUsage) int { return compareInt(b.Bytes, a.Bytes) })
	rep.Largest = rep.Largest[:min(n, len(rep.Largest))]
	return rep, nil
}

// Usages lists the artifacts of project ("" for all) with their sizes and
// last use, sorted by project, element and key (none in a cache not made yet).
// Refs that cannot be read are reported in the error, the others are still
// returned.
func (c *Cache) Usages(project string) ([]ArtifactUsage, error) {
	inv, err := c.takeInventory()
	if err != nil {
		return nil, err
	}
	return inv.usages(project), errors.Join(inv.problems...)
}

func (inv *inventory) usages(project string) []ArtifactUsage {
	out := []ArtifactUsage{}
	for _, a := range inv.artifacts {
		if project != "" && a.Project != project {
			continue
		}
		u := ArtifactUsage{ArtifactRef: a.ref(), Success: a.Success, LastUse: a.LastUse}
		for _, b := range a.blobs {
			u.Bytes += inv.blobs[b].disk
			if inv.blobs[b].refs == 1 {
				u.Own += inv.blobs[b].disk
			}
		}
		out = append(out, u)
	}
	return out
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func errorStrings(errs []error) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// FindArtifacts returns the refs of project whose element is element (any
// element when "") and whose key starts with keyPrefix, sorted.
func (c *Cache) FindArtifacts(project, element, keyPrefix string) ([]ArtifactRef, error) {
	refs, _, err := c.listRefs(project)
	if err != nil {
		return nil, err
	}
	var out []ArtifactRef
	for _, r := range refs {
		if (element == "" || r.Element == element) && strings.HasPrefix(r.Key, keyPrefix) {
			out = append(out, ArtifactRef{Project: r.Project, Element: r.Element, Key: r.Key})
		}
	}
	return out, nil
}
