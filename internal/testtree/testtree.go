// Package testtree writes and reads small file trees for tests, described as
// path -> spec ("file:<content>", "exec:<content>", "symlink:<target>", "dir").
package testtree

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Write creates files described as path -> spec, where spec is
// "file:<content>", "exec:<content>", "symlink:<target>" or "dir".
func Write(t testing.TB, root string, spec map[string]string, order []string) {
	t.Helper()
	if order == nil {
		for p := range spec {
			order = append(order, p)
		}
		slices.Sort(order)
	}
	for _, p := range order {
		kind, arg, _ := strings.Cut(spec[p], ":")
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch kind {
		case "file":
			err = os.WriteFile(full, []byte(arg), 0o644)
		case "exec":
			err = os.WriteFile(full, []byte(arg), 0o755)
		case "symlink":
			err = os.Symlink(arg, full)
		case "dir":
			err = os.MkdirAll(full, 0o755)
		default:
			t.Fatalf("bad spec %q", spec[p])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Times maps every entry of the tree at root ("." for root itself) to its
// modification time, a link's own.
func Times(t testing.TB, root string) map[string]time.Time {
	t.Helper()
	got := map[string]time.Time{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		got[filepath.ToSlash(rel)] = info.ModTime()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Read describes the tree at root in Write's notation.
func Read(t testing.TB, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			got[rel] = "symlink:" + target
		case d.IsDir():
			got[rel] = "dir"
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			kind := "file"
			if info.Mode()&0o111 != 0 {
				kind = "exec"
			}
			got[rel] = kind + ":" + string(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// CorruptFile flips the first byte of a (read-only) file.
func CorruptFile(t testing.TB, path string) {
	t.Helper()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[0] ^= 0xff
	if err := os.WriteFile(path, data, 0o444); err != nil {
		t.Fatal(err)
	}
}

// WithDirs adds the "dir" entries that Read reports for parents.
func WithDirs(spec map[string]string) map[string]string {
	out := map[string]string{}
	for p, s := range spec {
		out[p] = s
		for d := filepath.ToSlash(filepath.Dir(p)); d != "."; d = filepath.ToSlash(filepath.Dir(d)) {
			out[d] = "dir"
		}
	}
	return out
}

// Diff lists, one a line, the paths where got differs from want.
func Diff(want, got map[string]string) string {
	var b strings.Builder
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if want[k] != got[k] {
			fmt.Fprintf(&b, "%s: want %q, got %q\n", k, want[k], got[k])
		}
	}
	return b.String()
}
