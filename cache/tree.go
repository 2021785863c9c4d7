package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
)

// Trees are stored as REAPI Directory messages, one blob per directory,
// children named by digest: a Merkle tree, so a remote REAPI cache can hold
// them unchanged. Entries are sorted by name within each list, files keep
// their executable bit, symlinks are kept as symlinks, empty directories are
// kept; nothing else (mtimes, owners, other mode bits) is recorded, so the
// same content always gives the same root digest.

// Tree entry types, as in TreeEntry.Type.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
)

// TreeEntry is one entry of a stored tree, as visited by WalkTree.
type TreeEntry struct {
	Path       string // slash-separated, relative to the root
	Type       string // TypeFile, TypeDir or TypeSymlink
	Size       int64  // files only
	Executable bool   // files only
	Target     string // symlinks only
	Digest     Digest // the file's blob, or the directory's Directory blob
}

// CheckoutOptions controls Checkout.
type CheckoutOptions struct {
	// Hardlink links files to their read-only blobs instead of copying them,
	// and executables to their blobs' executable twins (twin.go), falling back
	// to a copy where linking fails (another filesystem, too many links).
	// Hard-linked files must never be written to: that would change the cache.
	// Use it only where nothing will write to dest (a sysroot mounted
	// read-only, a tree only read by gantry); without it files are copied, as
	// reflinks where the filesystem can.
	Hardlink bool

	// Replace, when set, lets the checkout replace what dest holds where the tree
	// has other content: a file or symlink other than the tree's, or an empty
	// directory, where the tree has a file or a symlink. It is called with the
	// path (slash-separated, relative to dest) before anything is removed, from
	// several goroutines at once; an error stops the checkout. The old entry is
	// removed (unlinked: a hard link's blob is never written to) and the tree's
	// made. A directory of the tree where dest has something else, or a file of
	// the tree where dest has a non-empty directory, is never replaced: a
	// *ConflictError. Without Replace, any path that differs is one.
	Replace func(rel string) error

	// Trusted checks each file's blob by its type, size and mode (one fstat or
	// lstat) instead of hashing its content, and copies with the kernel's
	// copy_file_range: for staging a build's dependencies, whose blobs were
	// hashed when they entered the cache and have been read-only since (see
	// integrity.go for what that catches and what it does not). A blob whose
	// mode says it was made writable is hashed as without it. Directory blobs
	// are hashed either way.
	Trusted bool
}

// ioParallelism bounds the goroutines copying files in and out of the cache.
func ioParallelism() int { return max(4, runtime.GOMAXPROCS(0)) }

// MarshalDirectory is the deterministic serialization of d, the bytes its
// digest is taken of.
func MarshalDirectory(d *repb.Directory) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(d)
}

// PutDirectory stores one Directory message, which must already be valid
// (sorted, children stored first).
func (c *Cache) PutDirectory(dir *repb.Directory) (Digest, error) {
	data, err := MarshalDirectory(dir)
	if err != nil {
		return Digest{}, fmt.Errorf("encoding directory: %w", err)
	}
	return c.PutBlob(data)
}

// EmptyTree stores the empty directory and returns its digest: the Files of
// artifacts that install nothing.
func (c *Cache) EmptyTree() (Digest, error) {
	return c.PutDirectory(&repb.Directory{})
}

// ReadDirectory reads, decodes and validates one Directory blob. The Directory
// returned must not be changed: with RememberDirectories it is shared.
func (c *Cache) ReadDirectory(d Digest) (*repb.Directory, error) {
	if dir := c.dirs.get(d); dir != nil {
		return dir, nil
	}
	data, err := c.ReadBlob(d)
	if err != nil {
		return nil, err
	}
	dir := &repb.Directory{}
	if err := proto.Unmarshal(data, dir); err != nil {
		return nil, fmt.Errorf("decoding directory %s: %v: %w", d, err, ErrCorrupt)
	}
	if err := ValidateDirectory(dir); err != nil {
		return nil, fmt.Errorf("directory %s: %v: %w", d, err, ErrCorrupt)
	}
	c.dirs.put(d, dir)
	return dir, nil
}

// RememberDirectories makes c keep every Directory blob it reads and checks, and
// return it from then on without reading it again: for a Cache that serves one
// job (Attach), whose staging reads the same Directories once per dependency and
// per use — an empty tree, say, dozens of times — and whose commit audits its own
// tree again. Each blob is still read, hashed and decoded once, the
// first time the job needs it, so a missing or damaged one is still found.
func (c *Cache) RememberDirectories() { c.dirs = &dirMemo{m: map[Digest]*repb.Directory{}} }

// dirMemo is RememberDirectories' memory; a nil *dirMemo remembers nothing.
type dirMemo struct {
	mu sync.Mutex
	m  map[Digest]*repb.Directory
}

func (m *dirMemo) get(d Digest) *repb.Directory {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[d]
}

func (m *dirMemo) put(d Digest, dir *repb.Directory) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[d] = dir
}

// validName reports whether name may be a tree entry: one path component.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." &&
		!strings.ContainsAny(name, "/\x00") && utf8.ValidString(name)
}

// ValidateDirectory checks what REAPI requires and what checking out safely
// needs: valid, unique names, each list sorted, valid digests.
func ValidateDirectory(dir *repb.Directory) error {
	seen := make(map[string]bool, len(dir.Files)+len(dir.Directories)+len(dir.Symlinks))
	check := func(i int, name, prev string) error {
		if !validName(name) {
			return fmt.Errorf("invalid entry name %q", name)
		}
		if i > 0 && name <= prev {
			return fmt.Errorf("entries not sorted by name at %q", name)
		}
		if seen[name] {
			return fmt.Errorf("duplicate entry %q", name)
		}
		seen[name] = true
		return nil
	}
	for i, f := range dir.Files {
		if err := check(i, f.Name, nodeName(dir.Files, i-1)); err != nil {
			return err
		}
		if err := DigestFromProto(f.Digest).Validate(); err != nil {
			return fmt.Errorf("file %q: %w", f.Name, err)
		}
	}
	for i, d := range dir.Directories {
		if err := check(i, d.Name, nodeName(dir.Directories, i-1)); err != nil {
			return err
		}
		if err := DigestFromProto(d.Digest).Validate(); err != nil {
			return fmt.Errorf("directory %q: %w", d.Name, err)
		}
	}
	for i, s := range dir.Symlinks {
		if err := check(i, s.Name, nodeName(dir.Symlinks, i-1)); err != nil {
			return err
		}
		if s.Target == "" {
			return fmt.Errorf("symlink %q has an empty target", s.Name)
		}
	}
	return nil
}

// nodeName returns the name of nodes[i], or "" when i is out of range.
func nodeName[N interface{ GetName() string }](nodes []N, i int) string {
	if i < 0 || i >= len(nodes) {
		return ""
	}
	return nodes[i].GetName()
}

// scannedDir is a directory being captured by StoreTree: its Directory is
// complete once the file puts have finished and the subdirectories' digests
// are filled in.
type scannedDir struct {
	dir     *repb.Directory
	subdirs []*scannedDir // parallel to dir.Directories
}

// StoreTree captures the directory tree at dir into the cache and returns the
// digest of its root Directory. File contents are copied (never linked), so
// later changes to dir cannot reach the cache. Files other than regular files,
// directories and symlinks are an error.
func (c *Cache) StoreTree(dir string) (Digest, error) {
	return c.storeTree(dir, c.putFile)
}

// TakeTree is StoreTree for a tree nobody needs afterwards, such as a finished
// build's install root: dir must be on the cache's filesystem (under tmp/), and
// its files are moved into cas/ rather than copied wherever nothing else can
// reach them (see takeFile), so committing costs a hash and a rename per file
// and no second write of its bytes. dir's directories and symlinks stay; its
// files may be gone. Later changes to what is left of dir cannot reach the
// cache.
func (c *Cache) TakeTree(dir string) (Digest, error) {
	return c.storeTree(dir, c.takeFile)
}

// storeFunc stores one regular file as a blob and returns its digest and mode.
type storeFunc func(path string) (Digest, fs.FileMode, error)

func (c *Cache) storeTree(dir string, put storeFunc) (Digest, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return Digest{}, fmt.Errorf("storing tree: %w", err)
	}
	if !fi.IsDir() {
		return Digest{}, fmt.Errorf("storing tree %s: not a directory", dir)
	}
	var g errgroup.Group
	g.SetLimit(ioParallelism())
	root, scanErr := c.scanDir(&g, dir, put)
	putErr := g.Wait() // always wait: no goroutine outlives the call
	if err := firstErr(scanErr, putErr); err != nil {
		return Digest{}, fmt.Errorf("storing tree %s: %w", dir, err)
	}
	d, err := c.finishDir(root)
	if err != nil {
		return Digest{}, fmt.Errorf("storing tree %s: %w", dir, err)
	}
	return d, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// scanDir records dir's entries and starts storing its files on g.
func (c *Cache) scanDir(g *errgroup.Group, dir string, put storeFunc) (*scannedDir, error) {
	entries, err := os.ReadDir(dir) // sorted by name, as REAPI requires
	if err != nil {
		return nil, err
	}
	sd := &scannedDir{dir: &repb.Directory{}}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !utf8.ValidString(e.Name()) {
			return nil, fmt.Errorf("%s: file name is not valid UTF-8", p)
		}
		switch t := e.Type(); {
		case t.IsRegular():
			fn := &repb.FileNode{Name: e.Name()}
			sd.dir.Files = append(sd.dir.Files, fn)
			g.Go(func() error {
				d, mode, err := put(p)
				if err != nil {
					return err
				}
				fn.Digest = d.Proto()
				fn.IsExecutable = mode&0o111 != 0
				return nil
			})
		case t.IsDir():
			sub, err := c.scanDir(g, p, put)
			if err != nil {
				return nil, err
			}
			sd.dir.Directories = append(sd.dir.Directories, &repb.DirectoryNode{Name: e.Name()})
			sd.subdirs = append(sd.subdirs, sub)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, err
			}
			if !utf8.ValidString(target) {
				return nil, fmt.Errorf("%s: symlink target is not valid UTF-8", p)
			}
			sd.dir.Symlinks = append(sd.dir.Symlinks, &repb.SymlinkNode{Name: e.Name(), Target: target})
		default:
			return nil, fmt.Errorf("%s: cannot store a %s, only files, directories and symlinks", p, t.Type())
		}
	}
	return sd, nil
}

// finishDir stores sd's subdirectories and then sd, bottom-up.
func (c *Cache) finishDir(sd *scannedDir) (Digest, error) {
	for i, sub := range sd.subdirs {
		d, err := c.finishDir(sub)
		if err != nil {
			return Digest{}, err
		}
		sd.dir.Directories[i].Digest = d.Proto()
	}
	return c.PutDirectory(sd.dir)
}

// Checkout materialises the tree root at dest, creating dest if needed. dest
// may already hold files (several artifacts are staged into one sysroot): a
// path that already exists is accepted if it is identical (same content and
// executable bit, same symlink target, or a directory where the tree has a
// directory), replaced where opts.Replace allows it, and is otherwise an error
// naming it (*ConflictError). Symlinks already in dest are never followed, so
// nothing outside dest is written or removed. Copied files get mode 0644 or 0755. On error dest may
// be partly populated.
//
// Every file's content is hashed as it is checked out (copied, or read once
// through the new hard link), but for opts.Trusted, and every Directory blob
// when it is read. A blob that is missing or does not match its digest gives
// an error wrapping a *BlobError; a corrupt blob has then been removed from
// the CAS.
func (c *Cache) Checkout(root Digest, dest string, opts CheckoutOptions) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("checking out %s: %w", root, err)
	}
	var g errgroup.Group
	g.SetLimit(ioParallelism())
	walkErr := c.checkoutDir(&g, root, dest, "", opts)
	fileErr := g.Wait() // always wait: no goroutine outlives the call
	if err := firstErr(walkErr, fileErr); err != nil {
		return fmt.Errorf("checking out %s into %s: %w", root, dest, err)
	}
	return nil
}

// checkoutDir checks out the Directory d, at treePath in the tree, into dir.
func (c *Cache) checkoutDir(g *errgroup.Group, d Digest, dir, treePath string, opts CheckoutOptions) error {
	tree, err := c.ReadDirectory(d)
	if err != nil {
		return c.blobError(d, treePath, err)
	}
	for _, f := range tree.Files {
		p, rel := filepath.Join(dir, f.Name), path.Join(treePath, f.Name)
		g.Go(func() error { return c.blobError(DigestFromProto(f.Digest), rel, c.checkoutFile(f, p, rel, opts)) })
	}
	for _, s := range tree.Symlinks {
		p, rel := filepath.Join(dir, s.Name), path.Join(treePath, s.Name)
		if err := c.checkoutSymlink(s, p, rel, opts); err != nil {
			return err
		}
	}
	for _, sub := range tree.Directories {
		p := filepath.Join(dir, sub.Name)
		if err := os.Mkdir(p, 0o755); err != nil {
			fi, lerr := os.Lstat(p)
			if lerr != nil || !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("creating directory %s: %w", p, err)
			}
			if !fi.IsDir() {
				return &ConflictError{Path: p, Rel: path.Join(treePath, sub.Name), Have: entryKind(fi), Want: "a directory"}
			}
		}
		if err := c.checkoutDir(g, DigestFromProto(sub.Digest), p, path.Join(treePath, sub.Name), opts); err != nil {
			return err
		}
	}
	return nil
}

// ConflictError is a path of a tree that Checkout cannot stage over what its
// destination holds there.
type ConflictError struct {
	Path string // in the destination
	Rel  string // slash-separated, relative to the destination
	Have string // what the destination has there: "a file", "a directory", "a non-empty directory", …
	Want string // what the tree has there: "a file", "a symlink" or "a directory"
}

func (e *ConflictError) Error() string {
	msg := e.Path + " already exists and differs from the tree being checked out"
	if e.Have != e.Want {
		msg += " (" + e.Have + " there, " + e.Want + " in the tree)"
	}
	return msg
}

// entryKind names what fi is, as ConflictError says it.
func entryKind(fi fs.FileInfo) string {
	switch {
	case fi.IsDir():
		return "a directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		return "a symlink"
	case fi.Mode().IsRegular():
		return "a file"
	}
	return "a special file"
}

// replaceExisting removes what is at p (rel in the tree), which differs from the
// tree's want ("a file", "a symlink"), where opts.Replace allows it.
func replaceExisting(p, rel, want string, opts CheckoutOptions) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	conflict := &ConflictError{Path: p, Rel: rel, Have: entryKind(fi), Want: want}
	if opts.Replace == nil {
		return conflict
	}
	if fi.IsDir() {
		if d, err := os.Open(p); err == nil {
			names, _ := d.Readdirnames(1)
			d.Close()
			if len(names) > 0 {
				conflict.Have = "a non-empty directory"
				return conflict
			}
		}
	}
	if err := opts.Replace(rel); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil { // a directory filled meanwhile is not removed
		return fmt.Errorf("replacing %s: %w", p, err)
	}
	return nil
}

// checkoutSymlink makes the symlink s at p, rel in the tree.
func (c *Cache) checkoutSymlink(s *repb.SymlinkNode, p, rel string, opts CheckoutOptions) error {
	err := os.Symlink(s.Target, p)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return wrapSymlink(p, s.Target, err)
	}
	if target, rerr := os.Readlink(p); rerr == nil && target == s.Target {
		return nil // identical symlink already there
	}
	if err := replaceExisting(p, rel, "a symlink", opts); err != nil {
		return err
	}
	return wrapSymlink(p, s.Target, os.Symlink(s.Target, p))
}

func wrapSymlink(p, target string, err error) error {
	if err != nil {
		return fmt.Errorf("creating symlink %s -> %s: %w", p, target, err)
	}
	return nil
}

func (c *Cache) checkoutFile(f *repb.FileNode, p, rel string, opts CheckoutOptions) error {
	d := DigestFromProto(f.Digest)
	if opts.Hardlink {
		src, err := c.linkFile(d, f.IsExecutable, p)
		if err == nil {
			if opts.Trusted {
				err = c.checkLinkedTrusted(d, src, p, linkedMode(f.IsExecutable))
			} else {
				err = c.checkLinked(d, src, p)
			}
			if f.IsExecutable && errors.Is(err, ErrCorrupt) {
				// The twin is damaged, which says nothing of its blob: drop
				// it (the next linked staging makes it again) and copy.
				os.Remove(src)
				return c.copyFile(f, p, rel, opts)
			}
			return err
		}
		if errors.Is(err, fs.ErrExist) {
			return c.existingFile(f, p, rel, opts)
		}
		// Otherwise (EXDEV, EMLINK, EPERM, a missing blob): copy, which
		// also reports a missing blob clearly.
	}
	return c.copyFile(f, p, rel, opts)
}

// linkedMode is the mode of what a file is linked to: its blob, or for an
// executable its twin.
func linkedMode(executable bool) uint32 {
	if executable {
		return twinMode
	}
	return blobMode
}

// copyFile copies blob f to the new file p (rel in the tree): copyTrusted or
// copyBlob, as opts says.
func (c *Cache) copyFile(f *repb.FileNode, p, rel string, opts CheckoutOptions) error {
	if opts.Trusted {
		return c.copyTrusted(f, p, rel, opts)
	}
	return c.copyBlob(f, p, rel, opts)
}

// checkLinked checks the content of blob d through p, a hard link to src (the
// blob or its twin) just made; the link to damaged content is removed.
func (c *Cache) checkLinked(d Digest, src, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	defer f.Close()
	got, err := DigestOfReader(f)
	if err != nil {
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	if got != d {
		os.Remove(p)
		return fmt.Errorf("checking out %s: %w", p, Mismatch(d, got, src))
	}
	return nil
}

// copyBlob copies blob f to the new file p (rel in the tree), as a reflink where the filesystem
// can, and checks that what was copied is what f names.
func (c *Cache) copyBlob(f *repb.FileNode, p, rel string, opts CheckoutOptions) error {
	d := DigestFromProto(f.Digest)
	src, err := c.OpenBlob(d)
	if err != nil {
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	defer src.Close()
	dst, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return c.existingFile(f, p, rel, opts)
	}
	if err != nil {
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	mode := fs.FileMode(0o644)
	if f.IsExecutable {
		mode = 0o755
	}
	var got Digest
	switch {
	case cloneFile(dst, src) == nil:
		got, err = DigestOfReader(src) // the clone shares these bytes
	default:
		got, err = copyHashed(dst, src)
	}
	if err == nil && got != d {
		err = Mismatch(d, got, src.Name())
	}
	if err == nil {
		err = dst.Chmod(mode)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p)
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	return nil
}

// existingFile accepts a file already at p (rel in the tree) if it is identical
// to f, and otherwise replaces it where opts.Replace allows.
func (c *Cache) existingFile(f *repb.FileNode, p, rel string, opts CheckoutOptions) error {
	d := DigestFromProto(f.Digest)
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("checking out %s: %w", p, err)
	}
	same := fi.Mode().IsRegular() && (fi.Mode()&0o111 != 0) == f.IsExecutable && fi.Size() == d.Size
	if same {
		src := c.BlobPath(d)
		if f.IsExecutable {
			src = c.twinPath(d)
		}
		if bi, err := os.Stat(src); err != nil || !os.SameFile(fi, bi) {
			got, err := hashFile(p)
			same = err == nil && got == d
		}
	}
	if same {
		return nil
	}
	if err := replaceExisting(p, rel, "a file", opts); err != nil {
		return err
	}
	opts.Replace = nil // replaced once: anything there again is an error
	return c.checkoutFile(f, p, rel, opts)
}

func hashFile(p string) (Digest, error) {
	f, err := os.Open(p)
	if err != nil {
		return Digest{}, err
	}
	defer f.Close()
	return DigestOfReader(f)
}

// WalkTree calls fn for every entry of the tree root, depth first, a
// directory before its contents, entries of a directory in name order. As
// with filepath.WalkDir, fn may return fs.SkipDir to skip a directory's
// contents (or, on another entry, the rest of its directory) and fs.SkipAll
// to stop; any other error stops the walk and is returned as is.
func (c *Cache) WalkTree(root Digest, fn func(TreeEntry) error) error {
	err := c.walkTree(root, "", fn)
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

func (c *Cache) walkTree(d Digest, prefix string, fn func(TreeEntry) error) error {
	dir, err := c.ReadDirectory(d)
	if err != nil {
		if prefix != "" {
			return fmt.Errorf("walking tree at %s: %w", prefix, err)
		}
		return fmt.Errorf("walking tree: %w", err)
	}
	entries := make([]TreeEntry, 0, len(dir.Files)+len(dir.Directories)+len(dir.Symlinks))
	for _, f := range dir.Files {
		fd := DigestFromProto(f.Digest)
		entries = append(entries, TreeEntry{Path: path.Join(prefix, f.Name), Type: TypeFile, Size: fd.Size, Executable: f.IsExecutable, Digest: fd})
	}
	for _, s := range dir.Symlinks {
		entries = append(entries, TreeEntry{Path: path.Join(prefix, s.Name), Type: TypeSymlink, Target: s.Target})
	}
	for _, sub := range dir.Directories {
		entries = append(entries, TreeEntry{Path: path.Join(prefix, sub.Name), Type: TypeDir, Digest: DigestFromProto(sub.Digest)})
	}
	slices.SortFunc(entries, func(a, b TreeEntry) int { return strings.Compare(a.Path, b.Path) })
	for _, e := range entries {
		err := fn(e)
		if errors.Is(err, fs.SkipDir) {
			if e.Type == TypeDir {
				continue
			}
			return nil
		}
		if err != nil {
			return err
		}
		if e.Type == TypeDir {
			if err := c.walkTree(e.Digest, e.Path, fn); err != nil {
				return err
			}
		}
	}
	return nil
}
