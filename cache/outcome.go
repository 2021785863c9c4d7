package cache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/internal/bincode"
	"github.com/gantry-build/gantry/internal/fileid"
)

// Outcome answers what planning asks of every element: is the artifact of element at
// key cached, and did its build succeed? It reads the ref and the record, and checks the
// record against its digest, as Lookup does, but decodes only what Lookup checks and
// the outcome: not the record's dependencies, inputs or times. A missing artifact gives
// (false, false, nil); a ref that cannot be followed, (false, false, *CorruptRefError).
// The blobs the record points at are not read: staging checks those it uses.
func (c *Cache) Outcome(project, element, key string) (found, success bool, err error) {
	return c.OutcomeMemoized(nil, project, element, key)
}

// OutcomeMemoized is Outcome, answered from m (nil: no memo) without reading the record
// when the ref still names the record m saw, and without reading the ref when m saw it
// with the identity it has now (one stat instead of an open, two reads and a close).
// A memo of another project is not used (a junction's sub-project's artifacts are its own).
func (c *Cache) OutcomeMemoized(m *OutcomeMemo, project, element, key string) (found, success bool, err error) {
	if m != nil && m.project != project {
		m = nil
	}
	e, memoized := m.get(element, key)
	if memoized && e.Ref != (fileid.ID{}) {
		if now, ok := m.refIdentity(element, key); ok && now == e.Ref {
			m.stat.Add(1)
			return true, e.Success, nil
		}
	}
	var refID fileid.ID
	refPath, ref, err := c.readRefIdentity(project, element, key, &refID)
	if errors.Is(err, ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	record := string(bytes.TrimSpace(ref))
	if memoized && e.Record == record {
		m.use(element, memoEntry{Key: key, Record: record, Success: e.Success, Ref: refID})
		return true, e.Success, nil
	}
	rd, data, err := c.recordBlob(ref)
	if err != nil {
		return false, false, &CorruptRefError{Ref: refPath, Err: err}
	}
	var h recordHead
	if err := json.Unmarshal(data, &h); err != nil {
		return false, false, &CorruptRefError{Ref: refPath, Err: fmt.Errorf("decoding artifact record %s: %w", rd, err)}
	}
	if err := h.check(rd, project, element, key); err != nil {
		return false, false, &CorruptRefError{Ref: refPath, Err: err}
	}
	m.use(element, memoEntry{Key: key, Record: record, Success: h.Success, Ref: refID})
	return true, h.Success, nil
}

// recordHead is the part of a record that says whose it is and how the build ended.
type recordHead struct {
	Version int    `json:"version"`
	Project string `json:"project"`
	Element string `json:"element"`
	Key     string `json:"key"`
	Success bool   `json:"success"`
	Files   Digest `json:"files"`
}

// check reports a record (blob rd) this gantry cannot use as project/element/key's.
func (h *recordHead) check(rd Digest, project, element, key string) error {
	if h.Version != recordVersion {
		return fmt.Errorf("artifact record %s has version %d, this gantry reads version %d", rd, h.Version, recordVersion)
	}
	if h.Project != project || h.Element != element || h.Key != key {
		return fmt.Errorf("artifact record %s is for %s/%s/%s", rd, h.Project, h.Element, h.Key)
	}
	if err := h.Files.Validate(); err != nil {
		return fmt.Errorf("artifact record %s: files: %w", rd, err)
	}
	return nil
}

// OutcomeMemo remembers artifacts' outcomes by the record their ref names, so that a
// null build reads each ref but not each record. A record is a blob, named by its
// digest: what it says can never change, so a memo entry cannot go stale. It also
// remembers the ref file's identity (size, inode, device, modification and change times
// in ns), so that a ref unchanged since it was read is stat'ed, not read: refs are
// replaced by renames, and a write in place changes the change time, which cannot be
// set back. What the
// memo gives up is the re-hash of the record on every plan: a damaged record blob is
// then found by `cache verify` and when the artifact is used (staged, checked out,
// pushed), as a damaged files blob already is.
//
// It holds one entry per element (the key last asked about). Refs are stat'ed relative
// to the project's refs directory, opened once: a stat walks two or three path
// components instead of the cache root's. That directory may be removed (Delete removes
// emptied parents) and made again while the memo is open; the removed one has no
// entries, so a stat through it fails and the ref is read by its path.
//
// Safe for concurrent use; Save writes it atomically, only when an answer differed from
// the file's: what this session learnt, and the earlier entries of elements it did not
// ask about (a `show` of one element keeps what the last null build learnt of the
// others) while their refs exist — an element deleted from the project is forgotten
// once its artifact is (cache gc, the quota), so the memo stays as large as the cache's
// refs of the project. `cache gc` removes memo files unused for loadsMaxAge.
type OutcomeMemo struct {
	path    string
	c       *Cache
	project string
	refs    *os.File      // refs/<project>, for stats relative to it; nil: stat by path
	racy    time.Duration // fileid.RacyWindow; tests that cannot wait it out set it below 0
	stat    atomic.Int64  // answers from the ref's identity alone, for tests

	old map[string]memoEntry // from the file, by element; read-only once opened

	mu   sync.Mutex
	used map[string]memoEntry // answers this session that differ from old, by element
}

type memoEntry struct {
	Key     string // the artifact's cache key
	Record  string // the record's digest, as the ref holds it
	Success bool
	Ref     fileid.ID // the ref file's when it was read (zero: unknown, or racily new)
}

// outcomeMemoVersion changes with the memo's format or meaning.
const outcomeMemoVersion = 4

// outcomeMemoMagic starts the memo's file, then the version and the entries in
// bincode's form (encodeOutcomeMemo): decoding it with encoding/gob took 4% of a null
// build's CPU.
const outcomeMemoMagic = "gantry-outcomes\n"

func encodeOutcomeMemo(entries map[string]memoEntry) []byte {
	w := &bincode.Writer{B: make([]byte, 0, 32+160*len(entries))}
	w.B = append(w.B, outcomeMemoMagic...)
	w.Uint(outcomeMemoVersion)
	w.Uint(uint64(len(entries)))
	for element, e := range entries {
		w.Str(element)
		w.Str(e.Key)
		w.Str(e.Record)
		w.Bool(e.Success)
		e.Ref.Append(w)
	}
	return w.B
}

// decodeOutcomeMemo reads what encodeOutcomeMemo wrote; an error for anything else,
// another version included.
func decodeOutcomeMemo(data string) (map[string]memoEntry, error) {
	rest, ok := strings.CutPrefix(data, outcomeMemoMagic)
	if !ok {
		return nil, errors.New("not an outcome memo")
	}
	r := bincode.NewStringReader(rest)
	if v := r.Uint(); r.Err == nil && v != outcomeMemoVersion {
		return nil, fmt.Errorf("version %d", v)
	}
	n := r.Count()
	entries := make(map[string]memoEntry, n)
	for range n {
		element := r.Str()
		e := memoEntry{Key: r.Str(), Record: r.Str(), Success: r.Bool()}
		e.Ref = fileid.Read(r)
		if r.Err != nil {
			break
		}
		entries[element] = e
	}
	if r.Err == nil && r.Len() != 0 {
		r.Err = errors.New("trailing bytes")
	}
	return entries, r.Err
}

// OpenOutcomeMemo opens project's memo, kept in the cache's loads/ directory. A missing
// or unreadable memo is an empty one.
func (c *Cache) OpenOutcomeMemo(project string) *OutcomeMemo {
	m := &OutcomeMemo{path: filepath.Join(LoadsDir(c.Root), outcomeMemoPrefix+project), c: c, project: project,
		racy: fileid.RacyWindow, used: map[string]memoEntry{}}
	if !validSegment(project) {
		m.path = "" // never read or written
		return m
	}
	if data, err := ReadLoadsFile(m.path); err == nil {
		if entries, err := decodeOutcomeMemo(data); err == nil {
			m.old = entries
		}
	}
	if f, err := os.Open(filepath.Join(c.Root, refsDir, project)); err == nil {
		m.refs = f // closed by its finalizer: the memo is used until the session ends
	}
	return m
}

// refIdentity is the identity of the ref of element's artifact at key, in one stat.
func (m *OutcomeMemo) refIdentity(element, key string) (fileid.ID, bool) {
	if validateRefName(m.project, element, key) != nil {
		return fileid.ID{}, false
	}
	if m.refs != nil {
		if id, ok := fileid.At(m.refs, element+"/"+key); ok {
			return id, true
		}
	}
	refPath, _ := m.c.RefPath(m.project, element, key)
	return fileid.Stat(refPath)
}

// get is m's entry for element's artifact at key.
func (m *OutcomeMemo) get(element, key string) (memoEntry, bool) {
	if m == nil {
		return memoEntry{}, false
	}
	e, ok := m.old[element]
	return e, ok && e.Key == key
}

// use records e as what this session learnt of element's artifact, unless the file
// said the same.
func (m *OutcomeMemo) use(element string, e memoEntry) {
	if m == nil || m.old[element] == e {
		return
	}
	m.mu.Lock()
	m.used[element] = e
	m.mu.Unlock()
}

// Save writes the memo if this session learnt something: temporary file, then rename.
// An error only costs speed.
func (m *OutcomeMemo) Save() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.path == "" || len(m.used) == 0 {
		return nil
	}
	entries := maps.Clone(m.used)
	for element, e := range m.old {
		if _, ok := entries[element]; !ok {
			if _, ok := m.refIdentity(element, e.Key); ok {
				entries[element] = e
			}
		}
	}
	return WriteLoadsFile(m.path, "the artifact outcome memo", func(w io.Writer, now int64) error {
		for element, e := range entries {
			if e.Ref.Racy(now, m.racy) {
				e.Ref = fileid.ID{}
				entries[element] = e
			}
		}
		_, err := w.Write(encodeOutcomeMemo(entries))
		return err
	})
}
