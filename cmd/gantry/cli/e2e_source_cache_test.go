package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// tarGz is a gzipped tarball of one file.
func tarGz(t *testing.T, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(content))
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// gitCommitRepo makes a repository at dir with one file and returns its commit.
func gitCommitRepo(t *testing.T, dir, file, content string) string {
	t.Helper()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
			"GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git("init", "--quiet", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", file)
	git("commit", "--quiet", "-m", "one")
	return git("rev-parse", "HEAD")
}

// TestSourceCacheThroughServe: runner A, with upstream reachable (a 127.0.0.1
// HTTP server for a tarball, a git repository), builds with a [[remote]]
// that keeps sources and fills `gantry cache serve` with them; runner B, with
// an empty cache, the HTTP server stopped and the repository moved away,
// builds other elements of the same sources from the server. A source that
// neither upstream nor the remote has fails naming the source, its URL and
// the remote tried.
func TestSourceCacheThroughServe(t *testing.T) {
	t.Parallel()
	s := startServe(t)
	tgz := tarGz(t, "tar.txt", "from the tarball\n")
	tarSum := sha256.Sum256(tgz)
	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/src.tar.gz" {
			http.NotFound(w, r)
			return
		}
		w.Write(tgz)
	}))
	defer origin.Close()
	repo := filepath.Join(t.TempDir(), "repo")
	commit := gitCommitRepo(t, repo, "git.txt", "from git\n")

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(s.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	project := fmt.Sprintf("name = \"e2e\"\ndefault-targets = [\"app.toml\"]\n[[remote]]\nurl = \"grpc://%s\"\npush = true\nsources = true\ntoken-file = %q\n", s.grpc, tokenFile)
	element := func(out string) string {
		return fmt.Sprintf(`kind = "manual"
[[sources]]
kind = "tar"
url = %q
ref = %q
[[sources]]
kind = "git"
url = %q
ref = %q
directory = "g"
[config]
build-commands = ["cat tar.txt g/git.txt > %%{install-root}/%s"]
`, origin.URL+"/src.tar.gz", hex.EncodeToString(tarSum[:]), "file://"+repo, commit, out)
	}
	noRetries := "[scheduler]\nnetwork-retries = 0\n"

	a := newE2EProject(t, map[string]string{"project.toml": project, "elements/app.toml": element("a.txt")})
	a.write("../home/.config/gantry/config.toml", noRetries)
	a.mustRun(0, "build", "--ui", "plain", "--sandbox", "host")
	if n := hits.Load(); n != 1 {
		t.Fatalf("runner A downloaded the tarball %d times, want 1", n)
	}

	origin.Close()
	if err := os.Rename(repo, repo+".moved"); err != nil {
		t.Fatal(err)
	}
	// Another element of the same sources: not on the remote as an artifact,
	// so runner B builds it, from sources it can only get from the server.
	b := newE2EProject(t, map[string]string{"project.toml": project, "elements/app.toml": element("b.txt")})
	b.write("../home/.config/gantry/config.toml", noRetries)
	_, stderr := b.mustRun(0, "build", "--ui", "json", "--sandbox", "host")
	if _, built := findEvent(parseEvents(stderr), "job-start", "build", "app.toml"); !built {
		t.Fatalf("runner B did not build app.toml:\n%s", stderr)
	}
	out := filepath.Join(t.TempDir(), "out")
	b.mustRun(0, "artifact", "checkout", "app.toml", out)
	if got, err := os.ReadFile(filepath.Join(out, "b.txt")); err != nil || string(got) != "from the tarball\nfrom git\n" {
		t.Errorf("runner B built %q (%v)", got, err)
	}

	// Neither upstream nor the server has this one.
	missing := strings.Replace(element("c.txt"), "/src.tar.gz", "/other.tar.gz", 1)
	missing = strings.Replace(missing, hex.EncodeToString(tarSum[:]), strings.Repeat("0", 64), 1)
	c := newE2EProject(t, map[string]string{"project.toml": project, "elements/app.toml": missing})
	c.write("../home/.config/gantry/config.toml", noRetries)
	_, stderr = c.mustRun(1, "build", "--ui", "plain", "--sandbox", "host")
	for _, want := range []string{
		"fetching tar " + origin.URL + "/other.tar.gz: downloading " + origin.URL + "/other.tar.gz: ",
		"; the remotes keeping sources did not serve it either (remote grpc://" + s.grpc + ": not in its source cache)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the error does not say %q:\n%s", want, stderr)
		}
	}
	s.stop()
	s.verifyStore()
}
