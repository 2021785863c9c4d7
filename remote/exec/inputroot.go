package exec

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"google.golang.org/protobuf/proto"
)

// The input root of a remote build, merged from CAS Directory trees without a
// checkout: each Layer's tree is placed at its path, in order, by the staging
// rules of docs/staging.md (what actions' staging does on disk): where two
// layers have a path with other content the later one's wins and the path is
// an Overlap; identical files and symlinks are not overlaps; a file or symlink
// replaces an empty directory; a directory never replaces a file or symlink,
// nor a file a non-empty directory (a *ConflictError). Subtrees only one layer
// has are never read: a sysroot of one large artifact costs one Directory.

// Layer is one tree of an input root: an artifact's files, or the sources.
type Layer struct {
	Name  string       // the element, as users name it (for overlaps and conflicts)
	Files cache.Digest // root Directory
	At    string       // where its root goes in the input root: "/" or an absolute path
}

// Overlap is a path (absolute, in the input root) that Layers[By] replaced where
// Layers[Over] had other content.
type Overlap struct {
	Path     string
	By, Over int
}

// ConflictError is a path a layer has that cannot replace what the layers
// before it put there.
type ConflictError struct {
	Path       string // absolute, in the input root
	By, Over   string // the layer that failed, the one staged there before ("" for none)
	Have, Want string // "a file", "a symlink", "a directory", "a non-empty directory"
}

func (e *ConflictError) Error() string {
	who := "staged before"
	if e.Over != "" {
		who = "of " + e.Over
	}
	return fmt.Sprintf("staging %s: %s is %s %s, where %s has %s: a directory never replaces a file or symlink, nor a file a non-empty directory",
		e.By, e.Path, e.Have, who, e.By, e.Want)
}

// mnode is a directory of the tree being merged. Until expanded it is the
// Directory base of one layer, taken whole.
type mnode struct {
	base     cache.Digest // the Directory it stands for while not expanded
	owner    int          // the layer base is of (-1: made by the merge)
	expanded bool
	dirs     map[string]*mnode
	leaves   map[string]leaf
}

// leaf is a file or a symlink and the layer that put it there.
type leaf struct {
	file  *repb.FileNode
	link  *repb.SymlinkNode
	owner int
}

func (l leaf) same(o leaf) bool {
	if l.file != nil && o.file != nil {
		return proto.Equal(l.file.Digest, o.file.Digest) && l.file.IsExecutable == o.file.IsExecutable
	}
	return l.link != nil && o.link != nil && l.link.Target == o.link.Target
}

func (l leaf) kind() string {
	if l.file != nil {
		return "a file"
	}
	return "a symlink"
}

func newDir() *mnode {
	return &mnode{owner: -1, expanded: true, dirs: map[string]*mnode{}, leaves: map[string]leaf{}}
}

// merger merges layers into one tree in the local CAS.
type merger struct {
	c        *cache.Cache
	layers   []Layer
	overlaps []Overlap
}

// MergeTrees merges layers, in order, over empty directories at empty (paths
// such as /dev, /proc, /tmp), removes the paths of absent (the install root:
// the build makes it), stores the merged Directories in c and returns the
// root's digest and the overlaps in the order met.
func MergeTrees(c *cache.Cache, layers []Layer, empty, absent []string) (cache.Digest, []Overlap, error) {
	m := &merger{c: c, layers: layers}
	root := newDir()
	for _, p := range empty {
		if _, err := m.mkdirs(root, p, -1); err != nil {
			return cache.Digest{}, nil, err
		}
	}
	for i, l := range layers {
		at, err := m.mkdirs(root, l.At, i)
		if err != nil {
			return cache.Digest{}, nil, err
		}
		if err := m.mergeDir(at, l.Files, i, cleanAbs(l.At)); err != nil {
			return cache.Digest{}, nil, err
		}
	}
	for _, p := range absent {
		if err := m.remove(root, p); err != nil {
			return cache.Digest{}, nil, err
		}
	}
	d, err := m.store(root)
	return d, m.overlaps, err
}

func cleanAbs(p string) string { return path.Clean("/" + p) }

// parts splits an absolute path into its names ("/" has none).
func parts(p string) []string {
	p = strings.Trim(cleanAbs(p), "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// expand reads n's base Directory into its children, owned by n's owner.
func (m *merger) expand(n *mnode) error {
	if n.expanded {
		return nil
	}
	dir, err := m.c.ReadDirectory(n.base)
	if err != nil {
		return fmt.Errorf("reading a tree of %s: %w", m.layerName(n.owner), m.c.BlobReadFailed(n.base, err))
	}
	n.expanded, n.dirs, n.leaves = true, map[string]*mnode{}, map[string]leaf{}
	for _, d := range dir.Directories {
		n.dirs[d.Name] = &mnode{base: cache.DigestFromProto(d.Digest), owner: n.owner}
	}
	for _, f := range dir.Files {
		n.leaves[f.Name] = leaf{file: f, owner: n.owner}
	}
	for _, s := range dir.Symlinks {
		n.leaves[s.Name] = leaf{link: s, owner: n.owner}
	}
	return nil
}

func (m *merger) layerName(i int) string {
	if i < 0 {
		return ""
	}
	return m.layers[i].Name
}

// mkdirs returns the directory at p, making the missing ones (for layer i).
func (m *merger) mkdirs(root *mnode, p string, i int) (*mnode, error) {
	n := root
	abs := ""
	for _, name := range parts(p) {
		abs += "/" + name
		if err := m.expand(n); err != nil {
			return nil, err
		}
		if l, ok := n.leaves[name]; ok {
			return nil, &ConflictError{Path: abs, By: m.layerName(i), Over: m.layerName(l.owner), Have: l.kind(), Want: "a directory"}
		}
		sub := n.dirs[name]
		if sub == nil {
			sub = newDir()
			n.dirs[name] = sub
		}
		n = sub
	}
	return n, nil
}

// mergeDir merges the Directory d of layer i into n, at abs.
func (m *merger) mergeDir(n *mnode, d cache.Digest, i int, abs string) error {
	if n.expanded && len(n.dirs) == 0 && len(n.leaves) == 0 {
		*n = mnode{base: d, owner: i} // empty so far: take the layer's whole
		return nil
	}
	if !n.expanded && n.base == d {
		n.owner = i // identical: no overlap
		return nil
	}
	if err := m.expand(n); err != nil {
		return err
	}
	dir, err := m.c.ReadDirectory(d)
	if err != nil {
		return fmt.Errorf("reading a tree of %s: %w", m.layerName(i), m.c.BlobReadFailed(d, err))
	}
	for _, sub := range dir.Directories {
		p := path.Join(abs, sub.Name)
		if l, ok := n.leaves[sub.Name]; ok {
			return &ConflictError{Path: p, By: m.layerName(i), Over: m.layerName(l.owner), Have: l.kind(), Want: "a directory"}
		}
		have := n.dirs[sub.Name]
		if have == nil {
			n.dirs[sub.Name] = &mnode{base: cache.DigestFromProto(sub.Digest), owner: i}
			continue
		}
		if err := m.mergeDir(have, cache.DigestFromProto(sub.Digest), i, p); err != nil {
			return err
		}
	}
	for _, f := range dir.Files {
		if err := m.putLeaf(n, f.Name, leaf{file: f, owner: i}, path.Join(abs, f.Name)); err != nil {
			return err
		}
	}
	for _, s := range dir.Symlinks {
		if err := m.putLeaf(n, s.Name, leaf{link: s, owner: i}, path.Join(abs, s.Name)); err != nil {
			return err
		}
	}
	return nil
}

// putLeaf puts a file or symlink of layer l.owner at name in n.
func (m *merger) putLeaf(n *mnode, name string, l leaf, abs string) error {
	if sub, ok := n.dirs[name]; ok {
		empty, err := m.isEmpty(sub)
		if err != nil {
			return err
		}
		if !empty {
			return &ConflictError{Path: abs, By: m.layerName(l.owner), Over: m.layerName(sub.owner), Have: "a non-empty directory", Want: l.kind()}
		}
		delete(n.dirs, name)
		n.leaves[name] = l
		m.overlaps = append(m.overlaps, Overlap{Path: abs, By: l.owner, Over: sub.owner})
		return nil
	}
	if old, ok := n.leaves[name]; ok && !old.same(l) {
		m.overlaps = append(m.overlaps, Overlap{Path: abs, By: l.owner, Over: old.owner})
	}
	n.leaves[name] = l
	return nil
}

func (m *merger) isEmpty(n *mnode) (bool, error) {
	if err := m.expand(n); err != nil {
		return false, err
	}
	return len(n.dirs) == 0 && len(n.leaves) == 0, nil
}

// remove takes the entry at p out of the tree, if there is one.
func (m *merger) remove(root *mnode, p string) error {
	names := parts(p)
	if len(names) == 0 {
		return nil
	}
	n := root
	for _, name := range names[:len(names)-1] {
		if err := m.expand(n); err != nil {
			return err
		}
		if n = n.dirs[name]; n == nil {
			return nil
		}
	}
	if err := m.expand(n); err != nil {
		return err
	}
	last := names[len(names)-1]
	delete(n.dirs, last)
	delete(n.leaves, last)
	return nil
}

// store writes the Directories of n and returns its digest.
func (m *merger) store(n *mnode) (cache.Digest, error) {
	if !n.expanded {
		return n.base, nil
	}
	dir := &repb.Directory{}
	for _, name := range slices.Sorted(maps.Keys(n.dirs)) {
		d, err := m.store(n.dirs[name])
		if err != nil {
			return cache.Digest{}, err
		}
		dir.Directories = append(dir.Directories, &repb.DirectoryNode{Name: name, Digest: d.Proto()})
	}
	for _, name := range slices.Sorted(maps.Keys(n.leaves)) {
		l := n.leaves[name]
		if l.file != nil {
			dir.Files = append(dir.Files, l.file)
		} else {
			dir.Symlinks = append(dir.Symlinks, l.link)
		}
	}
	return m.c.PutDirectory(dir)
}
