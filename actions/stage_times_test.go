package actions

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-build/gantry/source"
)

// Every file staged from sources (a local directory copied in lexical order, tar
// members whatever times the archive gives them, the file a patch rewrote, a remote
// file) gets source.StagedTime, and so does every directory: make finds nothing newer
// than anything else, so it regenerates nothing.
func TestStageSourcesGivesOneTime(t *testing.T) {
	if _, err := exec.LookPath("patch"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("patch is missing: install patch")
		}
		t.Skip("patch is missing: install patch to run this test (CI=true makes this a failure)")
	}
	project := t.TempDir()
	write := func(name, data string) {
		p := filepath.Join(project, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("files/app/Makefile.in", "all:\n")
	write("files/app/aclocal.m4", "dnl\n")
	write("files/app/configure.ac", "AC_INIT\n")
	write("files/app/src/main.c", "int main(void) { return 0; }\n")
	write("fix.patch", "--- a/src/main.c\n+++ b/src/main.c\n@@ -1 +1 @@\n-int main(void) { return 0; }\n+int main(void) { return 1; }\n")
	write("data.txt", "remote\n")

	// An archive whose configure.ac is newer than the files generated from it.
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	old, newer := time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, m := range []struct {
		name string
		when time.Time
	}{{"lib/configure", old}, {"lib/aclocal.m4", old}, {"lib/configure.ac", newer}} {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o755, Size: 3, ModTime: m.when, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("x\n\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(archive.Bytes())
	ref := hex.EncodeToString(sum[:])
	sources := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sources, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sources, "files", ref), archive.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}
	remote := []byte("remote\n")
	rsum := sha256.Sum256(remote)
	rref := hex.EncodeToString(rsum[:])
	if err := os.WriteFile(filepath.Join(sources, "files", rref), remote, 0o444); err != nil {
		t.Fatal(err)
	}

	specs := []source.Spec{
		{Kind: source.Local, Path: "files/app"},
		{Kind: source.Patch, Path: "fix.patch", StripLevel: 1},
		{Kind: source.Tar, URL: "file:lib.tar", Ref: ref, BaseDir: "lib", Directory: "third_party/lib"},
		{Kind: source.Remote, URL: "file:data.txt", Ref: rref, Directory: "data"},
	}
	build := filepath.Join(t.TempDir(), "build")
	so := source.StageOptions{ProjectRoot: project, SourcesDir: sources, BuildRoot: build, Log: io.Discard}
	if err := stageSources(context.Background(), specs, so, nil); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(build, "src", "main.c")); err != nil || string(data) != "int main(void) { return 1; }\n" {
		t.Fatalf("the patch was not applied: %q, %v", data, err)
	}
	var n int
	err := filepath.WalkDir(build, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if !info.ModTime().Equal(source.StagedTime) {
			rel, _ := filepath.Rel(build, p)
			t.Errorf("%s: mtime %v, want %v", rel, info.ModTime().UTC(), source.StagedTime)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 13 {
		t.Errorf("staged %d entries, want 13 (the top, 4 directories, 8 files)", n)
	}
}
