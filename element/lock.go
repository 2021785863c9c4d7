package element

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// LockFile is the name of the file holding tracked refs, at the project root.
const LockFile = "gantry.lock"

// Lock holds the refs `gantry track` resolved, per element and source index. A ref
// written inline in an element wins over the lock.
type Lock struct {
	path    string
	Entries map[string][]string `toml:"refs"`
}

// LoadLock reads root/gantry.lock; a missing file is an empty lock.
func LoadLock(root string) (*Lock, error) {
	l := &Lock{path: filepath.Join(root, LockFile)}
	doc, err := decodeTOML(l.path, LockFile, l)
	if err != nil {
		if _, statErr := os.Stat(l.path); errors.Is(statErr, fs.ErrNotExist) {
			return &Lock{path: l.path, Entries: map[string][]string{}}, nil
		}
		return nil, err
	}
	if err := doc.unknownKeys(func([]string) []string { return []string{"refs"} }); err != nil {
		return nil, err
	}
	if l.Entries == nil {
		l.Entries = map[string][]string{}
	}
	return l, nil
}

// Refs returns the locked refs of an element's sources, by source index ("" = none).
func (l *Lock) Refs(element string) []string {
	if l == nil {
		return nil
	}
	return l.Entries[element]
}

// Set records the refs of an element's sources.
func (l *Lock) Set(element string, refs []string) {
	l.Entries[element] = refs
}

// Encode renders the lock deterministically: elements sorted, one line each.
func (l *Lock) Encode() []byte {
	var b strings.Builder
	b.WriteString("# Source refs resolved by `gantry track`. Generated: commit it, do not edit it.\n[refs]\n")
	names := make([]string, 0, len(l.Entries))
	for n := range l.Entries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		quoted := make([]string, len(l.Entries[n]))
		for i, r := range l.Entries[n] {
			quoted[i] = strconv.Quote(r)
		}
		fmt.Fprintf(&b, "%s = [%s]\n", strconv.Quote(n), strings.Join(quoted, ", "))
	}
	return []byte(b.String())
}

// Write saves the lock atomically: a temp file in the same directory, fsync, rename.
func (l *Lock) Write() error {
	return WriteFileAtomic(l.path, l.Encode(), 0o644)
}

// WriteFileAtomic writes data to path so that readers see the old or the new content,
// never a partial file, even if the process dies mid-write.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
