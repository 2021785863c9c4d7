package cli

// End-to-end tests of machine faults: they fail the session but are never cached as
// the element's failure, so the next session tries again without --retry-failed
// (BuildStream's test_host_tools_errors_are_not_cached).

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// assertFaultNotCached runs a build that must fail for a fault of the machine: exit
// 1, the message naming the fault, no failed artifact cached.
func assertFaultNotCached(t *testing.T, p *e2eProject, element, want string, args ...string) string {
	t.Helper()
	_, stderr := p.mustRun(1, append([]string{"build", "--ui", "json"}, args...)...)
	if !strings.Contains(stderr, want) {
		t.Errorf("the build's output does not say %q:\n%s", want, stderr)
	}
	if st := p.state(element); st == "failed" {
		t.Errorf("a fault of the machine was cached as %s's failure (state %q)\n%s", element, st, stderr)
	}
	return stderr
}

// --sandbox bwrap without bwrap: said before any job starts, naming the fix.
func TestE2EMissingBwrapIsNotCached(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{
		"project.toml":    projectTOML("a.toml"),
		"elements/a.toml": manualElement(nil, "true"),
	})
	empty := p.scratch("empty-path")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	p.env = append(p.env, "PATH="+empty)
	stderr := assertFaultNotCached(t, p, "a.toml", "install bubblewrap", "--sandbox", "bwrap")
	if _, started := findEvent(parseEvents(stderr), "job-start", "build", ""); started {
		t.Errorf("a build job started although bwrap is missing:\n%s", stderr)
	}
}

// --sandbox bwrap with a sysroot that has no /bin/sh: gantry says so before the build
// job starts, naming the fix, and caches nothing.
func TestE2ESysrootWithoutShellIsNotCached(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	p := newE2EProject(t, map[string]string{
		"project.toml":    projectTOML("a.toml"),
		"elements/a.toml": manualElement(nil, "true"),
	})
	stderr := assertFaultNotCached(t, p, "a.toml", "add a base element that provides it", "--sandbox", "bwrap")
	if _, started := findEvent(parseEvents(stderr), "job-start", "build", "a.toml"); started {
		t.Errorf("the build job started; the missing /bin/sh must be said before:\n%s", stderr)
	}
}

// A full disk while building: the command's own error is not the element's failure,
// even when the tool removed its partial output before exiting.
func TestE2EFullDiskIsNotCached(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{
		"project.toml": projectTOML("big.toml"),
		// 20 MB into an 8 MB filesystem; the partial file is removed, as compilers do.
		"elements/big.toml": manualElement(nil, "head -c 20000000 /dev/zero > big || { rm -f big; exit 1; }"),
	})
	mountSmallTmpfs(t, p.cache, "8m")
	assertFaultNotCached(t, p, "big.toml", "No space left on device", "--sandbox", "host")
	_, stderr := p.mustRun(1, "build", "--ui", "json", "--sandbox", "host")
	if _, started := findEvent(parseEvents(stderr), "job-start", "build", "big.toml"); !started {
		t.Errorf("the next session did not try the build again:\n%s", stderr)
	}
}

// mountSmallTmpfs mounts a tmpfs of size at dir for the test's duration. It needs
// root (or CAP_SYS_ADMIN); without, the test is skipped, or fails in CI.
func mountSmallTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		msg := fmt.Sprintf("cannot mount a small tmpfs to fill (%v): run the tests as root", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// A source-cache file that no longer matches its hash: not the element's failure;
// the file is removed and the next build fetches it again and succeeds.
func TestE2ECorruptSourceIsNotCached(t *testing.T) {
	t.Parallel()
	content := []byte("hello from upstream\n")
	sum := sha256.Sum256(content)
	ref := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(content) }))
	t.Cleanup(srv.Close)
	p := newE2EProject(t, map[string]string{
		"project.toml": projectTOML("a.toml"),
		"elements/a.toml": fmt.Sprintf("kind = \"manual\"\n[[sources]]\nkind = \"remote\"\nurl = %q\nref = %q\n"+
			"[config]\nbuild-commands = [\"cp hello.txt %%{install-root}/\"]\n", srv.URL+"/hello.txt", ref),
	})
	p.mustRun(0, "fetch", "--ui", "json")
	cached := filepath.Join(p.cache, "sources", "files", ref)
	if err := os.WriteFile(cached, []byte("bit rot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	assertFaultNotCached(t, p, "a.toml", "corrupt", "--sandbox", "host")
	p.mustRun(0, "build", "--ui", "json", "--sandbox", "host")
	if st := p.state("a.toml"); st != "cached" {
		t.Errorf("after the rebuild a.toml is %q, want cached", st)
	}
}

// A source past a size limit (GANTRY_MAX_DOWNLOAD_SIZE, GANTRY_MAX_UNPACKED_SIZE) fails
// the session but is not the element's failure: with the limit raised, the next session
// builds without --retry-failed.
func TestE2ESizeLimitIsNotCached(t *testing.T) {
	t.Parallel()
	// 3 MB of zeros: a tarball of a few KB once gzipped.
	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(zw)
	zeros := make([]byte, 3<<20)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: int64(len(zeros)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(zeros); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(tgz.Bytes())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(tgz.Bytes()) }))
	t.Cleanup(srv.Close)
	element := fmt.Sprintf("kind = \"manual\"\n[[sources]]\nkind = \"tar\"\nurl = %q\nref = %q\n"+
		"[config]\nbuild-commands = [\"cp zeros %%{install-root}/\"]\n", srv.URL+"/zeros.tar.gz", hex.EncodeToString(sum[:]))
	for _, c := range []struct{ name, env, want string }{
		{"download", "GANTRY_MAX_DOWNLOAD_SIZE=1K", "GANTRY_MAX_DOWNLOAD_SIZE"},
		{"unpacked", "GANTRY_MAX_UNPACKED_SIZE=1M", "GANTRY_MAX_UNPACKED_SIZE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := newE2EProject(t, map[string]string{"project.toml": projectTOML("a.toml"), "elements/a.toml": element})
			env := p.env
			p.env = append(env, c.env)
			assertFaultNotCached(t, p, "a.toml", c.want, "--sandbox", "host")
			p.env = env
			p.mustRun(0, "build", "--ui", "json", "--sandbox", "host")
			if st := p.state("a.toml"); st != "cached" {
				t.Errorf("with the limit raised a.toml is %q, want cached", st)
			}
		})
	}
}
