package cli

// End-to-end tests of `gantry cache verify`: a server's store (--dir) with its
// action cache entries, and a directory in place of a ref, both reported and
// repaired.

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/cache"
)

// runGantry runs the gantry binary with args (no project, no cache of the
// test's user) and returns its stdout and exit code.
func runGantry(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(gantryBinary(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_CACHE_HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("gantry %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("gantry %s: exit %d\n%s%s", strings.Join(args, " "), cmd.ProcessState.ExitCode(), &stdout, &stderr)
	return stdout.String(), cmd.ProcessState.ExitCode()
}

// TestVerifyServerStore: `cache verify --dir` checks a server's store with its
// action cache entries: it names an entry whose blob was deleted, one whose
// blob is damaged, one whose tree is missing, one that does not decode, a
// directory where an entry should be, and counts the sound entries; --repair
// removes exactly those, and the server still serves the sound entries.
func TestVerifyServerStore(t *testing.T) {
	s := startServe(t)
	put := func(blob []byte) *repb.Digest {
		t.Helper()
		d := cache.DigestOf(blob)
		if code, _ := s.request("PUT", "/cas/"+d.Hash, blob, true); code != http.StatusOK {
			t.Fatalf("PUT: status %d", code)
		}
		return d.Proto()
	}
	entry := func(ar *repb.ActionResult) string {
		t.Helper()
		data, _ := proto.Marshal(ar)
		_, key := randomBlob(t, 10)
		if code, _ := s.request("PUT", "/ac/"+key, data, true); code != http.StatusOK {
			t.Fatalf("PUT /ac: status %d", code)
		}
		return key
	}
	fileEntry := func(blob []byte) string {
		return entry(&repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "f", Digest: put(blob)}}})
	}
	treeEntry := func(file []byte) (key string, tree []byte) {
		root, tree := treeBlobs(t, file)
		put(file)
		put(root)
		return entry(&repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "d", TreeDigest: put(tree)}},
			StdoutDigest: put([]byte("log of " + string(file)))}), tree
	}
	acPath := func(key string) string { return filepath.Join(s.dir, "ac", key[:2], key) }

	var sound []string
	for i := range 4 {
		blob, _ := randomBlob(t, 100+i)
		sound = append(sound, fileEntry(blob))
		k, _ := treeEntry(append(blob, 'x'))
		sound = append(sound, k)
	}
	deletedBlob, deletedHash := randomBlob(t, 200)
	deleted := fileEntry(deletedBlob)
	damagedBlob, damagedHash := randomBlob(t, 300)
	damaged := fileEntry(damagedBlob)
	treeFile, _ := randomBlob(t, 50)
	treeless, tree := treeEntry(treeFile)
	_, garbage := randomBlob(t, 10)
	_, dirKey := randomBlob(t, 10)
	for _, f := range []func() error{
		func() error { return os.Remove(s.blobPath(deletedHash)) },
		func() error { damageStoreBlob(t, s.blobPath(damagedHash), damagedBlob); return nil },
		func() error { return os.Remove(s.blobPath(cache.DigestOf(tree).Hash)) },
		func() error {
			os.MkdirAll(filepath.Dir(acPath(garbage)), 0o755)
			return os.WriteFile(acPath(garbage), []byte("\xff\xffnot an entry"), 0o644)
		},
		func() error { return os.MkdirAll(filepath.Join(acPath(dirKey), "stray"), 0o755) },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}

	out, code := runGantry(t, "cache", "verify", "--dir", s.dir)
	if code != 1 {
		t.Fatalf("cache verify --dir of a damaged store: exit %d, want 1", code)
	}
	for what, want := range map[string]string{
		"the entry whose blob was deleted": `(?m)^problem: action cache entry ` + deleted + `: .*` + deletedHash + `.*no such file`,
		"the entry whose blob is damaged":  `(?m)^problem: action cache entry ` + damaged + `: .*` + damagedHash + `.* hashes to `,
		"the entry whose tree is missing":  `(?m)^problem: action cache entry ` + treeless + `: tree ` + cache.DigestOf(tree).Hash + `.* is missing`,
		"the entry that does not decode":   `(?m)^problem: action cache entry ` + garbage + `: not an ActionResult`,
		"the directory in place of entry":  `(?m)^problem: ` + regexp.QuoteMeta(acPath(dirKey)) + `: unexpected directory in the action cache`,
		"the count of entries":             `, 12 action cache entries, \d+ blobs and 0 executable twins checked, 5 problems`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("cache verify --dir does not report %s (%s):\n%s", what, want, out)
		}
	}

	out, code = runGantry(t, "cache", "verify", "--dir", s.dir, "--repair")
	if code != 0 {
		t.Fatalf("cache verify --dir --repair: exit %d, want 0:\n%s", code, out)
	}
	for _, key := range []string{deleted, damaged, treeless, garbage, dirKey} {
		if _, err := os.Lstat(acPath(key)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("entry %s is still in the store after --repair (%v)", key, err)
		}
	}
	if _, err := os.Stat(s.blobPath(damagedHash)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the damaged blob is still in the store after --repair (%v)", err)
	}
	if out, code := runGantry(t, "cache", "verify", "--dir", s.dir); code != 0 || !strings.Contains(out, "8 action cache entries") {
		t.Errorf("cache verify --dir after --repair: exit %d, want 0 and the 8 sound entries:\n%s", code, out)
	}
	for _, key := range sound {
		if code, _ := s.request("GET", "/ac/"+key, nil, true); code != http.StatusOK {
			t.Errorf("GET of the sound entry %s after --repair: status %d", key, code)
		}
	}
	if _, code := runGantry(t, "cache", "verify", "--dir", filepath.Join(t.TempDir(), "nowhere")); code != 2 {
		t.Errorf("cache verify --dir of a directory that is no store: exit %d, want 2", code)
	}
}

// TestVerifyRepairsDirectoryInPlaceOfRef: a directory where an artifact's ref
// should be made every build of that element fail. `cache verify` reports it and
// --repair removes it; and a build now replaces it itself (the write of the ref
// removes a directory in its place), so the element builds either way.
func TestVerifyRepairsDirectoryInPlaceOfRef(t *testing.T) {
	t.Parallel()
	p := newIntegrityProject(t, "cp %{sysroot}/a.txt %{install-root}/copy.txt")
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "base.toml")
	refs, _ := filepath.Glob(filepath.Join(p.cache, "refs", "*", "base.toml", "*"))
	if len(refs) != 1 {
		t.Fatalf("refs of base.toml: %v, want one", refs)
	}
	dirInPlace := func() {
		t.Helper()
		if err := os.RemoveAll(refs[0]); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(refs[0], "stray"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dirInPlace()
	out, _ := p.mustRun(1, "cache", "verify")
	if !strings.Contains(out, refs[0]+" is a directory where an artifact ref should be") {
		t.Errorf("cache verify does not report the directory %s:\n%s", refs[0], out)
	}
	out, _ = p.mustRun(0, "cache", "verify", "--repair")
	if !strings.Contains(out, "repaired: removed the directory "+refs[0]) {
		t.Errorf("cache verify --repair does not say it removed %s:\n%s", refs[0], out)
	}
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host")
	if got := p.checkoutFile("app.toml", "copy.txt"); got != integrityContent {
		t.Errorf("app.toml's copy.txt is %q, want %q", got, integrityContent)
	}
	p.verifyCache()

	dirInPlace()
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "base.toml")
	if info, err := os.Lstat(refs[0]); err != nil || !info.Mode().IsRegular() {
		t.Errorf("the build did not replace the directory in place of base.toml's ref (%v, %v)", info, err)
	}
	p.verifyCache()
}

// TestGCRefusesAServerStore: the blobs a server's action cache entries name are
// reached by no artifact ref, so a local cleanup of its store (`cache gc
// --cache-dir STORE`, with or without a quota) took every one of them for
// garbage. It is refused as bad usage, naming the server's own quota, and the
// entries still hit.
func TestGCRefusesAServerStore(t *testing.T) {
	s := startServe(t)
	blob, _ := randomBlob(t, 100)
	d := cache.DigestOf(blob)
	if code, _ := s.request("PUT", "/cas/"+d.Hash, blob, true); code != http.StatusOK {
		t.Fatalf("PUT: status %d", code)
	}
	data, _ := proto.Marshal(&repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "f", Digest: d.Proto()}}})
	_, key := randomBlob(t, 10)
	if code, _ := s.request("PUT", "/ac/"+key, data, true); code != http.StatusOK {
		t.Fatalf("PUT /ac: status %d", code)
	}
	for _, args := range [][]string{{"cache", "gc", "--cache-dir", s.dir}, {"cache", "gc", "--cache-dir", s.dir, "--quota", "1"}} {
		cmd := exec.Command(gantryBinary(t), args...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "cache serve --quota") {
			t.Errorf("gantry %s: exit %d, want 2 and the server's quota named:\n%s", strings.Join(args, " "), code, out)
		}
		if _, err := os.Stat(s.blobPath(d.Hash)); err != nil {
			t.Fatalf("gantry %s removed a blob the action cache needs: %v", strings.Join(args, " "), err)
		}
	}
	if code, _ := s.request("GET", "/ac/"+key, nil, true); code != http.StatusOK {
		t.Errorf("GET of the entry after the refused gc: status %d", code)
	}
}
