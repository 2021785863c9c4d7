package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestServeAssetBazelDownloader: Bazel with --experimental_remote_downloader
// fetches an http_file through `gantry cache serve --asset-fetch`, which
// downloads it from a 127.0.0.1 origin and checks its sha256; a second Bazel
// with a new output base, disk cache and repository cache gets the file from
// the server, and the origin is never asked again.
func TestServeAssetBazelDownloader(t *testing.T) {
	bazel := requireBazel(t)
	const payload = "fetched through the remote downloader\n"
	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, payload)
	}))
	defer origin.Close()
	s := startServe(t, "--asset-fetch")
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	os.MkdirAll(ws, 0o755)
	sum := sha256.Sum256([]byte(payload))
	os.WriteFile(filepath.Join(ws, "WORKSPACE"), []byte(fmt.Sprintf(`workspace(name = "assettest")
load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_file")
http_file(
    name = "payload",
    urls = ["%s/payload.txt"],
    sha256 = "%s",
    downloaded_file_path = "payload.txt",
)
`, origin.URL, hex.EncodeToString(sum[:]))), 0o644)
	os.WriteFile(filepath.Join(ws, "BUILD"), []byte(`
genrule(name = "use", srcs = ["@payload//file"], outs = ["use.txt"], cmd = "cat $(location @payload//file) > $@")
`), 0o644)
	build := func(round string) {
		t.Helper()
		root := filepath.Join(base, round)
		args := []string{"--output_user_root=" + filepath.Join(root, "user-root"), "build", "//:use",
			"--experimental_remote_downloader=grpc://" + s.grpc, "--remote_cache=grpc://" + s.grpc,
			"--remote_header=Authorization=Bearer " + s.token, "--spawn_strategy=standalone",
			"--disk_cache=" + filepath.Join(root, "disk-cache"), "--repository_cache=" + filepath.Join(root, "repo-cache")}
		cmd := exec.Command(bazel, args...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "HOME="+base)
		out, err := cmd.CombinedOutput()
		t.Cleanup(func() {
			shutdown := exec.Command(bazel, "--output_user_root="+filepath.Join(root, "user-root"), "shutdown")
			shutdown.Dir, shutdown.Env = ws, cmd.Env
			shutdown.Run()
		})
		if err != nil {
			t.Fatalf("%s bazel build: %v\n%s\nserver log:\n%s", round, err, out, s.log())
		}
		got, err := os.ReadFile(filepath.Join(ws, "bazel-bin", "use.txt"))
		if err != nil || string(got) != payload {
			t.Fatalf("%s build: use.txt = %q (%v), want %q", round, got, err, payload)
		}
	}
	build("first")
	if n := hits.Load(); n != 1 {
		t.Fatalf("first build: the origin was asked %d times, want 1 (through the server)", n)
	}
	build("second")
	if n := hits.Load(); n != 1 {
		t.Errorf("second clean build: the origin was asked %d times in all, want still 1", n)
	}
	s.stop()
	s.verifyStore()
}
