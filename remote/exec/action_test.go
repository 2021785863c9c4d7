package exec

import (
	"bytes"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gantry-build/gantry/cache"
)

// runScript runs b's script with the host's sh, as an executor would, and
// returns its stderr and exit code.
func runScript(t *testing.T, b Build) (string, int) {
	t.Helper()
	if err := os.MkdirAll(b.BuildRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command("/bin/sh", "-e", "-c", script(b))
	cmd.Dir = b.BuildRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *osexec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return stderr.String(), cmd.ProcessState.ExitCode()
}

func TestScriptLabelsEachCommandAndNamesTheOneThatFailed(t *testing.T) {
	root := t.TempDir()
	b := Build{BuildRoot: root + "/build", InstallRoot: root + "/install", Steps: []Step{
		{Name: "configure-commands", Commands: []string{"cd /; echo elsewhere"}},
		{Name: "build-commands", Commands: []string{"echo built > out.o", "echo 'it''s' >&2\nexit 3", "echo never"}},
	}}
	stderr, code := runScript(t, b)
	if code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	want := "[gantry] configure-commands 1/1: cd /; echo elsewhere\n" +
		"[gantry] build-commands 1/3: echo built > out.o\n" +
		"[gantry] build-commands 2/3: echo 'it''s' >&2 …\nits\n" +
		"[gantry] build-commands 2/3 failed with exit code 3\n"
	if stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
	if got := FailedCommand([]byte(stderr)); got != "build-commands 2/3" {
		t.Errorf("FailedCommand = %q, want build-commands 2/3", got)
	}
	// Each command ran in the build root (the cd of the first stayed in its
	// shell), and the failed build's tree was copied beside it.
	if data, err := os.ReadFile(filepath.Join(root, "failed-build", "out.o")); err != nil || string(data) != "built\n" {
		t.Errorf("failed-build/out.o: %q, %v", data, err)
	}
	if _, err := os.Stat(b.InstallRoot); err != nil {
		t.Errorf("the install root was not made: %v", err)
	}
}

func TestScriptSucceeds(t *testing.T) {
	root := t.TempDir()
	b := Build{BuildRoot: root + "/build", InstallRoot: root + "/install", Steps: []Step{
		{Name: "install-commands", Commands: []string{`touch "` + root + `/install/x"`}},
	}}
	if _, code := runScript(t, b); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if _, err := os.Stat(filepath.Join(root, "failed-build")); !os.IsNotExist(err) {
		t.Errorf("failed-build exists after a success: %v", err)
	}
	if FailedCommand([]byte("[gantry] install-commands 1/1: touch x\n")) != "" {
		t.Error("FailedCommand names a command of a build that did not fail")
	}
}

func TestCommandWithBwrapRunsInTheInputRoot(t *testing.T) {
	cmd := command(Config{Wrap: "bwrap"}, Build{BuildRoot: "/gantry/build", InstallRoot: "/gantry/install"})
	want := []string{"bwrap", "--unshare-all", "--die-with-parent", "--bind", "root", "/", "--dev", "/dev", "--proc", "/proc",
		"--tmpfs", "/tmp", "--chdir", "/gantry/build", "--", "/bin/sh", "-e", "-c"}
	if !slices.Equal(cmd.Arguments[:len(want)], want) {
		t.Errorf("arguments %q, want %q and the script", cmd.Arguments, want)
	}
	if cmd.WorkingDirectory != "" || !slices.Equal(cmd.OutputPaths, []string{"root/gantry/failed-build", "root/gantry/install"}) {
		t.Errorf("working directory %q, outputs %v: want the input root, root/gantry/failed-build and root/gantry/install", cmd.WorkingDirectory, cmd.OutputPaths)
	}
}

func TestRel(t *testing.T) {
	for _, tc := range [][3]string{
		{"/gantry/build", "/gantry/install", "../install"},
		{"/", "/gantry/install", "gantry/install"},
		{"/a/b", "/a/b", "."},
		{"/a/b/c", "/x", "../../../x"},
	} {
		if got := rel(tc[0], tc[1]); got != tc[2] {
			t.Errorf("rel(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}

// paths lists the tree of root in c, directories with a trailing slash,
// symlinks with their target.
func paths(t *testing.T, c *cache.Cache, root cache.Digest) []string {
	t.Helper()
	var ps []string
	err := c.WalkTree(root, func(e cache.TreeEntry) error {
		p := e.Path
		switch e.Type {
		case cache.TypeDir:
			p += "/"
		case cache.TypeSymlink:
			p += " -> " + e.Target
		case cache.TypeFile:
			data, _ := c.ReadBlob(e.Digest)
			p += " = " + string(data)
		}
		ps = append(ps, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestMergeTreesFollowsTheStagingRules(t *testing.T) {
	c := openTestCache(t)
	a := storeTree(t, c, map[string]string{"etc/motd": "a", "etc/same": "s", "usr/lib/x": "x", "var/empty/": "", "lib": "->usr/lib"})
	b := storeTree(t, c, map[string]string{"etc/motd": "b", "etc/same": "s", "usr/lib/y": "y", "var/empty": "->/tmp", "lib": "->usr/lib"})
	src := storeTree(t, c, map[string]string{"main.c": "int"})
	root, overlaps, err := MergeTrees(c, []Layer{{Name: "a.toml", Files: a, At: "/"}, {Name: "b.toml", Files: b, At: "/"}, {Name: "src", Files: src, At: "/gantry/build"}},
		[]string{"/dev", "/tmp"}, []string{"/usr/lib/x"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"dev/", "etc/", "etc/motd = b", "etc/same = s", "gantry/", "gantry/build/", "gantry/build/main.c = int",
		"lib -> usr/lib", "tmp/", "usr/", "usr/lib/", "usr/lib/y = y", "var/", "var/empty -> /tmp"}
	if got := paths(t, c, root); !slices.Equal(got, want) {
		t.Errorf("merged tree:\n%q\nwant:\n%q", got, want)
	}
	wantOv := []Overlap{{Path: "/etc/motd", By: 1, Over: 0}, {Path: "/var/empty", By: 1, Over: 0}}
	if !slices.Equal(overlaps, wantOv) {
		t.Errorf("overlaps %v, want %v", overlaps, wantOv)
	}
}

func TestMergeTreesConflicts(t *testing.T) {
	c := openTestCache(t)
	file := storeTree(t, c, map[string]string{"usr/lib": "a file"})
	dir := storeTree(t, c, map[string]string{"usr/lib/x": "x"})
	for _, tc := range []struct {
		first, second cache.Digest
		want          string
	}{
		{file, dir, "staging second.toml: /usr/lib is a file of first.toml, where second.toml has a directory: a directory never replaces a file or symlink, nor a file a non-empty directory"},
		{dir, file, "staging second.toml: /usr/lib is a non-empty directory of first.toml, where second.toml has a file: a directory never replaces a file or symlink, nor a file a non-empty directory"},
	} {
		_, _, err := MergeTrees(c, []Layer{{Name: "first.toml", Files: tc.first, At: "/"}, {Name: "second.toml", Files: tc.second, At: "/"}}, nil, nil)
		var ce *ConflictError
		if !errors.As(err, &ce) || err.Error() != tc.want {
			t.Errorf("MergeTrees: %v, want %s", err, tc.want)
		}
	}
	// Sources placed under a file a dependency installs.
	_, _, err := MergeTrees(c, []Layer{{Name: "first.toml", Files: file, At: "/"}, {Name: "app.toml (sources)", Files: dir, At: "/usr/lib/src"}}, nil, nil)
	if want := "staging app.toml (sources): /usr/lib is a file of first.toml, where app.toml (sources) has a directory: a directory never replaces a file or symlink, nor a file a non-empty directory"; err == nil || err.Error() != want {
		t.Errorf("MergeTrees: %v, want %s", err, want)
	}
}

func TestEscapes(t *testing.T) {
	for _, tc := range []struct {
		dir, target string
		want        bool
	}{
		{"usr/lib", "libx.so.1", false}, {"usr/lib", "../../etc", false}, {"usr/lib", "../../../etc", true},
		{"", "/etc", true}, {"", "..", true}, {"a", "./../b", false}, {"a", "b/../../..", true},
	} {
		if got := escapes(tc.dir, tc.target); got != tc.want {
			t.Errorf("escapes(%q, %q) = %v, want %v", tc.dir, tc.target, got, tc.want)
		}
	}
}
