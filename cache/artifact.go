package cache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/fileid"
)

// Artifact is the record of one build of one element at one cache key,
// successful or failed.
type Artifact struct {
	Project, Element, Key string
	// WeakKey is the element's weak key when it was built ("" for none): a successful
	// artifact is also found by it (LookupWeak), in non-strict sessions.
	WeakKey string

	Success bool
	Error   string // the failure message when !Success

	Files Digest // root Directory of the install tree (for a failure: what it held when the build failed)
	Log   Digest // the build log blob; zero when there is none
	// BuildTree is the root Directory of a failed build's build directory, kept for
	// `gantry shell --build`; zero for successful builds.
	BuildTree Digest
	// BuiltOn is where a remote build ran: its execution service and, when the
	// service names it, the worker ("" for a build on this machine).
	BuiltOn string

	Dependencies map[string]string // element name -> cache key it was built against
	// Inputs is what the key was computed from (element.Inputs, compact JSON), for
	// `gantry explain`; nil for artifacts recorded without it.
	Inputs json.RawMessage

	BuildDuration time.Duration
	Started       time.Time // read back in UTC
	Finished      time.Time // read back in UTC

	// Record is the digest of the record blob, which the ref names: set by Lookup
	// and by Commit (any value given to Commit is ignored).
	Record Digest
}

// Name returns "project/element/key", how artifacts are named in messages.
func (a *Artifact) Name() string { return a.Project + "/" + a.Element + "/" + a.Key }

// recordVersion is the version of the artifact record format.
const recordVersion = 1

// record is how an Artifact is stored: a JSON blob in the CAS. Field order is
// the declaration order and map keys are sorted, so equal artifacts give
// equal blobs.
type record struct {
	Version         int               `json:"version"`
	Project         string            `json:"project"`
	Element         string            `json:"element"`
	Key             string            `json:"key"`
	WeakKey         string            `json:"weak_key,omitempty"`
	Success         bool              `json:"success"`
	Error           string            `json:"error,omitempty"`
	Files           Digest            `json:"files"`
	Log             Digest            `json:"log,omitzero"`
	BuildTree       Digest            `json:"build_tree,omitzero"`
	BuiltOn         string            `json:"built_on,omitempty"`
	Dependencies    map[string]string `json:"dependencies,omitempty"`
	Inputs          json.RawMessage   `json:"inputs,omitempty"`
	BuildDurationNS int64             `json:"build_duration_ns"`
	Started         time.Time         `json:"started,omitzero"`
	Finished        time.Time         `json:"finished,omitzero"`
}

// CorruptRefError reports a ref that exists but does not lead to a readable
// artifact record. It wraps ErrCorrupt.
type CorruptRefError struct {
	Ref string // path of the ref file
	Err error
}

func (e *CorruptRefError) Error() string {
	return fmt.Sprintf("artifact ref %s is corrupt: %v; run `gantry cache verify`", e.Ref, e.Err)
}

func (e *CorruptRefError) Unwrap() []error { return []error{e.Err, ErrCorrupt} }

// validSegment reports whether s may be one path component of a ref.
func validSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\\\x00")
}

func validateRefName(project, element, key string) error {
	if !validSegment(project) {
		return fmt.Errorf("invalid project name %q", project)
	}
	for seg := range strings.SplitSeq(element, "/") {
		if !validSegment(seg) {
			return fmt.Errorf("invalid element name %q", element)
		}
	}
	if !validSegment(key) {
		return fmt.Errorf("invalid cache key %q", key)
	}
	return nil
}

// RefPath returns the path of the ref of an artifact, whether or not it exists.
func (c *Cache) RefPath(project, element, key string) (string, error) {
	if err := validateRefName(project, element, key); err != nil {
		return "", err
	}
	return filepath.Join(c.Root, refsDir, project, filepath.FromSlash(element), key), nil
}

// HasRefs reports whether the cache may hold an artifact of project: false only when
// it holds no ref of the project at all (its directory under refs/ is absent), as in a
// new cache, where asking about each artifact would be one failed open each.
func (c *Cache) HasRefs(project string) bool {
	if !validSegment(project) {
		return true // let the lookup of each artifact name the problem
	}
	_, err := os.Lstat(filepath.Join(c.Root, refsDir, project))
	return !errors.Is(err, fs.ErrNotExist)
}

// Complete checks that every blob a's record points at is present: every
// Directory of the files tree (read and validated), every file blob (by size)
// and the log.
func (c *Cache) Complete(a *Artifact) error {
	var problems []error
	c.auditTree(a.Files, nil, func(d Digest) error {
		if !c.HasBlob(d) {
			return fmt.Errorf("blob %s is missing", d)
		}
		return nil
	}, func(p string, err error) {
		problems = append(problems, treeProblem(p, err))
	})
	if !a.BuildTree.IsZero() {
		c.auditTree(a.BuildTree, nil, func(d Digest) error {
			if !c.HasBlob(d) {
				return fmt.Errorf("blob %s is missing", d)
			}
			return nil
		}, func(p string, err error) {
			problems = append(problems, treeProblem("build tree "+p, err))
		})
	}
	if !a.Log.IsZero() && !c.HasBlob(a.Log) {
		problems = append(problems, fmt.Errorf("log blob %s is missing", a.Log))
	}
	if len(problems) > 0 {
		return fmt.Errorf("artifact %s is incomplete: %w", a.Name(), problems[0])
	}
	return nil
}

// Commit stores the artifact record a in the CAS and then, last, its ref,
// replacing any earlier artifact of the same key. Everything a points at must
// already be stored; Commit checks. A zero a.Files is set to the empty tree.
func (c *Cache) Commit(a *Artifact) error {
	refPath, err := c.RefPath(a.Project, a.Element, a.Key)
	if err != nil {
		return fmt.Errorf("committing artifact %s: %w", a.Name(), err)
	}
	if err := c.storeRecord(a); err != nil {
		return err
	}
	rd := a.Record
	// The ref's content is written beside the blobs and one pass makes all of
	// them durable; then the ref is renamed into place, last, and its directory
	// fsynced: from here on the artifact is visible. Two flushes per commit,
	// none per file.
	nf, err := c.writeNew(refPath, []byte(rd.String()+"\n"), 0o644, volatile, true)
	if err != nil {
		return fmt.Errorf("committing artifact %s: %w", a.Name(), err)
	}
	if err := c.syncBlobs(); err != nil {
		nf.discard()
		return fmt.Errorf("committing artifact %s: %w", a.Name(), err)
	}
	if err := c.place(nf, refPath, dirSynced); err != nil {
		return fmt.Errorf("committing artifact %s: %w", a.Name(), err)
	}
	c.note(eventRef, refPath)
	c.writeWeakRef(a, refPath, rd)
	return nil
}

// storeRecord checks that every blob a points at is stored and stores its record
// (volatile, as every blob), setting a.Record. A zero a.Files is set to the empty tree.
func (c *Cache) storeRecord(a *Artifact) error {
	var err error
	if a.Files.IsZero() {
		if a.Files, err = c.EmptyTree(); err != nil {
			return fmt.Errorf("committing artifact %s: %w", a.Name(), err)
		}
	}
	if err := c.Complete(a); err != nil {
		return fmt.Errorf("committing artifact: %w", err)
	}
	data, err := json.Marshal(record{
		Version:         recordVersion,
		Project:         a.Project,
		Element:         a.Element,
		Key:             a.Key,
		WeakKey:         a.WeakKey,
		Success:         a.Success,
		Error:           a.Error,
		Files:           a.Files,
		Log:             a.Log,
		BuildTree:       a.BuildTree,
		BuiltOn:         a.BuiltOn,
		Dependencies:    a.Dependencies,
		Inputs:          a.Inputs,
		BuildDurationNS: int64(a.BuildDuration),
		Started:         utc(a.Started),
		Finished:        utc(a.Finished),
	})
	if err != nil {
		return fmt.Errorf("committing artifact %s: encoding record: %w", a.Name(), err)
	}
	rd, err := c.PutBlob(append(data, '\n'))
	if err != nil {
		return fmt.Errorf("committing artifact %s: %w", a.Name(), err)
	}
	a.Record = rd
	return nil
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// Lookup reads the artifact of element at key. An absent artifact gives an
// error wrapping ErrNotFound; a ref that cannot be followed gives a
// *CorruptRefError.
func (c *Cache) Lookup(project, element, key string) (*Artifact, error) {
	refPath, ref, err := c.readRef(project, element, key)
	if err != nil {
		return nil, err
	}
	a, err := c.readRecord(ref, project, element, key)
	if err != nil {
		return nil, &CorruptRefError{Ref: refPath, Err: err}
	}
	return a, nil
}

// RefersTo reports whether the ref of project/element/key names the record
// blob record: one small read, where Lookup also reads, hashes and decodes the
// record. A job given an artifact's digests by the process that planned it
// checks with it that the artifact is still the one it was told of.
func (c *Cache) RefersTo(project, element, key string, record Digest) bool {
	_, data, err := c.readRef(project, element, key) // once per dependency of every build
	if err != nil {
		return false
	}
	rd, err := ParseDigest(string(bytes.TrimSpace(data)))
	return err == nil && rd == record
}

// readRef reads the ref of element at key. An absent ref gives an error wrapping
// ErrNotFound.
func (c *Cache) readRef(project, element, key string) (refPath string, ref []byte, err error) {
	return c.readRefIdentity(project, element, key, nil)
}

// readRefIdentity is readRef that also sets *id (when id is not nil) to the identity of
// the ref file read (zero where the platform gives none).
func (c *Cache) readRefIdentity(project, element, key string, id *fileid.ID) (refPath string, ref []byte, err error) {
	refPath, err = c.RefPath(project, element, key)
	if err != nil {
		return "", nil, fmt.Errorf("looking up artifact: %w", err)
	}
	ref, err = readSmallFile(refPath, id)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return "", nil, fmt.Errorf("artifact %s/%s/%s: %w", project, element, key, ErrNotFound)
	}
	if err != nil {
		return "", nil, fmt.Errorf("looking up artifact %s/%s/%s: %w", project, element, key, err)
	}
	return refPath, ref, nil
}

// readSmallFile is os.ReadFile for a file expected to be small, such as a ref (a
// digest), in the fewest system calls: open, read until end of file, close; no stat
// (os.Open makes one to decide on polling) unless id is not nil, when it is set to the
// identity of the file read.
func readSmallFile(path string, id *fileid.ID) ([]byte, error) {
	var fd int
	var err error
	for {
		if fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	if id != nil {
		*id, _ = fileid.Fstat(fd)
	}
	buf := make([]byte, 0, 160)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// readRecord follows the content of a ref to its record.
func (c *Cache) readRecord(ref []byte, project, element, key string) (*Artifact, error) {
	rd, data, err := c.recordBlob(ref)
	if err != nil {
		return nil, err
	}
	return DecodeRecord(data, rd, project, element, key)
}

// recordBlob reads the record blob a ref's content names.
func (c *Cache) recordBlob(ref []byte) (Digest, []byte, error) {
	rd, err := ParseDigest(string(bytes.TrimSpace(ref)))
	if err != nil {
		return Digest{}, nil, err
	}
	data, err := c.ReadBlob(rd)
	return rd, data, err
}

// DecodeRecord decodes the record blob rd of the artifact project/element/key.
func DecodeRecord(data []byte, rd Digest, project, element, key string) (*Artifact, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decoding artifact record %s: %w", rd, err)
	}
	head := recordHead{Version: r.Version, Project: r.Project, Element: r.Element, Key: r.Key, Files: r.Files}
	if err := head.check(rd, project, element, key); err != nil {
		return nil, err
	}
	return &Artifact{
		Project:       r.Project,
		Element:       r.Element,
		Key:           r.Key,
		WeakKey:       r.WeakKey,
		Success:       r.Success,
		Error:         r.Error,
		Files:         r.Files,
		Log:           r.Log,
		BuildTree:     r.BuildTree,
		BuiltOn:       r.BuiltOn,
		Dependencies:  r.Dependencies,
		Inputs:        r.Inputs,
		BuildDuration: time.Duration(r.BuildDurationNS),
		Started:       r.Started,
		Finished:      r.Finished,
		Record:        rd,
	}, nil
}

// refName is a ref found on disk.
type refName struct {
	Path                  string
	Project, Element, Key string
}

// listRefs finds the refs of project ("" for all projects), sorted by
// project, element, key. Files in refs/ too shallow to be refs are returned
// as problems.
func (c *Cache) listRefs(project string) ([]refName, []error, error) {
	refsRoot := filepath.Join(c.Root, refsDir)
	top := refsRoot
	if project != "" {
		if !validSegment(project) {
			return nil, nil, fmt.Errorf("listing artifacts: invalid project name %q", project)
		}
		top = filepath.Join(refsRoot, project)
	}
	var refs []refName
	var problems []error
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == top && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll // no artifacts of this project
			}
			return err
		}
		rel, err := filepath.Rel(refsRoot, p)
		if err != nil {
			return err
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if d.IsDir() {
			if refSlot(parts) {
				problems = append(problems, &refDirError{p})
				return fs.SkipDir
			}
			return nil
		}
		if len(parts) < 3 || !d.Type().IsRegular() {
			problems = append(problems, fmt.Errorf("%s is not an artifact ref", p))
			return nil
		}
		refs = append(refs, refName{
			Path:    p,
			Project: parts[0],
			Element: strings.Join(parts[1:len(parts)-1], "/"),
			Key:     parts[len(parts)-1],
		})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("listing artifacts in %s: %w", top, err)
	}
	slices.SortFunc(refs, func(a, b refName) int {
		if n := strings.Compare(a.Project, b.Project); n != 0 {
			return n
		}
		if n := strings.Compare(a.Element, b.Element); n != 0 {
			return n
		}
		return strings.Compare(a.Key, b.Key)
	})
	return refs, problems, nil
}

// refSlot reports whether the path parts under refs/ name a ref: the last
// part of project/element/key, where an element's name ends in ".toml" and a
// key does not.
func refSlot(parts []string) bool {
	n := len(parts)
	return n >= 3 && strings.HasSuffix(parts[n-2], ".toml") && !strings.HasSuffix(parts[n-1], ".toml")
}

// List returns the artifacts of project ("" for every project), sorted by
// project, element and key. Refs that cannot be read are left out and
// reported together in the error; the artifacts returned with such an error
// are still valid.
func (c *Cache) List(project string) ([]*Artifact, error) {
	refs, problems, err := c.listRefs(project)
	if err != nil {
		return nil, err
	}
	arts := make([]*Artifact, 0, len(refs))
	for _, r := range refs {
		a, err := c.Lookup(r.Project, r.Element, r.Key)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since we listed it
		}
		if err != nil {
			problems = append(problems, err)
			continue
		}
		arts = append(arts, a)
	}
	return arts, errors.Join(problems...)
}

// Delete removes the ref of an artifact, and the directories this empties.
// The blobs stay until garbage collection. Deleting an absent artifact gives
// an error wrapping ErrNotFound.
func (c *Cache) Delete(project, element, key string) error {
	refPath, err := c.RefPath(project, element, key)
	if err != nil {
		return fmt.Errorf("deleting artifact: %w", err)
	}
	if err := os.Remove(refPath); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("deleting artifact %s/%s/%s: %w", project, element, key, ErrNotFound)
		}
		return fmt.Errorf("deleting artifact %s/%s/%s: %w", project, element, key, err)
	}
	c.pruneRefDirs(refPath)
	return nil
}

// pruneRefDirs removes the directories above the removed ref refPath that are
// now empty, up to refs/; it stops harmlessly at the first directory that
// still has entries. A concurrent Commit recreates what it needs (see
// renameInto).
func (c *Cache) pruneRefDirs(refPath string) {
	refsRoot := filepath.Join(c.Root, refsDir)
	for dir := filepath.Dir(refPath); dir != refsRoot && strings.HasPrefix(dir, refsRoot); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
}
