package element

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/bincode"
	"github.com/gantry-build/gantry/internal/fileid"
)

// ParseCache remembers element files as parsed (parsedFile), so that loading a project
// whose files did not change reads no element file and parses no TOML: each file is
// stat'ed and, if its identity is what the cache saw, its parse is reused.
//
// A file's identity is its path, size, inode, device, and modification and change times
// in nanoseconds. An editor that writes in place changes the times; one that renames a
// new file over it changes the inode. The change time (ctime) cannot be set by a user,
// so restoring an mtime does not fool it. A file whose times are within fileid.RacyWindow of
// the moment the cache is written is not remembered (git's "racily clean" entries): a
// second edit within the filesystem's timestamp granularity could leave every field
// the same, so such a file is parsed again next time.
//
// Only what the file itself says is cached: project variables and environment,
// gantry.lock refs, workspaces, pools and local sources' contents are applied on every
// load, so changing them can never leave a stale element. Each entry also keeps the
// element's key as last computed (keyMemo), with every other input it came from: it is
// reused only when each is unchanged. The cache file names the
// gantry build that wrote it; another build's, or a damaged one, is ignored.
//
// Safe for concurrent lookups while a graph loads; Save runs once, after, and may run
// while the graph is used (it writes only cachedFile.drop, which nothing else reads).
type ParseCache struct {
	path  string
	root  string        // the project's root, which files' names are relative to
	stamp string        // the writing gantry build; the file is ignored unless it matches
	racy  time.Duration // fileid.RacyWindow; tests that cannot wait it out set it below 0
	hits  atomic.Int64  // lookups answered, for tests
	keys  atomic.Int64  // keys reused (keyMemo), for tests

	// included holds the identities of included files as this load stat'ed them, by
	// name (an includeStat each): elements that share an include stat it once.
	included sync.Map

	mu    sync.RWMutex           // read-locked by lookups, which the loading goroutines make at once
	files map[string]*cachedFile // file as shown ("elements/app.toml") -> what it was
	dirty atomic.Bool
}

// cachedFile is one file's entry. An entry read from the cache file is decoded from raw
// when first used (decode), and not changed afterwards (loadElement keeps pointers into
// it) but for seen and its key memo (rememberKey, under mu), which a key computed again
// replaces.
type cachedFile struct {
	ID     fileid.ID
	Parsed *parsedFile // nil for an entry this load made until decoded (head)
	Key    keyMemo     // the key last computed from this parse (Key "" for none)
	// Options is the digest of the option values the file was parsed with when it has
	// [[if]] blocks (optionScope.digest), "" when its parse reads no option: a
	// conditional file's parse is reused only under the same values.
	Options string
	// Kinds is the digest of its kind's project defaults when it was parsed ("" for
	// none): the parse is reused only under the same defaults.
	Kinds string
	// Includes are the files the element file included, with their identities when
	// it was parsed: the parse is reused only while each is unchanged.
	Includes []includedFile

	raw     string      // the stored form; "" for an entry this load made
	head    string      // for an entry this load made, the stored form but for the key memo
	keyAt   int         // where raw's key memo starts, once decoded
	mu      sync.Mutex  // held to set Key (rememberKey)
	rekeyed bool        // Key set by this load: raw's is stale
	once    sync.Once   // decodes raw
	whole   bool        // raw decoded without error (or nothing to decode)
	seen    atomic.Bool // looked up by this load (Save keeps others only while current)
	drop    bool        // left out by the Save under way; set and read by Save alone
}

// newCachedFile is an entry made by this load, of the parse pf: kept in its stored form
// (head), not as a copy of pf, which the element loaded from it holds the parts of
// (decode reads it back if the file is looked up again). Encoding it now, while the
// parse is in the CPU's cache, took a tenth of the CPU time of a first show of 100,000
// off Save, which read every parse again from all over the heap.
func newCachedFile(id fileid.ID, pf *parsedFile, options, kinds string, includes []includedFile) *cachedFile {
	c := &cachedFile{ID: id, Options: options, Kinds: kinds, Includes: includes}
	w := headWriters.Get().(*bincode.Writer)
	w.B = w.B[:0]
	writeHead(w, id, pf, options, kinds, includes)
	c.head = string(w.B)
	headWriters.Put(w)
	c.seen.Store(true)
	return c
}

// headWriters are newCachedFile's buffers.
var headWriters = sync.Pool{New: func() any { return &bincode.Writer{B: make([]byte, 0, 512)} }}

// parseCacheVersion changes whenever parsedFile or the checks parseElement makes change
// in a way a gantry build stamp would not show.
const parseCacheVersion = 16

// OpenParseCache opens the parse cache of the project at root, kept under dir (the
// gantry cache's loads/). A missing, damaged or foreign cache file is an empty cache.
func OpenParseCache(dir, root string) *ParseCache {
	sum := sha256.Sum256([]byte(root))
	pc := &ParseCache{path: filepath.Join(dir, hex.EncodeToString(sum[:16])), root: root, stamp: buildStamp(root),
		racy: fileid.RacyWindow, files: map[string]*cachedFile{}}
	data, err := cache.ReadLoadsFile(pc.path)
	if err != nil {
		return pc
	}
	if stamp, files, err := decodeParseCache(data); err == nil && stamp == pc.stamp {
		pc.files = files
	}
	return pc
}

// buildStamp names this gantry build and the project root, so that another build (whose
// parsing may differ) or a cache file copied from elsewhere is never trusted.
func buildStamp(root string) string {
	stamp := fmt.Sprintf("gantry-parse-cache v%d root=%s", parseCacheVersion, root)
	if info, ok := debug.ReadBuildInfo(); ok {
		stamp += " " + info.Main.Path + "@" + info.Main.Version
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" || s.Key == "vcs.modified" {
				stamp += " " + s.Key + "=" + s.Value
			}
		}
	}
	// A development build can change without a new revision: its executable's identity
	// tells builds apart.
	if exe, err := os.Executable(); err == nil {
		if fi, err := os.Stat(exe); err == nil {
			stamp += fmt.Sprintf(" exe=%s:%d:%d", exe, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return stamp
}

// identify stats path under dir. ok is false when the file cannot be stat'ed (the
// caller's read reports why) or the platform gives no inode. A regular file is stat'ed
// relative to dir's open directory in one system call where the platform allows
// (os.Root's own walk costs as much again); anything else goes through the root. A
// stat cannot read outside the project: a hit names an inode the cache parsed when it
// read it through the root.
func identify(dir elementDir, path string) (fileid.ID, bool) {
	if dir.dir != nil {
		if id, ok := fileid.At(dir.dir, path); ok {
			return id, true
		}
	}
	fi, err := dir.root.Stat(path)
	if err != nil {
		return fileid.ID{}, false
	}
	return fileid.FromInfo(fi)
}

// parseCacheName is the name the parse cache remembers the element file rel (under the
// project's root) as: as errors show it (display) for the top project's (dir.show ""),
// by its absolute path for a junction's sub-project's, so that no two projects' files
// share a name (a sub-project's files are not under the top project's root).
func parseCacheName(dir elementDir, root, rel, display string) string {
	if dir.show == "" {
		return display
	}
	if abs, err := filepath.Abs(filepath.Join(root, rel)); err == nil {
		return filepath.ToSlash(abs)
	}
	return display
}

// lookup returns what is remembered of the file at path under dir, remembered as name,
// when the file's identity is unchanged and, if its parse read options, it was parsed
// with scope's values; the files it included are under root, its project's root, or
// under the root of the project the junction path they were included through holds
// now (dir.origin.resolve), which must be the one it held then. A file it does not
// remember is not stat'ed: reading it takes its identity (readElementFile). A nil
// cache remembers nothing. The only error is errNeedProject, from the resolver.
func (pc *ParseCache) lookup(dir elementDir, root, path, name string, scope optionScope) (*cachedFile, bool, error) {
	if pc == nil {
		return nil, false, nil
	}
	c, ok, err := pc.find(dir, root, path, name, scope)
	if ok {
		pc.hits.Add(1)
	}
	return c, ok, err
}

func (pc *ParseCache) find(dir elementDir, root, path, name string, scope optionScope) (*cachedFile, bool, error) {
	pc.mu.RLock()
	c, hit := pc.files[name]
	pc.mu.RUnlock()
	if !hit {
		return nil, false, nil
	}
	c.seen.Store(true)
	if id, ok := identify(dir, path); !ok || c.id() != id || !c.decode() {
		return nil, false, nil
	}
	if c.Options != "" && c.Options != scope.digest || c.Kinds != scope.kindDigests[c.Parsed.Kind] {
		return nil, false, nil
	}
	for _, inc := range c.Includes {
		r := root
		if inc.Via != "" {
			if dir.origin.resolve == nil {
				return nil, false, nil
			}
			src, err := dir.origin.resolve(inc.Via, "")
			if errors.Is(err, errNeedProject) {
				return nil, false, err
			}
			if err != nil || src.root != inc.Root {
				return nil, false, nil // parsed again: the parse says what is wrong
			}
			r = inc.Root
		}
		if id, ok := pc.includedID(r, inc.Name); !ok || id != inc.ID {
			return nil, false, nil
		}
	}
	return c, true, nil
}

// includeStat is an included file's identity as a load stat'ed it.
type includeStat struct {
	id fileid.ID
	ok bool
}

// includedID is the identity of the included file name (a path from root, its project's root),
// stat'ed once per load: a ParseCache serves one load.
func (pc *ParseCache) includedID(root, name string) (fileid.ID, bool) {
	path := filepath.Join(root, filepath.FromSlash(name))
	if s, ok := pc.included.Load(path); ok {
		return s.(includeStat).id, s.(includeStat).ok
	}
	id, ok := fileid.Stat(path)
	pc.included.Store(path, includeStat{id, ok})
	return id, ok
}

// size is how many files the cache remembers (0 for a nil cache).
func (pc *ParseCache) size() int {
	if pc == nil {
		return 0
	}
	pc.mu.RLock()
	defer pc.mu.RUnlock()
	return len(pc.files)
}

// remember records name's parse at identity id (taken when the file was opened, before
// it was read: a change during the read gives the file a new identity, so it is parsed
// again); conditional says the parse read the option values of scope; includes are
// the files it included, with their identities (a file whose identity is unknown is
// not remembered). It returns the entry, nil when it made none.
func (pc *ParseCache) remember(name string, id fileid.ID, pf *parsedFile, conditional bool, scope optionScope, includes []includedFile) *cachedFile {
	if pc == nil || id == (fileid.ID{}) {
		return nil
	}
	for _, inc := range includes {
		if inc.ID == (fileid.ID{}) {
			return nil
		}
	}
	options := ""
	if conditional {
		options = scope.digest
	}
	c := newCachedFile(id, pf, options, scope.kindDigests[pf.Kind], includes)
	pc.mu.Lock()
	pc.files[name] = c
	pc.mu.Unlock()
	pc.dirty.Store(true)
	return c
}

// rememberKey records m as the key memo of c, the entry of an element's file at
// identity id, which the element was loaded from (loadedFrom): no lookup in the map, and
// no lock but the entry's (elements of one depth are keyed in parallel; two that share a
// file, through two junctions, may be among them). An entry read from the cache file is
// written from its fields from then on (rekeyed).
func (pc *ParseCache) rememberKey(c *cachedFile, id fileid.ID, m *keyMemo) {
	// An entry read is decoded by now (its element was loaded from it); one made by
	// this load has its identity without decoding its parse again.
	if pc == nil || c == nil || id == (fileid.ID{}) || c.raw != "" && !c.decode() || c.ID != id {
		return
	}
	c.mu.Lock()
	c.Key, c.rekeyed = *m, true
	c.mu.Unlock()
	pc.dirty.Store(true)
}

// Save writes the cache if this load parsed anything, atomically (temporary file, then
// rename). Files changed within fileid.RacyWindow of now are left out, and so are those
// this load did not look up unless they are still as the cache saw them (a stat each):
// an element file removed or changed since is forgotten, so the cache holds at most the
// project's files, not every version of every file it ever had. Errors are returned for
// a warning: a cache that cannot be written only costs speed.
func (pc *ParseCache) Save() error {
	if pc == nil || !pc.dirty.Load() {
		return nil
	}
	return cache.WriteLoadsFile(pc.path, "the element parse cache", func(w io.Writer, now int64) error {
		// Each entry is marked, not copied into a map of those kept (a cold load of
		// 100,000 elements made 3 MB of garbage so): the encoder counts the marks,
		// then writes the entries marked.
		for rel, c := range pc.files {
			c.drop = !pc.keeps(rel, c, now)
		}
		return encodeParseCache(w, pc.stamp, pc.files)
	})
}

// keeps says whether Save, at now, writes c, the entry of the file rel: not when the
// file is racily clean, nor when this load did not look it up and it changed or went.
func (pc *ParseCache) keeps(rel string, c *cachedFile, now int64) bool {
	id := c.id()
	if id.Racy(now, pc.racy) {
		return false
	}
	// An entry read from the cache file passed this when it was written, and its
	// included files' identities have not changed since.
	for _, inc := range c.Includes {
		if inc.ID.Racy(now, pc.racy) {
			return false
		}
	}
	if !c.seen.Load() {
		path := filepath.FromSlash(rel)
		if !filepath.IsAbs(path) { // a sub-project's file is named by its absolute path
			path = filepath.Join(pc.root, path)
		}
		if now, ok := fileid.Stat(path); !ok || now != id {
			return false
		}
	}
	return true
}
