//go:build linux

package exec

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/testtree"
)

// needTool skips the test when what is missing here, or fails it with CI=true.
func needTool(t *testing.T, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: install bubblewrap and busybox-static", what)
	}
	t.Skipf("%s: install bubblewrap and busybox-static to run this test, CI=true makes this a failure", what)
}

// busyboxSysroot stores a sysroot of a static busybox copied (not linked) as
// the applets the script and the test's commands use.
func busyboxSysroot(t *testing.T, c *cache.Cache) cache.Digest {
	t.Helper()
	bb, err := osexec.LookPath("busybox")
	needTool(t, err == nil, "no busybox")
	f, err := elf.Open(bb)
	needTool(t, err == nil, "busybox is not an ELF file")
	static := true
	for _, p := range f.Progs {
		static = static && p.Type != elf.PT_INTERP
	}
	f.Close()
	needTool(t, static, bb+" is dynamically linked")
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	spec := map[string]string{"etc/motd": "file:from the sysroot\n"}
	for _, applet := range []string{"sh", "mkdir", "cp", "rm", "cat"} {
		spec["bin/"+applet] = "exec:" + string(data)
	}
	dir := t.TempDir()
	testtree.Write(t, dir, spec, nil)
	d, err := c.StoreTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// runWrapped checks out b's input root and runs its wrap = "bwrap" Command
// there, as an executor running commands in a plain directory does. It
// returns the directory the build saw as "/", the exit code and stderr.
func runWrapped(t *testing.T, c *cache.Cache, b Build) (string, int, string) {
	t.Helper()
	_, err := osexec.LookPath("bwrap")
	needTool(t, err == nil, "no bwrap")
	root, _, err := inputRoot(c, Config{Wrap: "bwrap"}, b)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "input")
	if err := c.Checkout(root, dir, cache.CheckoutOptions{}); err != nil {
		t.Fatal(err)
	}
	// What an executor writes beside the input root's files (Bazel's worker:
	// stdout-UUID and stderr-UUID in the action's directory).
	if err := os.WriteFile(filepath.Join(dir, "stdout-executor"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := command(Config{Wrap: "bwrap"}, b)
	run := osexec.Command(cmd.Arguments[0], cmd.Arguments[1:]...)
	run.Dir = filepath.Join(dir, filepath.FromSlash(cmd.WorkingDirectory))
	run.Env = []string{}
	for _, e := range cmd.EnvironmentVariables {
		run.Env = append(run.Env, e.Name+"="+e.Value)
	}
	var stderr bytes.Buffer
	run.Stderr = &stderr
	err = run.Run()
	var ee *osexec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	needTool(t, !bytes.Contains(stderr.Bytes(), []byte("bwrap:")), "bwrap does not work here: "+stderr.String())
	return filepath.Join(dir, wrapRoot), run.ProcessState.ExitCode(), stderr.String()
}

func TestWrappedCommandSeesTheInputRootAsSlash(t *testing.T) {
	c := openTestCache(t)
	b := Build{Element: "app.toml", Deps: []Layer{{Name: "base.toml", Files: busyboxSysroot(t, c), At: "/"}},
		Sources: storeTree(t, c, map[string]string{"input.txt": "source\n"}), BuildRoot: "/gantry/build", InstallRoot: "/gantry/install",
		Env: map[string]string{"PATH": "/bin"},
		Steps: []Step{
			{Name: "build-commands", Commands: []string{"cat input.txt /etc/motd > out.txt", "test ! -e /stdout-executor"}},
			{Name: "install-commands", Commands: []string{"mkdir -p /gantry/install/share && cp out.txt /gantry/install/share/"}},
		}}
	dir, code, stderr := runWrapped(t, c, b)
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	data, err := os.ReadFile(filepath.Join(dir, "gantry", "install", "share", "out.txt"))
	if want := "source\nfrom the sysroot\n"; err != nil || string(data) != want {
		t.Errorf("install root share/out.txt: %q, %v; want %q: the build read its sources and the sysroot's /etc", data, err, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "gantry", "failed-build")); !os.IsNotExist(err) {
		t.Errorf("failed-build after a success: %v", err)
	}

	b.Steps = append(b.Steps, Step{Name: "install-commands", Commands: []string{"cat /nonexistent"}})
	dir, code, stderr = runWrapped(t, c, b)
	if code == 0 || FailedCommand([]byte(stderr)) != "install-commands 1/1" {
		t.Errorf("exit code %d, failed command %q in %q: want the failure of install-commands 1/1", code, FailedCommand([]byte(stderr)), stderr)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "gantry", "failed-build", "out.txt")); err != nil || len(data) == 0 {
		t.Errorf("failed-build/out.txt: %q, %v: want the build root's tree", data, err)
	}
}
