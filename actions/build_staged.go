package actions

import (
	"errors"
	"fmt"

	"github.com/gantry-build/gantry/cache"
)

// Staging from digests. The process that plans a build looks each
// dependency's artifact up once per session (stagedDigests) and passes its record
// and files digests in the build spec; the job then checks with one small read of
// the ref that it is still that artifact (cache.RefersTo), instead of reading,
// hashing and decoding every dependency's record again in every job that stages
// it. The files themselves are hashed as they are staged, as before, so a missing
// or damaged blob still takes the heal path (a *cache.BlobError).

// Built is what a successful build job makes available before it ends
// (job.Reporter.Available, in binary: encode): the digest of its artifact's files, stored in the
// CAS. The job then stores the log and the record and makes them all durable
// before it writes the ref; the builds that stage the artifact need only the
// files, so they start without waiting for that (stagedDigests.Built). A crash
// before the ref is written leaves blobs no ref names, never a ref naming a blob
// that is not durable; and a build that staged the files commits its own
// artifact after a flush of the whole filesystem, which covers them too.
type Built struct {
	Files cache.Digest
}

// stagedDigests remembers the digests of the dependency artifacts a session has
// looked up for staging. Its methods are called only on the scheduler goroutine.
type stagedDigests struct {
	known map[stagedName]stagedArtifact
	// touched: the artifacts a spec of this session already asked its job to
	// touch (stagedArtifact.Touch).
	touched map[stagedName]bool
}

type stagedName struct{ project, element, key string }

// Built records what the build of element at key, in project, made available
// (data: a Built), for the builds that stage it. Data it cannot read is ignored:
// they look the artifact up themselves, once its ref is written.
func (m *stagedDigests) Built(project, element, key string, data []byte) {
	b, err := decodeBuilt(data)
	if err != nil || b.Files.IsZero() {
		return
	}
	if m.known == nil {
		m.known = map[stagedName]stagedArtifact{}
	}
	m.known[stagedName{project, element, key}] = stagedArtifact{Element: element, Key: key, Files: b.Files, Pending: true}
}

// Fill sets the digests of every artifact spec stages, looking up those not
// seen before. An artifact that cannot be looked up, or records a failure, is
// left without digests: the job looks it up itself and reports what is wrong.
func (m *stagedDigests) Fill(c *cache.Cache, spec *buildSpec) {
	if m.known == nil {
		m.known = map[stagedName]stagedArtifact{}
	}
	if m.touched == nil {
		m.touched = map[stagedName]bool{}
	}
	for i := range spec.Stage {
		s := &spec.Stage[i]
		name := stagedName{s.project(spec), s.Element, s.Key}
		known, ok := m.known[name]
		if !ok {
			a, err := c.Lookup(name.project, s.Element, s.Key)
			if err != nil || !a.Success {
				s.Touch = true // whatever the job finds, until one is found here
				continue
			}
			known = stagedArtifact{Element: s.Element, Key: s.Key, Record: a.Record, Files: a.Files}
			m.known[name] = known
		}
		known.Project, known.Public = name.project, s.Public // the build's own
		known.Name, known.Whitelist = s.Name, s.Whitelist
		known.Touch = !m.touched[name]
		m.touched[name] = true
		*s = known
	}
}

// lookupDependencies finds the artifacts of spec.Stage, in order: from the
// digests in the spec where the ref still names that record, or where this
// session built it (Pending: the files it made), else from the cache.
func lookupDependencies(c *cache.Cache, spec *buildSpec) ([]*cache.Artifact, error) {
	deps := make([]*cache.Artifact, 0, len(spec.Stage))
	for _, s := range spec.Stage {
		if s.Pending && !s.Files.IsZero() {
			deps = append(deps, &cache.Artifact{Project: s.project(spec), Element: s.Element, Key: s.Key,
				Success: true, Files: s.Files})
			continue
		}
		if !s.Record.IsZero() && c.RefersTo(s.project(spec), s.Element, s.Key, s.Record) {
			deps = append(deps, &cache.Artifact{Project: s.project(spec), Element: s.Element, Key: s.Key,
				Success: true, Files: s.Files, Record: s.Record})
			continue
		}
		a, err := c.Lookup(s.project(spec), s.Element, s.Key)
		if errors.Is(err, cache.ErrNotFound) {
			return nil, vanishedDependency(c, s.Element, s.Key, err)
		}
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
