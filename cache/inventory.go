package cache

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// blobID is a blob's SHA-256, as 32 bytes: the inventory of a large cache keys
// hundreds of thousands of blobs by it.
type blobID [32]byte

func idOf(hash string) (blobID, bool) {
	var id blobID
	if len(hash) != 64 {
		return id, false
	}
	_, err := hex.Decode(id[:], []byte(hash))
	return id, err == nil
}

// inventory is what the cache holds, read once for usage, cleanup and gc:
// every ref with its last use and the blobs it reaches, and every blob on disk
// with the space it takes.
type inventory struct {
	total     int64 // the whole cache directory on disk (hard links once)
	casBytes  int64 // cas/ on disk
	twins     int   // executable twins in exec/ (twin.go)
	twinBytes int64 // exec/ on disk
	blobIndex map[blobID]int32
	blobs     []blobInfo
	artifacts []*artifactInfo
	problems  []error // refs that could not be read (left out)
	// dirs counts the refs in each element's ref directory, which goes (with its
	// blocks) when its last ref does.
	dirs map[string]*refDir
	// entries is the space of each entry of tmp/, sources/tmp/, loads/ and
	// sources/junctions/ (what leftovers are made of), counting only what total
	// counted there: a file hard-linked from cas/ is the blob's, counted once,
	// and stays with it.
	entries map[string]int64
}

type refDir struct {
	refs int
	disk int64
}

type blobInfo struct {
	id     blobID
	disk   int64 // bytes on disk, its executable twin's included; 0 when neither is there
	onDisk bool  // the blob is in cas/
	twin   bool  // its executable twin is in exec/: it goes with the blob
	refs   int32 // artifacts that reach it
}

// present reports whether b takes space: the blob, or its twin alone.
func (b *blobInfo) present() bool { return b.onDisk || b.twin }

// artifactInfo is one ref in the inventory.
type artifactInfo struct {
	refName
	LastUse time.Time
	Success bool
	blobs   []int32 // every blob it reaches, each once
	refDisk int64   // the ref file on disk
}

// ArtifactRef names one artifact.
type ArtifactRef struct {
	Project string `json:"project"`
	Element string `json:"element"`
	Key     string `json:"key"`
}

// String is "project/element/key".
func (r ArtifactRef) String() string { return r.Project + "/" + r.Element + "/" + r.Key }

func (a *artifactInfo) ref() ArtifactRef {
	return ArtifactRef{Project: a.Project, Element: a.Element, Key: a.Key}
}

// blob returns the index of id, adding it when new.
func (inv *inventory) blob(id blobID) int32 {
	if i, ok := inv.blobIndex[id]; ok {
		return i
	}
	i := int32(len(inv.blobs))
	inv.blobs = append(inv.blobs, blobInfo{id: id})
	inv.blobIndex[id] = i
	return i
}

// size is the space the artifact's blobs take on disk (shared blobs included).
func (inv *inventory) size(a *artifactInfo) int64 {
	var n int64
	for _, b := range a.blobs {
		n += inv.blobs[b].disk
	}
	return n
}

// takeInventory measures the cache on disk and reads every ref of project (""
// for all) with everything it reaches; a cache not made yet is empty. Reading is
// safe beside other processes; deciding what to delete from it needs the
// exclusive lock.
func (c *Cache) takeInventory() (*inventory, error) {
	inv := &inventory{blobIndex: map[blobID]int32{}, dirs: map[string]*refDir{}, entries: map[string]int64{}}
	if err := c.measureDisk(inv); err != nil {
		return nil, err
	}
	refs, problems, err := c.listRefs("")
	if err != nil {
		return nil, err
	}
	inv.problems = problems
	dirs := map[Digest]*dirChildren{}
	for _, r := range refs {
		a, err := c.inventoryRef(inv, r, dirs)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since we listed it
		}
		if err != nil {
			inv.problems = append(inv.problems, err)
			if a == nil {
				continue
			}
		}
		inv.artifacts = append(inv.artifacts, a)
		for _, b := range a.blobs {
			inv.blobs[b].refs++
		}
		inv.refDir(a).refs++
	}
	return inv, nil
}

// inventoryRef reads one ref: its last use and the blobs it reaches. A ref
// whose record cannot be read gives an error and no artifact; a record whose
// trees are damaged gives both, the artifact holding what could be reached.
func (c *Cache) inventoryRef(inv *inventory, r refName, dirs map[Digest]*dirChildren) (*artifactInfo, error) {
	info, err := os.Stat(r.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading ref %s: %w", r.Path, err)
	}
	data, err := os.ReadFile(r.Path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("reading ref %s: %w", r.Path, err)
	}
	art, err := c.readRecord(data, r.Project, r.Element, r.Key)
	if err != nil {
		return nil, &CorruptRefError{Ref: r.Path, Err: err}
	}
	a := &artifactInfo{refName: r, LastUse: info.ModTime(), Success: art.Success, refDisk: diskSize(info)}
	seen := map[int32]bool{}
	add := func(d Digest) {
		id, ok := idOf(d.Hash)
		if !ok {
			return
		}
		if b := inv.blob(id); !seen[b] {
			seen[b] = true
			a.blobs = append(a.blobs, b)
		}
	}
	rd, _ := ParseDigest(strings.TrimSpace(string(data)))
	add(rd)
	if !art.Log.IsZero() {
		add(art.Log)
	}
	var firstErr error
	for _, root := range []Digest{art.Files, art.BuildTree} {
		if root.IsZero() {
			continue
		}
		if err := c.reachTree(root, dirs, add); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("artifact %s: %w", art.Name(), err)
		}
	}
	return a, firstErr
}

// dirChildren is a Directory's blobs, remembered by reachTree.
type dirChildren struct{ files, dirs []Digest }

// reachTree calls add on every blob of the tree at root: its Directories and
// files. Directories read once are remembered in dirs, so trees shared between
// artifacts are parsed once. It goes on past unreadable Directories.
func (c *Cache) reachTree(root Digest, dirs map[Digest]*dirChildren, add func(Digest)) error {
	var firstErr error
	var walk func(d Digest)
	walk = func(d Digest) {
		add(d)
		ch, ok := dirs[d]
		if !ok {
			dir, err := c.ReadDirectory(d)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			ch = &dirChildren{}
			for _, f := range dir.Files {
				ch.files = append(ch.files, DigestFromProto(f.Digest))
			}
			for _, sub := range dir.Directories {
				ch.dirs = append(ch.dirs, DigestFromProto(sub.Digest))
			}
			dirs[d] = ch
		}
		for _, f := range ch.files {
			add(f)
		}
		for _, sub := range ch.dirs {
			walk(sub)
		}
	}
	walk(root)
	return firstErr
}

// refDir is the book of a's ref directory, measured when first seen.
func (inv *inventory) refDir(a *artifactInfo) *refDir {
	dir := filepath.Dir(a.Path)
	d := inv.dirs[dir]
	if d == nil {
		d = &refDir{}
		if info, err := os.Stat(dir); err == nil {
			d.disk = diskSize(info)
		}
		inv.dirs[dir] = d
	}
	return d
}

// diskSize is the space a file takes on disk (its size where blocks are unknown).
func diskSize(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}

// measureDisk walks the cache directory: the space it takes (each inode once)
// and every blob of cas/ and twin of exec/ with its size on disk. A cache not
// made yet (At) takes none.
func (c *Cache) measureDisk(inv *inventory) error {
	seen := map[uint64]bool{}
	casRoot := filepath.Join(c.Root, CASDir) + string(filepath.Separator)
	execRoot := filepath.Join(c.Root, ExecDir) + string(filepath.Separator)
	// Entries of these directories may be leftovers (Cleanup's leftovers):
	// what is counted below one is booked to it. cas/ and exec/ are walked
	// before them (lexical order), so a blob linked from one is the blob's.
	leftoverRoots := []string{c.tmpPath() + string(filepath.Separator),
		filepath.Join(c.SourcesDir(), tmpDir) + string(filepath.Separator),
		LoadsDir(c.Root) + string(filepath.Separator),
		filepath.Join(c.SourcesDir(), junctionsDir) + string(filepath.Separator)}
	err := filepath.WalkDir(c.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == c.Root {
				if errors.Is(err, fs.ErrNotExist) {
					return fs.SkipAll
				}
				return err
			}
			return nil // vanished meanwhile (another gantry's temp file)
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		size := info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if st.Nlink > 1 && !d.IsDir() {
				if seen[st.Ino] {
					return nil
				}
				seen[st.Ino] = true
			}
			size = st.Blocks * 512
		}
		inv.total += size
		for _, r := range leftoverRoots {
			if rest, ok := strings.CutPrefix(p, r); ok {
				top, _, _ := strings.Cut(rest, string(filepath.Separator))
				inv.entries[r+top] += size
			}
		}
		if strings.HasPrefix(p, casRoot) && d.Type().IsRegular() {
			inv.casBytes += size
			if id, ok := idOf(d.Name()); ok {
				b := &inv.blobs[inv.blob(id)]
				b.disk, b.onDisk = b.disk+size, true
			}
		}
		if strings.HasPrefix(p, execRoot) && d.Type().IsRegular() {
			inv.twins++
			inv.twinBytes += size
			if id, ok := idOf(d.Name()); ok {
				b := &inv.blobs[inv.blob(id)]
				b.disk, b.twin = b.disk+size, true
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("measuring the cache %s: %w", c.Root, err)
	}
	return nil
}

// Touch records a use of an artifact (a build, pull, checkout or staging as a
// dependency) by setting its ref's modification time: cleanup removes the
// least recently used artifacts first. A missing ref is not an error.
//
// The time is the kernel's (utimes with no times), the clock that stamps a ref
// written by Commit. With time.Now() instead, a dependency a build staged could
// look used after that build's own ref, written a moment later but stamped by
// the filesystem's coarser clock, and the build's artifact would go first.
func (c *Cache) Touch(project, element, key string) error {
	p, err := c.RefPath(project, element, key)
	if err != nil {
		return err
	}
	if err := unix.Utimes(p, nil); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("recording the use of artifact %s/%s/%s: %w", project, element, key, err)
	}
	return nil
}
