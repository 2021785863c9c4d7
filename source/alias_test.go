package source

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The part before the first ':' is an alias when it could be one: not a URL scheme, not
// a host of an scp-like git url.
func TestSplitAlias(t *testing.T) {
	for _, tc := range []struct {
		url, alias, rest string
		ok               bool
	}{
		{"gnu:hello/hello-2.12.tar.gz", "gnu", "hello/hello-2.12.tar.gz", true},
		{"my_mirror-2:x", "my_mirror-2", "x", true},
		{"https://example.com/a", "", "", false},
		{"HTTP://example.com/a", "", "", false},
		{"file:relative/a.tar", "", "", false},
		{"git://example.com/a", "", "", false},
		{"ssh://example.com/a", "", "", false},
		{"git@example.com:a/b.git", "", "", false},
		{"example.com:a/b.git", "", "", false},
		{"/srv/repo.git", "", "", false},
		{"repo", "", "", false},
		{"-opt:x", "", "", false},
		{"_a:x", "", "", false},
		{":x", "", "", false},
	} {
		alias, rest, ok := splitAlias(tc.url)
		if alias != tc.alias || rest != tc.rest || ok != tc.ok {
			t.Errorf("splitAlias(%q) = %q, %q, %t; want %q, %q, %t", tc.url, alias, rest, ok, tc.alias, tc.rest, tc.ok)
		}
	}
	if err := CheckAliasName("ssh"); err == nil || err.Error() != `"ssh" is a URL scheme, which cannot be an alias (URL schemes: http, https, file, git, ssh, ftp, sftp)` {
		t.Errorf("CheckAliasName(ssh) = %v", err)
	}
}

// A mirror with wrong bytes, then one that answers 503, then upstream: fetch moves on
// past both and stores upstream's; a failure that is not the remote's (the source cache
// unusable) stops at once.
func TestFetchMovesOnThroughMirrors(t *testing.T) {
	archive := gzipped(t, makeTar(t, file("a", "a\n")))
	srv := newTarServer(t, map[string][]byte{"app.tar.gz": archive})
	o := fetchOpts(t)
	var served []string
	o.Served = func(u string) { served = append(served, u) }
	s := &Spec{Kind: Tar, URL: "up:app.tar.gz", Ref: sha(archive)}
	if err := Resolve(s, map[string]string{"up": srv.URL + "/"}, []Mirror{
		{Name: "wrong", Aliases: map[string][]string{"up": {srv.URL + "/wrong/"}}},
		{Name: "busy", Aliases: map[string][]string{"up": {srv.URL + "/status/503/"}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	if want := []string{srv.URL + "/app.tar.gz"}; !slices.Equal(served, want) {
		t.Errorf("served by %q, want %q", served, want)
	}
	for _, p := range []string{"/wrong/app.tar.gz", "/status/503/app.tar.gz", "/app.tar.gz"} {
		if n := srv.Count(p); n != 1 {
			t.Errorf("%s: %d requests, want 1", p, n)
		}
	}

	// Every URL fails: each failure is named, and the whole is temporary because the
	// 503 was.
	s.Upstream = srv.URL + "/status/404/app.tar.gz"
	o = fetchOpts(t)
	err := Fetch(context.Background(), s, o)
	var me *MirrorsError
	if !errors.As(err, &me) || len(me.Errs) != 3 || !IsTemporary(err) {
		t.Fatalf("all failing: %v (temporary %t)", err, IsTemporary(err))
	}
	if !strings.HasPrefix(err.Error(), "no URL served up:app.tar.gz: checksum mismatch for "+srv.URL+"/wrong/app.tar.gz") {
		t.Errorf("message: %v", err)
	}

	// Not the remote's failure: no other URL is tried.
	o = fetchOpts(t)
	os.MkdirAll(filepath.Dir(o.SourcesDir), 0o755)
	os.WriteFile(o.SourcesDir, []byte("not a directory"), 0o644)
	before := srv.Total()
	if err := Fetch(context.Background(), s, o); err == nil || errors.As(err, &me) {
		t.Errorf("an unusable source cache: %v", err)
	}
	if n := srv.Total() - before; n != 0 {
		t.Errorf("%d requests with an unusable source cache", n)
	}
}

// A git mirror that lags behind (no commit) is passed over for upstream; the bare
// mirror in the source cache is the url's as written, whichever URL served; track asks
// upstream only unless TrackWithMirrors, and says how to ask the mirrors.
func TestGitMirrors(t *testing.T) {
	needGit(t)
	up := newUpstream(t, "lib")
	up.write("a.c", "int a;\n", 0o644)
	up.commit("one")
	stale := &upstream{t: t, dir: filepath.Join(t.TempDir(), "lib")}
	stale.git("clone", "--quiet", "--mirror", up.dir, stale.dir)
	up.write("a.c", "int a = 2;\n", 0o644)
	c2 := up.commit("two")

	o := fetchOpts(t)
	s := &Spec{Kind: Git, URL: "repos:lib", Ref: c2, DotGit: true}
	mirrors := []Mirror{{Name: "stale", Aliases: map[string][]string{"repos": {"file://" + filepath.Dir(stale.dir) + "/"}}}}
	if err := Resolve(s, map[string]string{"repos": "file://" + filepath.Dir(up.dir) + "/"}, mirrors); err != nil {
		t.Fatal(err)
	}
	var served string
	o.Served = func(u string) { served = u }
	if err := Fetch(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	if served != up.url() {
		t.Errorf("served by %s, want upstream %s", served, up.url())
	}
	if _, err := os.Stat(mirrorPath(o.SourcesDir, "repos:lib")); err != nil {
		t.Errorf("the bare mirror is not the alias url's: %v", err)
	}
	build := t.TempDir()
	if err := Stage(context.Background(), s, StageOptions{SourcesDir: o.SourcesDir, BuildRoot: build}); err != nil {
		t.Fatal(err)
	}
	if origin := (&upstream{t: t, dir: build}).git("remote", "get-url", "origin"); origin != up.url() {
		t.Errorf("origin = %s, want upstream %s", origin, up.url())
	}

	// Upstream gone: track fails, naming --track-with-mirrors; with it, the mirror answers.
	os.RemoveAll(up.dir)
	s.Track = "main"
	_, err := Track(context.Background(), s, o)
	if err == nil || !strings.HasPrefix(err.Error(), "tracking from upstream only, as a mirror may lag behind it (--track-with-mirrors asks the mirrors too): git fetch "+up.url()+": ") {
		t.Errorf("track with upstream gone: %v", err)
	}
	o.TrackWithMirrors = true
	if _, err := Track(context.Background(), s, o); err != nil || served != "file://"+stale.dir {
		t.Errorf("track with mirrors: %v, served by %s", err, served)
	}
}
