package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// Kind names a source kind.
type Kind string

const (
	Local  Kind = "local"
	Tar    Kind = "tar"
	Git    Kind = "git"
	Remote Kind = "remote"
	Patch  Kind = "patch"
)

// Kinds returns the known kinds, for error messages.
func Kinds() []string { return slices.Clone(kinds) }

var kinds = []string{string(Local), string(Tar), string(Git), string(Remote), string(Patch)}

// keysByKind lists the keys each kind accepts besides "kind".
var keysByKind = map[Kind][]string{
	Local:  {"path", "directory"},
	Tar:    {"url", "ref", "track", "directory", "base-dir"},
	Remote: {"url", "ref", "track", "directory", "filename", "executable"},
	Git:    {"url", "ref", "track", "directory", "submodules", "checkout-dot-git"},
	Patch:  {"path", "directory", "strip-level"},
}

// AllowedKeys returns the keys valid for kind k (including "kind"), or nil for an unknown kind.
func AllowedKeys(k Kind) []string {
	keys, ok := keysByKind[k]
	if !ok {
		return nil
	}
	return append([]string{"kind"}, keys...)
}

// Spec is one [[sources]] entry of an element, as declared.
type Spec struct {
	Kind       Kind   `json:"kind"`
	URL        string `json:"url,omitempty"`
	Path       string `json:"path,omitempty"` // local and patch: relative to the project root
	Ref        string `json:"ref,omitempty"`  // inline ref, or the one from gantry.lock
	Track      string `json:"track,omitempty"`
	Directory  string `json:"directory,omitempty"` // where in the build root to stage
	BaseDir    string `json:"base-dir,omitempty"`  // tar: "*" strips one top-level directory
	Filename   string `json:"filename,omitempty"`
	Executable bool   `json:"executable,omitempty"`
	Submodules bool   `json:"submodules,omitempty"`
	DotGit     bool   `json:"checkout-dot-git,omitempty"`
	StripLevel int    `json:"strip-level,omitempty"`
	// Pinned: the ref is written inline in the element, so `track` leaves it alone.
	Pinned bool `json:"pinned,omitempty"`
	// Upstream is URL with its alias expanded ("" when it has none), Mirrors the URLs
	// of the configured mirrors for it, in the order tried (Resolve). Neither enters
	// the key: URL, as written, does.
	Upstream string   `json:"upstream,omitempty"`
	Mirrors  []string `json:"mirrors,omitempty"`
}

// Trackable reports whether `gantry track` resolves a ref for the source: a versioned
// source whose ref is not pinned inline (git follows Track, or the remote's HEAD; tar and
// remote download the URL).
func (s *Spec) Trackable() bool { return s.NeedsRef() && !s.Pinned }

// NeedsRef reports whether the kind is versioned by a ref (as opposed to by content).
func (s *Spec) NeedsRef() bool { return s.Kind == Tar || s.Kind == Git || s.Kind == Remote }

// Describe names the source for messages: "tar https://…", "local files/app".
func (s *Spec) Describe() string {
	if s.URL != "" {
		return fmt.Sprintf("%s %s", s.Kind, s.URL)
	}
	return fmt.Sprintf("%s %s", s.Kind, s.Path)
}

// UniqueKey returns the string that identifies exactly what this source stages: kind, url
// and ref for versioned kinds, a content hash for local files and patches. projectRoot
// resolves relative paths. It fails for a versioned source without a ref.
func (s *Spec) UniqueKey(projectRoot string) (string, error) {
	switch s.Kind {
	case Local, Patch:
		p, err := ProjectPath(projectRoot, s.Path)
		if err != nil {
			return "", err
		}
		h, err := HashPath(p)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s:%s:dir=%s:strip=%d", s.Kind, h, s.Directory, s.StripLevel), nil
	default:
		if s.Ref == "" {
			return "", fmt.Errorf("%s has no ref", s.Describe())
		}
		return fmt.Sprintf("%s:%s@%s:dir=%s:base=%s:file=%s:x=%t:sub=%t:git=%t",
			s.Kind, s.URL, s.Ref, s.Directory, s.BaseDir, s.Filename, s.Executable, s.Submodules, s.DotGit), nil
	}
}

// ProjectPath returns the host path of p (relative to projectRoot) after checking that it
// stays inside the project: no "..", and no symbolic link on the way that leads outside
// (or is absolute), which the kernel enforces through os.Root. A path that does not exist
// is returned as it is, for the caller's own error.
func ProjectPath(projectRoot, p string) (string, error) {
	r, err := os.OpenRoot(projectRoot)
	if err != nil {
		return "", fmt.Errorf("opening the project directory: %w", err)
	}
	defer r.Close()
	if _, err := r.Stat(filepath.FromSlash(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("path %q reaches outside the project %s (through a symbolic link or '..'): %w", p, projectRoot, err)
	}
	return filepath.Join(projectRoot, filepath.FromSlash(p)), nil
}

// HashPath hashes a file or directory tree deterministically: relative paths, types, the
// executable bit, symlink targets and contents. Other mode bits (umask noise) and times
// do not count.
func HashPath(root string) (string, error) {
	h := sha256.New()
	if err := eachEntry(root, func(p, rel string, info fs.FileInfo) error { return hashEntry(h, p, rel, info) }); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// HashFiles hashes each entry of a file or tree on its own, as HashPath sees it: its
// relative path -> a short hash, so that a changed key can name the file that changed.
func HashFiles(root string) (map[string]string, error) {
	files := map[string]string{}
	err := eachEntry(root, func(p, rel string, info fs.FileInfo) error {
		h := sha256.New()
		if err := hashEntry(h, p, rel, info); err != nil {
			return err
		}
		files[rel] = hex.EncodeToString(h.Sum(nil))[:16]
		return nil
	})
	return files, err
}

// eachEntry calls f on root ("." when it is a file) or on every entry of the tree at
// root, in sorted order.
func eachEntry(root string, f func(p, rel string, info fs.FileInfo) error) error {
	info, err := os.Lstat(root)
	if err != nil {
		return fmt.Errorf("hashing local source: %w", err)
	}
	if !info.IsDir() {
		return f(root, ".", info)
	}
	var paths []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("hashing local source: %w", err)
	}
	sort.Strings(paths)
	for _, p := range paths {
		info, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("hashing local source: %w", err)
		}
		rel, _ := filepath.Rel(root, p)
		if err := f(p, filepath.ToSlash(rel), info); err != nil {
			return err
		}
	}
	return nil
}

func hashEntry(h io.Writer, p, rel string, info fs.FileInfo) error {
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("hashing local source: %w", err)
		}
		fmt.Fprintf(h, "L %q %q\n", rel, target)
	case info.IsDir():
		fmt.Fprintf(h, "D %q\n", rel)
	case info.Mode().IsRegular():
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("hashing local source: %w", err)
		}
		defer f.Close()
		c := sha256.New()
		if _, err := io.Copy(c, f); err != nil {
			return fmt.Errorf("hashing local source %s: %w", p, err)
		}
		fmt.Fprintf(h, "F %q %t %x\n", rel, info.Mode()&0o111 != 0, c.Sum(nil))
	default:
		return fmt.Errorf("hashing local source: %s is a %s, which cannot be a source", p, info.Mode().Type())
	}
	return nil
}

// IsKnown reports whether k is a source kind.
func IsKnown(k string) bool { return slices.Contains(kinds, k) }

// Cached reports whether the source is in the source cache under dir (cache/sources), so
// that a build needs no network for it. Local sources and patches are always at hand.
func Cached(dir string, s *Spec) bool {
	switch s.Kind {
	case Local, Patch:
		return true
	case Tar, Remote:
		if !isSHA256(s.Ref) {
			return false
		}
		_, err := os.Stat(cachedFile(dir, s.Ref))
		return err == nil
	case Git:
		// The mirror holds the commit (git cat-file -e <ref>^{commit}), and the
		// submodules' commits when they are wanted.
		return gitCached(dir, s)
	}
	return false
}

// LockFile takes an exclusive lock on the file p (created if needed) across processes,
// waiting until it is free or ctx ends; unlock releases it.
func LockFile(ctx context.Context, p string) (unlock func(), err error) { return lockFile(ctx, p) }
