package element

import (
	"fmt"

	"github.com/gantry-build/gantry/cache"
)

// Staging from digests (issue 13). The process that plans a build looks each
// dependency's artifact up once per session (StagedDigests) and passes its record
// and files digests in the build spec; the job then checks with one small read of
// the ref that it is still that artifact (cache.RefersTo), instead of reading,
// hashing and decoding every dependency's record again in every job that stages
// it. The files themselves are hashed as they are staged, as before, so a missing
// or damaged blob still takes the heal path (a *cache.BlobError).

// StagedDigests remembers the digests of the dependency artifacts a session has
// looked up for staging. Its methods are called only on the scheduler goroutine.
type StagedDigests struct {
	known map[stagedName]StagedArtifact
}

type stagedName struct{ project, element, key string }

// Fill sets the digests of every artifact spec stages, looking up those not
// seen before. An artifact that cannot be looked up, or records a failure, is
// left without digests: the job looks it up itself and reports what is wrong.
func (m *StagedDigests) Fill(c *cache.Cache, spec *BuildSpec) {
	if m.known == nil {
		m.known = map[stagedName]StagedArtifact{}
	}
	for i := range spec.Stage {
		s := &spec.Stage[i]
		name := stagedName{spec.Project, s.Element, s.Key}
		known, ok := m.known[name]
		if !ok {
			a, err := c.Lookup(spec.Project, s.Element, s.Key)
			if err != nil || !a.Success {
				continue
			}
			known = StagedArtifact{Element: s.Element, Key: s.Key, Record: a.Record, Files: a.Files}
			m.known[name] = known
		}
		*s = known
	}
}

// lookupDependencies finds the artifacts of spec.Stage, in order: from the
// digests in the spec where the ref still names that record, else from the
// cache.
func lookupDependencies(c *cache.Cache, spec *BuildSpec) ([]*cache.Artifact, error) {
	deps := make([]*cache.Artifact, 0, len(spec.Stage))
	for _, s := range spec.Stage {
		if !s.Record.IsZero() && c.RefersTo(spec.Project, s.Element, s.Key, s.Record) {
			deps = append(deps, &cache.Artifact{Project: spec.Project, Element: s.Element, Key: s.Key,
				Success: true, Files: s.Files, Record: s.Record})
			continue
		}
		a, err := c.Lookup(spec.Project, s.Element, s.Key)
		if err != nil {
			return nil, &infraError{fmt.Errorf("staging dependency %s: %w", s.Element, err)}
		}
		if !a.Success {
			return nil, &infraError{fmt.Errorf("staging dependency %s: its cached build failed", s.Element)}
		}
		deps = append(deps, a)
	}
	return deps, nil
}
