package source

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stageArchive puts archive in a fresh source cache as a tar source with baseDir and
// stages it into dir/build/stage (deep enough for "../../x" to stay in the test's temp
// directory). It returns the staging directory and Stage's error.
func stageArchive(t *testing.T, archive []byte, baseDir string) (string, error) {
	t.Helper()
	root := t.TempDir()
	sources := filepath.Join(root, "sources")
	os.MkdirAll(filepath.Join(sources, "files"), 0o755)
	if err := os.WriteFile(filepath.Join(sources, "files", sha(archive)), archive, 0o444); err != nil {
		t.Fatal(err)
	}
	s := &Spec{Kind: Tar, URL: "file:///archive", Ref: sha(archive), BaseDir: baseDir, Directory: "stage"}
	build := filepath.Join(root, "build")
	err := Stage(context.Background(), s, StageOptions{SourcesDir: sources, BuildRoot: build})
	return filepath.Join(build, "stage"), err
}

func TestCompressionFormats(t *testing.T) {
	plain := makeTar(t, dir("pkg-2.0"), file("pkg-2.0/main.c", "int main(){}\n"), exe("pkg-2.0/build.sh", "make\n"))
	tests := []struct {
		name     string
		compress func(t *testing.T) []byte
	}{
		{"none", func(t *testing.T) []byte { return plain }},
		{"gzip", func(t *testing.T) []byte { return gzipped(t, plain) }},
		{"zstd", func(t *testing.T) []byte { return zstded(t, plain) }},
		{"xz", func(t *testing.T) []byte { return compressWith(t, plain, "xz", "-c") }},
		{"bzip2", func(t *testing.T) []byte { return compressWith(t, plain, "bzip2", "-c") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dest, err := stageArchive(t, tt.compress(t), "*")
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(listTree(t, dest), " ")
			if want := "build.sh=make\n main.c=int main(){}\n"; got != want {
				t.Errorf("staged %q, want %q", got, want)
			}
			if info, _ := os.Stat(filepath.Join(dest, "build.sh")); info == nil || info.Mode().Perm() != 0o755 {
				t.Errorf("build.sh lost its exec bit: %v", info)
			}
		})
	}
}

func TestCorruptArchive(t *testing.T) {
	archive := gzipped(t, makeTar(t, file("a", strings.Repeat("x", 10000))))
	archive = archive[:len(archive)/2]
	if _, err := stageArchive(t, archive, ""); err == nil {
		t.Fatal("a truncated gzip archive was staged")
	}
	xz := compressWith(t, makeTar(t, file("a", strings.Repeat("x", 10000))), "xz", "-c")
	xz[len(xz)-20] ^= 0xff
	if _, err := stageArchive(t, xz, ""); err == nil || !strings.Contains(err.Error(), "xz") {
		t.Fatalf("a corrupt xz archive: want an xz error, got %v", err)
	}
}

func TestBaseDir(t *testing.T) {
	single := makeTar(t, dir("pkg-1.0/"), file("pkg-1.0/a", "A"), dir("pkg-1.0/sub"), file("pkg-1.0/sub/b", "B"),
		hardlink("pkg-1.0/sub/b2", "pkg-1.0/sub/b"))
	dotted := makeTar(t, dir("./"), dir("./pkg-1.0/"), file("./pkg-1.0/a", "A"))
	noDirEntries := makeTar(t, file("pkg-1.0/a", "A"), file("pkg-1.0/sub/b", "B"))
	two := makeTar(t, file("one/a", "A"), file("two/b", "B"))
	singleFile := makeTar(t, file("README", "R"))
	tests := []struct {
		name    string
		archive []byte
		baseDir string
		want    string
		wantErr string
	}{
		{"star strips the only top directory", single, "*", "a=A sub/ sub/b=B sub/b2=B", ""},
		{"star with ./ names", dotted, "*", "a=A", ""},
		{"star without directory entries", noDirEntries, "*", "a=A sub/ sub/b=B", ""},
		{"star keeps several top-level entries", two, "*", "one/ one/a=A two/ two/b=B", ""},
		{"star keeps a single file", singleFile, "*", "README=R", ""},
		{"empty keeps everything", single, "", "pkg-1.0/ pkg-1.0/a=A pkg-1.0/sub/ pkg-1.0/sub/b=B pkg-1.0/sub/b2=B", ""},
		{"a directory's contents", single, "pkg-1.0/sub", "b=B b2=B", ""},
		{"a glob", single, "pkg-*", "a=A sub/ sub/b=B sub/b2=B", ""},
		{"missing", single, "nothing", "", `base-dir "nothing" matches no directory in the archive (top-level entries: pkg-1.0)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dest, err := stageArchive(t, tt.archive, tt.baseDir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(listTree(t, dest), " "); got != tt.want {
				t.Errorf("staged %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHardLinkOutsideBaseDir(t *testing.T) {
	archive := makeTar(t, file("top/a", "A"), file("other/b", "B"), hardlink("top/b", "other/b"))
	_, err := stageArchive(t, archive, "top")
	if err == nil || !strings.Contains(err.Error(), `"top/b"`) || !strings.Contains(err.Error(), "outside base-dir") {
		t.Fatalf("want a refusal naming top/b, got %v", err)
	}
}

func TestRefusedMembers(t *testing.T) {
	tests := []struct {
		name    string
		members []member
		refused string // the member the error names
		reason  string
		outside string // a path, relative to the test's temp root, that must not exist after
	}{
		{name: "parent traversal", members: []member{file("ok", "1"), file("../evil", "x")},
			refused: "../evil", reason: "escapes", outside: "build/evil"},
		{name: "deep traversal", members: []member{file("a/../../../evil", "x")},
			refused: "a/../../../evil", reason: "escapes", outside: "evil"},
		{name: "absolute path", members: []member{file("/tmp/gantry-absolute-evil", "x")},
			refused: "/tmp/gantry-absolute-evil", reason: "absolute"},
		{name: "symlink escape then write through it", members: []member{symlink("link", "../../etc"), file("link/passwd", "root::0:0")},
			refused: "link", reason: "escapes", outside: "etc/passwd"},
		{name: "absolute symlink", members: []member{symlink("link", "/etc")},
			refused: "link", reason: "absolute"},
		{name: "symlink chain escape", members: []member{
			dir("deep/"), dir("deep/a/"), dir("deep/a/b/"),
			symlink("x", "deep/a/b/s/.."), symlink("deep/a/b/s", "../../.."),
		}, refused: "x", reason: "escapes"},
		{name: "write through a chain", members: []member{
			dir("deep/"), dir("deep/a/"), dir("deep/a/b/"),
			symlink("deep/a/b/s", "../../.."), symlink("x", "deep/a/b/s/.."), file("x/pwned", "x"),
		}, refused: "x", reason: "escapes", outside: "build/pwned"},
		{name: "hard link outside", members: []member{hardlink("hl", "../outside")},
			refused: "hl", reason: "escapes"},
		{name: "hard link absolute", members: []member{hardlink("hl", "/etc/passwd")},
			refused: "hl", reason: "absolute"},
		{name: "hard link through a symlink", members: []member{symlink("up", "."), hardlink("hl", "up/../../x")},
			refused: "hl", reason: "escapes"},
		{name: "character device", members: []member{{name: "null", typ: tar.TypeChar}},
			refused: "null", reason: "device"},
		{name: "block device", members: []member{{name: "sda", typ: tar.TypeBlock}},
			refused: "sda", reason: "device"},
		{name: "fifo", members: []member{{name: "pipe", typ: tar.TypeFifo}},
			refused: "pipe", reason: "fifo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, baseDir := range []string{"", "*"} {
				dest, err := stageArchive(t, makeTar(t, tt.members...), baseDir)
				if err == nil {
					t.Fatalf("base-dir %q: the archive was staged", baseDir)
				}
				t.Log(err)
				if !strings.Contains(err.Error(), `tar member "`+tt.refused+`"`) || !strings.Contains(err.Error(), tt.reason) {
					t.Errorf("base-dir %q: want a refusal of %q (%s), got %v", baseDir, tt.refused, tt.reason, err)
				}
				if tt.outside != "" {
					root := filepath.Dir(filepath.Dir(dest))
					if _, err := os.Lstat(filepath.Join(root, tt.outside)); err == nil {
						t.Errorf("%s was written outside the staging directory", tt.outside)
					}
				}
			}
			if _, err := os.Lstat("/tmp/gantry-absolute-evil"); err == nil {
				t.Error("an absolute member was written")
			}
		})
	}
}

func TestInternalLinksAllowed(t *testing.T) {
	archive := makeTar(t,
		dir("lib/"), file("lib/libfoo.so.1", "ELF"), symlink("lib/libfoo.so", "libfoo.so.1"),
		dir("v1/"), symlink("current", "v1"), file("current/data", "D"),
		symlink("dangling", "not-there"), symlink("self", "self"),
		hardlink("lib/libfoo-copy", "lib/libfoo.so.1"),
		symlink("up-and-back", "lib/../v1"))
	dest, err := stageArchive(t, archive, "")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(listTree(t, dest), " ")
	want := "current->v1 dangling->not-there lib/ lib/libfoo-copy=ELF lib/libfoo.so->libfoo.so.1 lib/libfoo.so.1=ELF self->self up-and-back->lib/../v1 v1/ v1/data=D"
	if got != want {
		t.Errorf("staged\n%s\nwant\n%s", got, want)
	}
}

func TestStageOverExistingFiles(t *testing.T) {
	archive := makeTar(t, file("a", "new"), dir("d"), file("d/x", "X"))
	root := t.TempDir()
	sources := filepath.Join(root, "sources")
	os.MkdirAll(filepath.Join(sources, "files"), 0o755)
	os.WriteFile(filepath.Join(sources, "files", sha(archive)), archive, 0o444)
	build := filepath.Join(root, "build")
	os.MkdirAll(filepath.Join(build, "d"), 0o755)
	os.WriteFile(filepath.Join(build, "a"), []byte("old"), 0o444)
	os.WriteFile(filepath.Join(build, "keep"), []byte("K"), 0o644)
	s := &Spec{Kind: Tar, URL: "file:///x", Ref: sha(archive)}
	if err := Stage(context.Background(), s, StageOptions{SourcesDir: sources, BuildRoot: build}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(listTree(t, build), " "); got != "a=new d/ d/x=X keep=K" {
		t.Errorf("staged %q", got)
	}
}

// TestBzip2Fixture stages a prebuilt .tar.bz2 (testdata/fixture.tar.bz2, made by GNU tar
// and bzip2), so bzip2 is covered where the bzip2 command is missing.
func TestBzip2Fixture(t *testing.T) {
	archive, err := os.ReadFile(filepath.Join("testdata", "fixture.tar.bz2"))
	if err != nil {
		t.Fatal(err)
	}
	dest, err := stageArchive(t, archive, "*")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(listTree(t, dest), " "); got != "hello.txt=hello from bzip2\n" {
		t.Errorf("staged %q", got)
	}
}
