package actions

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/testtree"
	"github.com/gantry-build/gantry/sandbox"
	"github.com/gantry-build/gantry/source"
)

// Two source checkouts of the same sources give the same tarball, byte for byte,
// though the files' times and non-executable mode bits changed between them; its
// entries are sorted, owned by 0, at the build's SOURCE_DATE_EPOCH, with the
// cache's modes.
func TestSourceTarIsReproducible(t *testing.T) {
	root := t.TempDir()
	write := func(name, data string, mode os.FileMode) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("files/app/b.txt", "b\n", 0o644)
	write("files/app/a/run", "#!/bin/sh\n", 0o755)
	write("files/lib/l.txt", "l\n", 0o664)
	if err := os.Symlink("b.txt", filepath.Join(root, "files/app/link")); err != nil {
		t.Fatal(err)
	}
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	app := &element.Element{Name: "app.toml", Sources: []source.Spec{{Kind: source.Local, Path: "files/app", Directory: "src"}}}
	lib := &element.Element{Name: "sub/lib.toml", Sources: []source.Spec{{Kind: source.Local, Path: "files/lib"}}}
	sc := SourceCheckout{Cache: c, ProjectRoot: root, Elements: []*element.Element{lib, app}, PerElement: true, Log: io.Discard}
	checkout := func() []byte {
		var buf bytes.Buffer
		if err := sc.ToTar(context.Background(), &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	first := checkout()
	later := time.Now().Add(time.Hour)
	for _, name := range []string{"files/app/b.txt", "files/app/a/run", "files/lib/l.txt", "files/app"} {
		if err := os.Chtimes(filepath.Join(root, name), later, later); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "files/lib/l.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if second := checkout(); !bytes.Equal(first, second) {
		t.Fatalf("two checkouts differ: %d and %d bytes", len(first), len(second))
	}

	var got []string
	tr := tar.NewReader(bytes.NewReader(first))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name+" "+strings.TrimPrefix(os.FileMode(h.Mode).String(), "-")+" "+h.Linkname)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(sandbox.DefaultSourceDate()) {
			t.Errorf("%s: owner %d:%d (%q:%q), time %s; want 0:0, no names, %s", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, sandbox.DefaultSourceDate())
		}
	}
	want := []string{
		"app/ rwxr-xr-x ", "app/src/ rwxr-xr-x ", "app/src/a/ rwxr-xr-x ", "app/src/a/run rwxr-xr-x ",
		"app/src/b.txt rw-r--r-- ", "app/src/link rwxrwxrwx b.txt",
		"sub-lib/ rwxr-xr-x ", "sub-lib/l.txt rw-r--r-- ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Two elements whose directories would be the same are refused, naming both.
func TestSourceCheckoutRefusesClashingDirectories(t *testing.T) {
	sc := SourceCheckout{PerElement: true, Elements: []*element.Element{{Name: "a-b.toml"}, {Name: "a/b.toml"}}}
	err := sc.Check()
	if err == nil || err.Error() != "the sources of a-b.toml and a/b.toml would both go into a-b/: check them out one at a time with --deps none" {
		t.Errorf("Check() = %v", err)
	}
}

// A directory checkout keeps the time staging gave the sources (source.StagedTime), so
// that building from it by hand regenerates nothing; a workspace's files keep theirs.
func TestSourceCheckoutKeepsStagedTimes(t *testing.T) {
	root := t.TempDir()
	testtree.Write(t, root, map[string]string{"files/app/aclocal.m4": "file:dnl", "files/app/configure.ac": "file:AC_INIT",
		"files/app/src/main.c": "file:int main;", "ws/edited.c": "file:int x;"}, nil)
	edited := time.Date(2024, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(root, "ws/edited.c"), edited, edited); err != nil {
		t.Fatal(err)
	}
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	times := func(e *element.Element) map[string]time.Time {
		t.Helper()
		out := filepath.Join(t.TempDir(), "out")
		sc := SourceCheckout{Cache: c, ProjectRoot: root, Elements: []*element.Element{e}, Log: io.Discard}
		if err := sc.ToDir(context.Background(), out); err != nil {
			t.Fatal(err)
		}
		return testtree.Times(t, out)
	}
	got := times(&element.Element{Name: "app.toml", Sources: []source.Spec{{Kind: source.Local, Path: "files/app"}}})
	if len(got) != 5 {
		t.Errorf("checked out %v, want the top, src and 3 files", got)
	}
	for name, mtime := range got {
		if !mtime.Equal(source.StagedTime) {
			t.Errorf("%s: mtime %v, want the staged %v", name, mtime.UTC(), source.StagedTime)
		}
	}
	ws := times(&element.Element{Name: "app.toml", Workspace: filepath.Join(root, "ws")})
	if !ws["edited.c"].Equal(edited) {
		t.Errorf("a workspace file checked out with %v, want its own %v", ws["edited.c"].UTC(), edited)
	}
}
