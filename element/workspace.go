package element

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gantry-build/gantry/source"
)

// WorkspacesFile records a project's open workspaces, relative to the project root. It
// is gantry's state, not a file of the project: it lives in .gantry/, which a project
// keeps out of version control.
const WorkspacesFile = ".gantry/workspaces.json"

// defaultWorkspaceDir is where `workspace open` puts workspaces unless project.toml's
// workspace-dir or --directory says otherwise.
const defaultWorkspaceDir = "workspaces"

// Workspace is one open workspace: element builds from Directory instead of its sources.
type Workspace struct {
	Element   string `json:"element"`
	Directory string `json:"directory"` // absolute
}

type workspacesFile struct {
	Version    int         `json:"version"`
	Workspaces []Workspace `json:"workspaces"`
}

const workspacesVersion = 1

// LoadWorkspaces reads the project's open workspaces (none when the file is absent).
func LoadWorkspaces(root string) ([]Workspace, error) {
	path := filepath.Join(root, WorkspacesFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the workspaces of the project: %w", err)
	}
	var f workspacesFile
	if err := json.Unmarshal(data, &f); err != nil || f.Version != workspacesVersion {
		if err == nil {
			err = fmt.Errorf("version %d, this gantry reads version %d", f.Version, workspacesVersion)
		}
		return nil, fmt.Errorf("reading %s: %w (fix or remove it: the workspace directories stay, `gantry workspace open ELEMENT DIR` records one again)", path, err)
	}
	return f.Workspaces, nil
}

// SaveWorkspaces writes the project's open workspaces, atomically, sorted by element.
func SaveWorkspaces(root string, ws []Workspace) error {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b Workspace) int { return strings.Compare(a.Element, b.Element) })
	data, err := json.MarshalIndent(workspacesFile{Version: workspacesVersion, Workspaces: ws}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(root, WorkspacesFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("recording the workspaces: %w", err)
	}
	if err := WriteFileAtomic(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("recording the workspaces in %s: %w", path, err)
	}
	return nil
}

// WorkspaceBuildDir is where a workspace element's build directory is kept, under the
// cache directory: per project and element, so that builds of one element reuse it.
func WorkspaceBuildDir(cacheDir, project, element string) string {
	return filepath.Join(cacheDir, "workspaces", project, WorkspaceDirName(element))
}

// WorkspaceDirName is the directory name a workspace of element gets by default:
// "base/gcc.toml" -> "base-gcc".
func WorkspaceDirName(element string) string {
	return strings.ReplaceAll(strings.TrimSuffix(element, ".toml"), "/", "-")
}

// keyWorkspace keys e, open in a workspace, from the workspace's content, as a local
// source: an edit changes the key, reverting it brings the old key back.
func (g *Graph) keyWorkspace(e *Element, dir string) error {
	h, err := source.HashPath(dir)
	if err != nil {
		return &ProjectError{File: e.File, Msg: fmt.Sprintf("its workspace %s: %v", dir, err),
			Hint: fmt.Sprintf("restore the directory, or run `gantry workspace close %s` to build from the element's sources again", e.Name)}
	}
	e.Workspace = dir
	e.NoRef = false
	e.sourceKeys = []string{"workspace:" + h}
	return nil
}

// SyncWorkspace brings buildDir, the build directory a workspace element keeps between
// builds, up to date with the workspace dir: only entries whose content, type or
// executable bit changed since the last sync are written, each with the workspace
// file's time (see syncedTime), so untouched files keep their times and make rebuilds
// only what changed; entries gone from dir are removed, and whatever the build produced
// stays. The last sync is recorded in manifest.
func SyncWorkspace(dir, buildDir, manifest string) error {
	cur, err := source.HashFiles(dir)
	if err != nil {
		return fmt.Errorf("reading the workspace %s: %w", dir, err)
	}
	prev := map[string]string{}
	if data, err := os.ReadFile(manifest); err == nil {
		if json.Unmarshal(data, &prev) != nil {
			prev = map[string]string{} // unreadable: copy everything again
		}
	}
	if err := os.MkdirAll(buildDir, 0o755); err != nil {
		return fmt.Errorf("preparing the workspace build directory: %w", err)
	}
	root, err := os.OpenRoot(buildDir)
	if err != nil {
		return fmt.Errorf("opening the workspace build directory: %w", err)
	}
	defer root.Close()
	// Removed entries, children before their parents.
	gone := slices.Sorted(maps.Keys(prev))
	slices.Reverse(gone)
	for _, rel := range gone {
		if _, ok := cur[rel]; !ok && rel != "." {
			if err := root.RemoveAll(filepath.FromSlash(rel)); err != nil {
				return fmt.Errorf("removing %s from the workspace build directory: %w", rel, err)
			}
		}
	}
	// The manifest is out of date from the first change on: drop it, so that a sync
	// that stops half-way copies everything again next time.
	if err := os.Remove(manifest); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("resetting the workspace manifest: %w", err)
	}
	for _, rel := range slices.Sorted(maps.Keys(cur)) {
		if rel == "." {
			continue
		}
		name := filepath.FromSlash(rel)
		if h, ok := prev[rel]; ok && h == cur[rel] {
			if _, err := root.Lstat(name); err == nil {
				continue
			}
		}
		src := filepath.Join(dir, name)
		info, err := os.Lstat(src)
		if err != nil {
			return fmt.Errorf("reading the workspace: %w", err)
		}
		var replaced fs.FileInfo // the copy this one replaces
		if old, err := root.Lstat(name); err == nil && !(info.IsDir() && old.IsDir()) {
			replaced = old
			if err := root.RemoveAll(name); err != nil {
				return fmt.Errorf("replacing %s in the workspace build directory: %w", rel, err)
			}
		}
		if info.IsDir() {
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("syncing %s into the workspace build directory: %w", rel, err)
			}
			continue
		}
		if err := source.CopyTree(src, root, filepath.Dir(name)); err != nil {
			return fmt.Errorf("syncing %s into the workspace build directory: %w", rel, err)
		}
		if info.Mode().IsRegular() {
			_, known := prev[rel]
			t := syncedTime(info.ModTime(), replaced, known)
			if err := root.Chtimes(name, t, t); err != nil {
				return fmt.Errorf("syncing %s into the workspace build directory: %w", rel, err)
			}
		}
	}
	data, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	return WriteFileAtomic(manifest, data, 0o644)
}

// syncedTime is the time a file copied from the workspace, last changed at edited, gets
// in the build directory: edited itself, so that make compares the edit with what the
// earlier builds made there. But a file whose content changed (known: the last sync's
// manifest says so) and whose time is not after the copy it replaces (an older version
// put back with its time: cp -p, tar, rsync -a) gets the time of the sync: with its own,
// make would keep what was built from the newer copy. Without a manifest, a copy with
// the very same time is taken for the same file.
func syncedTime(edited time.Time, replaced fs.FileInfo, known bool) time.Time {
	if replaced == nil || !replaced.Mode().IsRegular() || edited.After(replaced.ModTime()) ||
		(!known && edited.Equal(replaced.ModTime())) {
		return edited
	}
	return time.Now()
}
