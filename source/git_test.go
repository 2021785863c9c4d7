package source

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needGit skips the test when git is missing, except in CI, where it must be there.
func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git is not installed (required in CI)")
		}
		t.Skip("git is not installed")
	}
	// Isolate the tests from the user's git configuration.
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", home)
	t.Setenv("GIT_CONFIG_GLOBAL", filepath.Join(home, "gitconfig"))
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	for _, v := range []string{"GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"} {
		t.Setenv(v, "Test")
	}
	for _, v := range []string{"GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"} {
		t.Setenv(v, "test@example.com")
	}
}

// upstream is a repository made by a test.
type upstream struct {
	t   *testing.T
	dir string
}

func newUpstream(t *testing.T, name string) *upstream {
	u := &upstream{t: t, dir: filepath.Join(t.TempDir(), name)}
	u.git("init", "--quiet", "--initial-branch=main", u.dir)
	return u
}

func (u *upstream) url() string { return "file://" + u.dir }

func (u *upstream) git(args ...string) string {
	u.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = filepath.Dir(u.dir)
	if _, err := os.Stat(u.dir); err == nil {
		cmd.Dir = u.dir
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		u.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func (u *upstream) write(name, body string, mode os.FileMode) {
	u.t.Helper()
	p := filepath.Join(u.dir, name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		u.t.Fatal(err)
	}
	os.Chmod(p, mode)
}

func (u *upstream) commit(msg string) string {
	u.t.Helper()
	u.git("add", "-A")
	u.git("commit", "--quiet", "-m", msg)
	return u.git("rev-parse", "HEAD")
}

func TestGitTrackFetchStage(t *testing.T) {
	needGit(t)
	up := newUpstream(t, "app.git")
	up.write("README", "version 1\n", 0o644)
	up.write("bin/run", "#!/bin/sh\necho run\n", 0o755)
	up.write("old.txt", "goes away\n", 0o644)
	os.Symlink("README", filepath.Join(up.dir, "LINK"))
	c1 := up.commit("one")
	up.git("tag", "-a", "-m", "release", "v1")
	up.git("branch", "stable")
	ctx := context.Background()

	o := fetchOpts(t)
	track := func(what string) string {
		t.Helper()
		ref, err := Track(ctx, &Spec{Kind: Git, URL: up.url(), Track: what}, o)
		if err != nil {
			t.Fatalf("Track %s: %v", what, err)
		}
		return ref
	}
	if got := track("main"); got != c1 {
		t.Fatalf("Track main = %s, want %s", got, c1)
	}
	if got := track("v1"); got != c1 {
		t.Errorf("Track v1 (annotated tag) = %s, want %s", got, c1)
	}

	// Upstream moves on: a new commit on main, the stable branch moved to it.
	up.write("README", "version 2\n", 0o644)
	up.write("new.txt", "new\n", 0o644)
	os.Remove(filepath.Join(up.dir, "old.txt"))
	c2 := up.commit("two")
	up.git("branch", "--force", "stable", c2)
	if got := track("main"); got != c2 {
		t.Errorf("Track main after a new commit = %s, want %s", got, c2)
	}
	if got := track("stable"); got != c2 {
		t.Errorf("Track stable after the branch moved = %s, want %s", got, c2)
	}
	if got := track(""); got != c2 {
		t.Errorf("Track with no track (HEAD) = %s, want %s", got, c2)
	}
	if got := track("v1"); got != c1 {
		t.Errorf("Track v1 after the branch moved = %s, want %s", got, c1)
	}
	if _, err := Track(ctx, &Spec{Kind: Git, URL: up.url(), Track: "no-such-branch"}, o); err == nil || !strings.Contains(err.Error(), "no-such-branch") {
		t.Errorf("Track of a missing branch: want an error naming it, got %v", err)
	}

	// A fresh cache: Fetch, then Stage exactly c1.
	o = fetchOpts(t)
	s := &Spec{Kind: Git, URL: up.url(), Track: "main", Ref: c1, Directory: "src"}
	if Cached(o.SourcesDir, s) {
		t.Fatal("Cached before fetching")
	}
	if err := Fetch(ctx, s, o); err != nil {
		t.Fatal(err)
	}
	if !Cached(o.SourcesDir, s) {
		t.Fatal("not Cached after fetching")
	}
	mirrors, _ := filepath.Glob(filepath.Join(o.SourcesDir, "git", "*-app.git"))
	if len(mirrors) != 1 {
		t.Errorf("mirrors: %v", mirrors)
	}
	build := t.TempDir()
	so := StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build}
	if err := Stage(ctx, s, so); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(listTree(t, filepath.Join(build, "src")), " ")
	want := "LINK->README README=version 1\n bin/ bin/run=#!/bin/sh\necho run\n old.txt=goes away\n"
	if got != want {
		t.Errorf("staged %q, want %q", got, want)
	}
	if info, _ := os.Stat(filepath.Join(build, "src", "bin", "run")); info == nil || info.Mode().Perm()&0o111 == 0 {
		t.Errorf("bin/run lost its exec bit")
	}

	// The mirror exists but lacks c3: Fetch updates it.
	up.write("new.txt", "newer\n", 0o644)
	c3 := up.commit("three")
	s2 := &Spec{Kind: Git, URL: up.url(), Ref: c3}
	if Cached(o.SourcesDir, s2) {
		t.Fatal("c3 Cached before fetching it")
	}
	if err := Fetch(ctx, s2, o); err != nil {
		t.Fatal(err)
	}
	build2 := t.TempDir()
	if err := Stage(ctx, s2, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build2}); err != nil {
		t.Fatal(err)
	}
	got = strings.Join(listTree(t, build2), " ")
	want = "LINK->README README=version 2\n bin/ bin/run=#!/bin/sh\necho run\n new.txt=newer\n"
	if got != want {
		t.Errorf("staged c3 %q, want %q", got, want)
	}

	// Fetch of a cached commit needs no remote at all.
	os.RemoveAll(up.dir)
	if err := Fetch(ctx, s, o); err != nil {
		t.Errorf("Fetch of a cached commit: %v", err)
	}
}

func TestGitCheckoutDotGit(t *testing.T) {
	needGit(t)
	up := newUpstream(t, "lib")
	up.write("a.c", "int a;\n", 0o644)
	c1 := up.commit("one")
	up.write("a.c", "int a = 2;\n", 0o644)
	up.commit("two")
	o := fetchOpts(t)
	s := &Spec{Kind: Git, URL: up.url(), Ref: c1, DotGit: true}
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	build := t.TempDir()
	os.WriteFile(filepath.Join(build, "other-source"), []byte("x"), 0o644)
	if err := Stage(context.Background(), s, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build}); err != nil {
		t.Fatal(err)
	}
	repo := &upstream{t: t, dir: build}
	if head := repo.git("rev-parse", "HEAD"); head != c1 {
		t.Errorf("HEAD = %s, want %s", head, c1)
	}
	if origin := repo.git("remote", "get-url", "origin"); origin != up.url() {
		t.Errorf("origin = %s, want %s", origin, up.url())
	}
	if status := repo.git("status", "--porcelain", "--untracked-files=no"); status != "" {
		t.Errorf("the checkout is not clean: %s", status)
	}
	if got := readFile(t, filepath.Join(build, "a.c")); got != "int a;\n" {
		t.Errorf("a.c = %q", got)
	}
}

func TestGitSubmodules(t *testing.T) {
	needGit(t)
	base := t.TempDir()
	sub := &upstream{t: t, dir: filepath.Join(base, "sub")}
	sub.git("init", "--quiet", "--initial-branch=main", sub.dir)
	sub.write("sub.txt", "inside the submodule\n", 0o644)
	subCommit := sub.commit("sub")
	sub.write("sub.txt", "a later version\n", 0o644)
	sub.commit("later")

	up := &upstream{t: t, dir: filepath.Join(base, "super")}
	up.git("init", "--quiet", "--initial-branch=main", up.dir)
	up.write("top.txt", "top\n", 0o644)
	up.git("submodule", "--quiet", "add", "../sub", "vendor/sub") // a relative url
	up.git("-C", "vendor/sub", "checkout", "--quiet", subCommit)
	ref := up.commit("with a submodule")

	o := fetchOpts(t)
	s := &Spec{Kind: Git, URL: up.url(), Ref: ref, Submodules: true}
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	if !Cached(o.SourcesDir, s) {
		t.Fatal("not Cached after fetching with submodules")
	}
	if mirrors, _ := filepath.Glob(filepath.Join(o.SourcesDir, "git", "*-sub")); len(mirrors) != 1 {
		t.Errorf("the submodule has no mirror: %v", mirrors)
	}
	build := t.TempDir()
	if err := Stage(context.Background(), s, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(build, "vendor", "sub", "sub.txt")); got != "inside the submodule\n" {
		t.Errorf("submodule staged %q, want the recorded commit's content", got)
	}
	if _, err := os.Stat(filepath.Join(build, "vendor", "sub", ".git")); err == nil {
		t.Error("the submodule has a .git")
	}

	// Without submodules = true the directory stays empty and needs no submodule mirror.
	plain := &Spec{Kind: Git, URL: up.url(), Ref: ref}
	build2 := t.TempDir()
	if err := Stage(context.Background(), plain, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build2}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(build2, "vendor", "sub", "sub.txt")); err == nil {
		t.Error("submodule staged without submodules = true")
	}
}

func TestGitErrors(t *testing.T) {
	needGit(t)
	o := fetchOpts(t)
	missing := "file://" + filepath.Join(t.TempDir(), "no-such-repo")
	s := &Spec{Kind: Git, URL: missing, Ref: strings.Repeat("a", 40)}
	err := Fetch(context.Background(), s, o)
	if err == nil {
		t.Fatal("Fetch of a missing repository succeeded")
	}
	t.Log(err)
	for _, want := range []string{"git clone", missing, "--mirror", "does not appear to be a git repository"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q: %v", want, err)
		}
	}
	if IsTemporary(err) {
		t.Error("a missing repository is temporary")
	}
	if entries, _ := os.ReadDir(filepath.Join(o.SourcesDir, "git")); len(entries) > 1 { // the lock file only
		t.Errorf("a failed clone left %d entries in git/", len(entries))
	}

	up := newUpstream(t, "r")
	up.write("f", "x", 0o644)
	up.commit("c")
	bad := &Spec{Kind: Git, URL: up.url(), Ref: strings.Repeat("b", 40)}
	if err := Fetch(context.Background(), bad, o); err == nil || !strings.Contains(err.Error(), "not in the repository") {
		t.Errorf("Fetch of an unknown commit: got %v", err)
	}
	if err := Fetch(context.Background(), &Spec{Kind: Git, URL: up.url(), Ref: "main"}, o); err == nil || !strings.Contains(err.Error(), "full commit id") {
		t.Errorf("Fetch with a branch as ref: got %v", err)
	}
	if err := Stage(context.Background(), bad, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "gantry fetch") {
		t.Errorf("Stage of an unfetched commit: got %v", err)
	}
}

func TestRemoteGitErrorClassification(t *testing.T) {
	tests := []struct {
		stderr    string
		temporary bool
		status    int
	}{
		{"fatal: unable to access 'https://x/': Could not resolve host: x", true, 0},
		{"fatal: unable to access 'https://x/': The requested URL returned error: 503", true, 503},
		{"fatal: unable to access 'https://x/': The requested URL returned error: 404", false, 404},
		{"error: RPC failed; curl 18 transfer closed with outstanding read data remaining\nfatal: early EOF", true, 0},
		{"fatal: repository 'https://x/' not found", false, 0},
		{"fatal: Authentication failed for 'https://x/'", false, 0},
	}
	for _, tt := range tests {
		err := remoteError("https://x/", "git fetch", &gitError{args: []string{"fetch"}, stderr: tt.stderr})
		var ne *NetworkError
		if !errors.As(err, &ne) {
			t.Fatalf("%q: not a NetworkError: %v", tt.stderr, err)
		}
		if IsTemporary(err) != tt.temporary || ne.Status != tt.status {
			t.Errorf("%q: temporary %t status %d, want %t %d", tt.stderr, ne.Temporary, ne.Status, tt.temporary, tt.status)
		}
	}
}

func TestSubmoduleURL(t *testing.T) {
	tests := []struct{ parent, url, want string }{
		{"https://host/group/super.git", "../lib.git", "https://host/group/lib.git"},
		{"https://host/group/super.git/", "./lib", "https://host/group/super.git/lib"},
		{"https://host/group/super", "../../other/lib", "https://host/other/lib"},
		{"git@host:group/super.git", "../lib.git", "git@host:group/lib.git"},
		{"git@host:super.git", "../lib.git", "git@host:lib.git"},
		{"https://host/super", "https://elsewhere/lib", "https://elsewhere/lib"},
	}
	for _, tt := range tests {
		if got := resolveSubmoduleURL(tt.parent, tt.url); got != tt.want {
			t.Errorf("resolveSubmoduleURL(%q, %q) = %q, want %q", tt.parent, tt.url, got, tt.want)
		}
	}
}

func TestMirrorPath(t *testing.T) {
	a := mirrorPath("/c", "https://example.com/group/lib.git")
	b := mirrorPath("/c", "https://example.com/other/lib.git")
	if a == b || !strings.HasSuffix(a, "-lib.git") || filepath.Dir(a) != "/c/git" || len(filepath.Base(a)) != 16+1+len("lib.git") {
		t.Errorf("mirror paths %s, %s", a, b)
	}
	if got := filepath.Base(mirrorPath("/c", "https://example.com/")); !strings.HasSuffix(got, "-example.com") {
		t.Errorf("mirror of a bare host: %s", got)
	}
}

func TestGitConcurrentFetches(t *testing.T) {
	needGit(t)
	up := newUpstream(t, "shared")
	up.write("f", "x", 0o644)
	ref := up.commit("c")
	o := fetchOpts(t)
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- Fetch(context.Background(), &Spec{Kind: Git, URL: up.url(), Ref: ref}, o) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if !Cached(o.SourcesDir, &Spec{Kind: Git, URL: up.url(), Ref: ref}) {
		t.Error("not Cached after concurrent fetches")
	}
}

// TestGitSubmoduleLocalURLRefused: an upstream .gitmodules that points at a repository
// elsewhere on the build machine (an absolute path, file://, or ../ climbing out of the
// directory of the element's repository) is refused at fetch, at Cached and at staging,
// even when that repository is mirrored already (another element named it); the
// repository is never read. A submodule beside the element's own local repository stays
// allowed (TestGitSubmodules).
func TestGitSubmoduleLocalURLRefused(t *testing.T) {
	needGit(t)
	secret := newUpstream(t, "secret") // elsewhere: another temp dir
	secret.write("key", "private\n", 0o600)
	secretRef := secret.commit("secret")
	for name, url := range map[string]string{
		"absolute path": secret.dir,
		"climbing out":  strings.Repeat("../", strings.Count(secret.dir, "/")) + strings.TrimPrefix(secret.dir, "/"), // both dirs are as deep
	} {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t, "super")
			up.write("top.txt", "top\n", 0o644)
			up.git("submodule", "--quiet", "add", secret.dir, "vendor/secret")
			up.git("config", "-f", ".gitmodules", "submodule.vendor/secret.url", url)
			ref := up.commit("with a local submodule")

			o := fetchOpts(t)
			s := &Spec{Kind: Git, URL: up.url(), Ref: ref, Submodules: true}
			err := Fetch(context.Background(), s, o)
			if err == nil || !strings.Contains(err.Error(), "submodule vendor/secret") || !strings.Contains(err.Error(), "refused") {
				t.Fatalf("want a refusal naming the submodule, got %v", err)
			}
			if mirrors, _ := filepath.Glob(filepath.Join(o.SourcesDir, "git", "*-secret")); len(mirrors) != 0 {
				t.Errorf("the local repository was mirrored: %v", mirrors)
			}
			// Another element names the repository itself: now it is mirrored, and still
			// the superproject may not use it.
			if err := Fetch(context.Background(), &Spec{Kind: Git, URL: "file://" + secret.dir, Ref: secretRef}, o); err != nil {
				t.Fatal(err)
			}
			if Cached(o.SourcesDir, s) {
				t.Error("Cached with a refused submodule")
			}
			build := t.TempDir()
			err = Stage(context.Background(), s, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build})
			if err == nil || !strings.Contains(err.Error(), "refused") {
				t.Errorf("want staging refused, got %v", err)
			}
			if _, err := os.Stat(filepath.Join(build, "vendor", "secret", "key")); err == nil {
				t.Error("the local repository was staged")
			}
		})
	}
}

// TestGitRefusesFileTransportForSubmodules: git itself refuses the file transport for
// a submodule's url unless gantry allowed it, whatever gantry's own check says.
func TestGitRefusesFileTransportForSubmodules(t *testing.T) {
	needGit(t)
	repo := newUpstream(t, "repo")
	repo.write("a", "a\n", 0o644)
	ref := repo.commit("a")
	o := fetchOpts(t)
	so := o
	so.submodule = true
	err := fetchCommit(context.Background(), repo.url(), &Spec{Kind: Git, URL: repo.url()}, ref, false, &so, 1)
	if err == nil || !strings.Contains(err.Error(), "transport 'file' not allowed") {
		t.Fatalf("want git's refusal of the file transport, got %v", err)
	}
	so.allowFile = true
	if err := fetchCommit(context.Background(), repo.url(), &Spec{Kind: Git, URL: repo.url()}, ref, false, &so, 1); err != nil {
		t.Fatalf("with the file transport allowed: %v", err)
	}
}

func TestSubmoduleURLPolicy(t *testing.T) {
	tests := []struct {
		top, url string
		ok       bool
	}{
		{"https://example.com/a/app.git", "https://example.com/a/lib.git", true},
		{"https://example.com/a/app.git", "git@example.com:a/lib.git", true},
		{"https://example.com/a/app.git", "ssh://example.com/lib.git", true},
		{"https://example.com/a/app.git", "/srv/git/lib.git", false},
		{"https://example.com/a/app.git", "file:///srv/git/lib.git", false},
		{"https://example.com/a/app.git", "FILE:///srv/git/lib.git", false},
		{"https://example.com/a/app.git", "./lib.git", false}, // a path, not resolved against top
		{"https://example.com/a/app.git", "ext::sh -c touch% /tmp/pwned", false},
		{"file:///srv/git/app.git", "file:///srv/git/lib.git", true},
		{"file:///srv/git/app.git", "/srv/git/sub/lib.git", true},
		{"/srv/git/app.git", "file://localhost/srv/git/lib.git", true},
		{"file:///srv/git/app.git", "file:///srv/git/../../home/u/.ssh", false},
		{"file:///srv/git/app.git", "/home/u/secret.git", false},
		{"file:///srv/git/app.git", "/srv/gitx/lib.git", false},
		{"file:///srv/git/app.git", "lib.git", false}, // relative to gantry's working directory
	}
	for _, tt := range tests {
		err := checkSubmoduleURL(tt.top, tt.url)
		if (err == nil) != tt.ok {
			t.Errorf("checkSubmoduleURL(%q, %q) = %v, want ok=%t", tt.top, tt.url, err, tt.ok)
		}
	}
}

// TestGitDeadline: git's network commands stop at the download deadline too, with a
// final (not temporary) error that says so.
func TestGitDeadline(t *testing.T) {
	needGit(t)
	repo := newUpstream(t, "repo")
	repo.write("a", "a\n", 0o644)
	ref := repo.commit("a")
	o := fetchOpts(t)
	o.Deadline = time.Nanosecond
	err := Fetch(context.Background(), &Spec{Kind: Git, URL: repo.url(), Ref: ref}, o)
	if err == nil || !strings.Contains(err.Error(), "the download deadline") {
		t.Fatalf("want the deadline error, got %v", err)
	}
	if IsTemporary(err) {
		t.Error("a passed deadline is temporary")
	}
}

// Date is a git source's commit time at its ref (SOURCE_DATE_EPOCH); other kinds and a
// ref not in the source cache have none.
func TestGitDate(t *testing.T) {
	needGit(t)
	up := newUpstream(t, "dated.git")
	up.write("README", "dated\n", 0o644)
	t.Setenv("GIT_COMMITTER_DATE", "2001-02-03T04:05:06Z")
	ref := up.commit("dated")
	ctx := context.Background()
	o := fetchOpts(t)
	s := &Spec{Kind: Git, URL: up.url(), Ref: ref}
	if _, ok := Date(ctx, s, o.SourcesDir); ok {
		t.Error("a date for a commit not fetched yet")
	}
	if err := Fetch(ctx, s, o); err != nil {
		t.Fatal(err)
	}
	if d, ok := Date(ctx, s, o.SourcesDir); !ok || d.Unix() != 981173106 {
		t.Errorf("Date = %v, %v; want 2001-02-03T04:05:06Z", d.UTC(), ok)
	}
	if _, ok := Date(ctx, &Spec{Kind: Tar, URL: "https://example.com/a.tar", Ref: "abc"}, o.SourcesDir); ok {
		t.Error("a date for a tarball")
	}
}
