package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// With remote execution, a session whose every element that runs commands
// builds on the cluster asks nothing of this machine's sandbox: it builds with
// --sandbox bwrap where bwrap does not work (the sysroot, an import, and a
// compose run no command here). An element built from its open workspace
// still builds here, and the check fails the session before it starts.
func TestE2ERemoteBuildNeedsNoLocalSandbox(t *testing.T) {
	t.Parallel()
	worker := startRemoteWorker(t, 2)
	files := map[string]string{
		"elements/app.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[[sources]]\nkind = \"local\"\npath = \"files/src\"\n" +
			"[config]\nbuild-commands = " + tomlList("mkdir -p %{install-root}/share", "cp hello.txt %{install-root}/share/hello.txt") + "\n",
		"elements/image.toml": "kind = \"compose\"\nbuild-depends = [\"app.toml\"]\n",
		"files/src/hello.txt": "hello\n",
	}
	rp := newRemoteProject(t, worker, files, "image.toml")
	// A bwrap that fails as one without user namespaces does; the worker, started
	// before, has the real one.
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "bwrap"), []byte("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rp.env = append(rp.env, "PATH="+bin+":"+os.Getenv("PATH"))

	_, stderr := rp.runLong(0, "--ui", "plain", "--verbose", "build", "--sandbox", "bwrap")
	if !regexp.MustCompile(`\[build:app\.toml\] +STATUS +uploading inputs`).MatchString(stderr) {
		t.Errorf("app.toml was not built remotely:\n%s", stderr)
	}
	out := filepath.Join(t.TempDir(), "out")
	rp.mustRun(0, "artifact", "checkout", "image.toml", out)
	if b, err := os.ReadFile(filepath.Join(out, "share", "hello.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("image.toml's share/hello.txt: %q, %v; want hello", b, err)
	}

	rp.mustRun(0, "workspace", "open", "app.toml")
	_, stderr = rp.runLong(1, "build", "--sandbox", "bwrap")
	want := "gantry: --sandbox bwrap: bwrap does not work on this machine (bwrap test failed: bwrap: No permissions to create new namespace): install bubblewrap, or use --sandbox host\n"
	if stderr != want {
		t.Errorf("a workspace build with a bwrap that does not work: stderr\n%s\nwant\n%s", stderr, want)
	}
}
