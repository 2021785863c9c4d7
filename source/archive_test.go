package source

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
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
			refused: "link/passwd", reason: "escapes", outside: "etc/passwd"},
		{name: "write through a chain", members: []member{
			dir("deep/"), dir("deep/a/"), dir("deep/a/b/"),
			symlink("deep/a/b/s", "../../.."), symlink("x", "deep/a/b/s/.."), file("x/pwned", "x"),
		}, refused: "x/pwned", reason: "escapes", outside: "build/pwned"},
		{name: "write through an absolute link", members: []member{symlink("lib64", "/tmp"), file("lib64/gantry-evil", "x")},
			refused: "lib64/gantry-evil", reason: "escapes"},
		{name: "directory under an absolute link", members: []member{symlink("etc", "/etc"), dir("etc/gantry-evil/")},
			refused: "etc/gantry-evil/", reason: "escapes"},
		{name: "replace a link's target through it", members: []member{symlink("up", ".."), symlink("up/evil", "/etc")},
			refused: "up/evil", reason: "escapes", outside: "build/evil"},
		{name: "hard link through an absolute link", members: []member{symlink("l", "/etc"), hardlink("hl", "l/passwd")},
			refused: "hl", reason: "escapes"},
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
			for _, p := range []string{"/tmp/gantry-absolute-evil", "/tmp/gantry-evil", "/etc/gantry-evil"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
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

// TestSymlinksKept: symbolic links are data. Absolute ones (every sysroot has
// lib64/ld-linux-x86-64.so.2 -> /lib/…) and relative ones pointing out are staged
// exactly as they are, as BuildStream's tests/sources/tar.py::test_symlinks expects;
// only writing through them is refused (TestRefusedMembers).
func TestSymlinksKept(t *testing.T) {
	archive := makeTar(t,
		dir("sysroot/"), dir("sysroot/lib64/"),
		symlink("sysroot/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
		symlink("sysroot/etc", "/etc"),
		symlink("sysroot/up", "../../.."),
		dir("sysroot/deep/"), dir("sysroot/deep/a/"),
		symlink("sysroot/x", "deep/a/s/.."), symlink("sysroot/deep/a/s", "../../.."))
	for _, baseDir := range []string{"", "*"} {
		dest, err := stageArchive(t, archive, baseDir)
		if err != nil {
			t.Fatalf("base-dir %q: %v", baseDir, err)
		}
		got := strings.Join(listTree(t, dest), " ")
		want := "deep/ deep/a/ deep/a/s->../../.. etc->/etc lib64/ lib64/ld-linux-x86-64.so.2->/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 up->../../.. x->deep/a/s/.."
		if baseDir == "" {
			want = "sysroot/ sysroot/" + strings.ReplaceAll(want, " ", " sysroot/")
		}
		if got != want {
			t.Errorf("base-dir %q: staged\n%s\nwant\n%s", baseDir, got, want)
		}
	}
}

// TestStageThroughEarlierLinks: a link that an earlier source staged cannot lead a later
// source's writes outside the build root: not as its directory, not as a path inside a
// local source, not as the file a remote source writes.
func TestStageThroughEarlierLinks(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(root, "outside")
	project := filepath.Join(root, "project")
	build := filepath.Join(root, "build")
	for _, d := range []string{outside, filepath.Join(project, "links"), filepath.Join(project, "tree", "d"), filepath.Join(project, "flat")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink(outside, filepath.Join(project, "links", "d"))
	os.Symlink(outside, filepath.Join(project, "links", "abs"))
	os.Symlink("../../outside", filepath.Join(project, "links", "rel"))
	os.WriteFile(filepath.Join(project, "tree", "d", "x"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(project, "flat", "f"), []byte("f"), 0o644)
	o := StageOptions{ProjectRoot: project, SourcesDir: filepath.Join(root, "sources"), BuildRoot: build}
	if err := Stage(context.Background(), &Spec{Kind: Local, Path: "links"}, o); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Spec{
		{Kind: Local, Path: "flat", Directory: "d"},     // into the link
		{Kind: Local, Path: "flat", Directory: "rel/x"}, // below a relative link out
		{Kind: Local, Path: "tree"},                     // d/x through the link
		{Kind: Local, Path: "flat", Directory: "abs"},
	} {
		err := Stage(context.Background(), s, o)
		if err == nil || !strings.Contains(err.Error(), "escapes") {
			t.Errorf("staging %s into %q: want a refusal, got %v", s.Path, s.Directory, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("staging wrote outside the build root: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(root, "x")); err == nil {
		t.Error("staging wrote through a relative link")
	}
}

// TestUnpackLimit: an archive that unpacks past the cap (a decompression bomb: a few KiB
// of gzip, megabytes of zeros) is refused, naming the member that passed it; the cap
// comes from StageOptions or GANTRY_MAX_UNPACKED_SIZE.
func TestUnpackLimit(t *testing.T) {
	zeros := strings.Repeat("\x00", 4<<20)
	bomb := gzipped(t, makeTar(t, file("a", zeros), file("b", zeros)))
	if len(bomb) > 64<<10 {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}
	root := t.TempDir()
	sources := filepath.Join(root, "sources")
	os.MkdirAll(filepath.Join(sources, "files"), 0o755)
	os.WriteFile(filepath.Join(sources, "files", sha(bomb)), bomb, 0o444)
	build := filepath.Join(root, "build")
	s := &Spec{Kind: Tar, URL: "file:///bomb.tar.gz", Ref: sha(bomb)}
	err := Stage(context.Background(), s, StageOptions{SourcesDir: sources, BuildRoot: build, MaxUnpacked: 6 << 20})
	if err == nil || !strings.Contains(err.Error(), `tar member "b"`) || !strings.Contains(err.Error(), "more than 6.0 MiB (6291456 bytes)") {
		t.Fatalf("want a refusal of member b past the limit, got %v", err)
	}
	// Members skipped (outside base-dir) count too: the bytes are decompressed anyway.
	s.BaseDir = "nothing/*"
	err = Stage(context.Background(), s, StageOptions{SourcesDir: sources, BuildRoot: build, MaxUnpacked: 6 << 20})
	if err == nil || !strings.Contains(err.Error(), "more than 6.0 MiB (6291456 bytes)") {
		t.Fatalf("want a refusal past the limit while looking for base-dir, got %v", err)
	}
	s.BaseDir = "*"
	t.Setenv("GANTRY_MAX_UNPACKED_SIZE", "5M")
	err = Stage(context.Background(), s, StageOptions{SourcesDir: sources, BuildRoot: filepath.Join(root, "b1")})
	if err == nil || !strings.Contains(err.Error(), "more than 5.0 MiB (5242880 bytes)") {
		t.Fatalf("want a refusal past GANTRY_MAX_UNPACKED_SIZE, got %v", err)
	}
	t.Setenv("GANTRY_MAX_UNPACKED_SIZE", "lots")
	err = Stage(context.Background(), s, StageOptions{SourcesDir: sources, BuildRoot: filepath.Join(root, "b1")})
	if err == nil || !strings.Contains(err.Error(), "GANTRY_MAX_UNPACKED_SIZE") {
		t.Fatalf("want an error naming the variable, got %v", err)
	}
	// Under the limit the same archive stages.
	if err := Stage(context.Background(), s, StageOptions{SourcesDir: sources, BuildRoot: filepath.Join(root, "b2"), MaxUnpacked: 9 << 20}); err != nil {
		t.Fatal(err)
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

// An xz stream that goes on after the tar archive's end (a decompression bomb hidden
// behind the end-of-archive marker) counts against the unpacked-size limit: xz is
// stopped and the archive refused, instead of being decompressed to its end.
func TestXzTailCountsAgainstTheLimit(t *testing.T) {
	archive := makeTar(t, file("a", "A"))
	bomb := compressWith(t, append(archive, make([]byte, 4<<20)...), "xz", "-c")
	for _, tt := range []struct {
		name, baseDir string
		limit         int64
		wantErr       string
	}{
		{"over the limit", "", 1 << 20, "data goes on after the end of the tar archive: the archive unpacks to more than 1.0 MiB (1048576 bytes)"},
		{"over the limit, base-dir", "*", 1 << 20, "data goes on after the end of the tar archive: the archive unpacks to more than 1.0 MiB (1048576 bytes)"},
		{"within the limit", "*", 8 << 20, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "s")
			root, _, err := OpenDir(filepath.Dir(dest), "s")
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			open := func() (io.ReadCloser, error) { return decompress(context.Background(), bytes.NewReader(bomb)) }
			err = extractTar(context.Background(), open, root, tt.baseDir, tt.limit)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Join(listTree(t, dest), " "); got != "a=A" {
					t.Errorf("staged %q, want a=A", got)
				}
			} else if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("extracting a tar with 4 MiB after its end, limit %d: error %v, want %q", tt.limit, err, tt.wantErr)
			}
		})
	}
}
