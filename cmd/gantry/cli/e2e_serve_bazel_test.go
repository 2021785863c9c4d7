package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// requireBazel finds Bazel (Debian's bazel-bootstrap: Bazel 4.2.3, which builds
// genrules offline).
func requireBazel(t *testing.T) string {
	t.Helper()
	bazel, err := exec.LookPath("bazel")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bazel is not installed: install the Debian package bazel-bootstrap")
		}
		t.Skip("bazel is not installed: install the Debian package bazel-bootstrap to run this test; CI=true makes this a failure")
	}
	return bazel
}

// TestServeBazel: Bazel as a client of `gantry cache serve`. An action built
// with --remote_cache=http:// is a remote cache hit for a build over grpc://
// after `bazel clean`, and the other way round: both protocols write and read
// the same store as Bazel expects.
func TestServeBazel(t *testing.T) {
	bazel := requireBazel(t)
	s := startServe(t)
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "WORKSPACE"), []byte("workspace(name = \"servetest\")\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "BUILD"), []byte(`
genrule(name = "viahttp", outs = ["viahttp.txt"], cmd = "echo built for http > $@")
genrule(name = "viagrpc", outs = ["viagrpc.txt"], cmd = "echo built for grpc > $@")
`), 0o644)
	userRoot := filepath.Join(base, "bazel-root")
	run := func(args ...string) string {
		t.Helper()
		full := append([]string{"--output_user_root=" + userRoot}, args...)
		cmd := exec.Command(bazel, full...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "HOME="+base)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bazel %s: %v\n%s\nserver log:\n%s", strings.Join(args, " "), err, out, s.log())
		}
		return string(out)
	}
	t.Cleanup(func() {
		shutdown := exec.Command(bazel, "--output_user_root="+userRoot, "shutdown")
		shutdown.Dir, shutdown.Env = ws, append(os.Environ(), "HOME="+base)
		shutdown.Run()
	})
	http, grpc := "--remote_cache=http://"+s.http, "--remote_cache=grpc://"+s.grpc
	build := func(target, cache string) string {
		return run("build", target, cache, "--remote_header=Authorization=Bearer "+s.token, "--spawn_strategy=standalone")
	}
	for _, tc := range []struct{ target, first, second string }{
		{"//:viahttp", http, grpc},
		{"//:viagrpc", grpc, http},
	} {
		if out := build(tc.target, tc.first); strings.Contains(out, "remote cache hit") {
			t.Fatalf("first build of %s with %s hit an empty cache:\n%s", tc.target, tc.first, out)
		}
		run("clean")
		if out := build(tc.target, tc.second); !strings.Contains(out, "1 remote cache hit") {
			t.Errorf("build of %s with %s after bazel clean: no remote cache hit:\n%s", tc.target, tc.second, out)
		}
	}
	s.stop()
	s.verifyStore()
}
