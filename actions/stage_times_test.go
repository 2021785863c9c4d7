package actions

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testtree"
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
	testtree.Write(t, project, map[string]string{
		"files/app/Makefile.in": "file:all:\n", "files/app/aclocal.m4": "file:dnl\n", "files/app/configure.ac": "file:AC_INIT\n",
		"files/app/src/main.c": "file:int main(void) { return 0; }\n", "data.txt": "file:remote\n",
		"fix.patch": "file:--- a/src/main.c\n+++ b/src/main.c\n@@ -1 +1 @@\n-int main(void) { return 0; }\n+int main(void) { return 1; }\n",
	}, nil)

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
	times := testtree.Times(t, build)
	for rel, mtime := range times {
		if !mtime.Equal(source.StagedTime) {
			t.Errorf("%s: mtime %v, want %v", rel, mtime.UTC(), source.StagedTime)
		}
	}
	if len(times) != 13 {
		t.Errorf("staged %d entries, want 13 (the top, 4 directories, 8 files)", len(times))
	}
}
