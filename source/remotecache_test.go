package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeAssets is an AssetCache in memory.
type fakeAssets struct {
	mu      sync.Mutex
	blobs   map[string][]byte // by uri and qualifiers
	canPush bool
	gets    int
}

func newFakeAssets(canPush bool) *fakeAssets {
	return &fakeAssets{blobs: map[string][]byte{}, canPush: canPush}
}

func assetName(uri string, qs [][2]string) string { return fmt.Sprint(uri, qs) }

func (f *fakeAssets) Name() string  { return "grpc://cache.test:1" }
func (f *fakeAssets) CanPush() bool { return f.canPush }
func (f *fakeAssets) GetAsset(_ context.Context, uri string, qs [][2]string, w io.Writer) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	data, ok := f.blobs[assetName(uri, qs)]
	if !ok {
		return false, nil
	}
	_, err := w.Write(data)
	return true, err
}
func (f *fakeAssets) PutAsset(_ context.Context, uri string, qs [][2]string, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blobs[assetName(uri, qs)] = data
	return nil
}

// TestFetchTarThroughRemote: a fetched tarball is given to a remote that may
// be pushed to, under its url and checksum.sri; a fresh source cache fetches it
// from there without upstream; bytes from the remote that are not the ref's
// are not stored, and upstream serves instead.
func TestFetchTarThroughRemote(t *testing.T) {
	tarball := makeTar(t, file("a.txt", "a\n"))
	sum := sha256.Sum256(tarball)
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); w.Write(tarball) }))
	defer up.Close()
	s := &Spec{Kind: Tar, URL: up.URL + "/a.tar", Ref: hex.EncodeToString(sum[:])}
	fake := newFakeAssets(true)
	if err := Fetch(context.Background(), s, FetchOptions{SourcesDir: t.TempDir(), Remotes: []AssetCache{fake}}); err != nil {
		t.Fatal(err)
	}
	uri, qs := fileAsset(s)
	if uri != s.URL || qs[0][0] != "checksum.sri" || !bytes.Equal(fake.blobs[assetName(uri, qs)], tarball) {
		t.Fatalf("the remote got %v %v: %d bytes", uri, qs, len(fake.blobs[assetName(uri, qs)]))
	}

	before := hits.Load()
	fresh := t.TempDir()
	if err := Fetch(context.Background(), s, FetchOptions{SourcesDir: fresh, Remotes: []AssetCache{fake}}); err != nil || !Cached(fresh, s) {
		t.Fatalf("fetch from the remote: %v, cached %v", err, Cached(fresh, s))
	}
	if hits.Load() != before {
		t.Error("upstream was asked although the remote had the tarball")
	}

	fake.blobs[assetName(uri, qs)] = []byte("wrong bytes")
	var log strings.Builder
	fresh = t.TempDir()
	if err := Fetch(context.Background(), s, FetchOptions{SourcesDir: fresh, Remotes: []AssetCache{fake}, Log: &log}); err != nil || !Cached(fresh, s) {
		t.Fatalf("fetch past a remote with wrong bytes: %v", err)
	}
	if hits.Load() != before+1 || !strings.Contains(log.String(), "remote grpc://cache.test:1: checksum mismatch for "+s.URL) {
		t.Errorf("upstream asked %d times; log:\n%s", hits.Load()-before, log.String())
	}
}

// TestFetchGitThroughRemote: a fetched commit is given to the remote as a
// bundle; a fresh source cache, with the repository gone, fetches it from the
// remote and stages it; with neither, the error names the source and the
// remote tried.
func TestFetchGitThroughRemote(t *testing.T) {
	needGit(t)
	u := newUpstream(t, "repo")
	u.write("f.txt", "from git\n", 0o644)
	ref := u.commit("one")
	s := &Spec{Kind: Git, URL: u.url(), Ref: ref}
	fake := newFakeAssets(true)
	if err := Fetch(context.Background(), s, FetchOptions{SourcesDir: t.TempDir(), Remotes: []AssetCache{fake}}); err != nil {
		t.Fatal(err)
	}
	if len(fake.blobs) != 1 {
		t.Fatalf("the remote holds %d assets, want the commit's bundle", len(fake.blobs))
	}
	if err := os.Rename(u.dir, u.dir+".moved"); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	if err := Fetch(context.Background(), s, FetchOptions{SourcesDir: fresh, Remotes: []AssetCache{fake}}); err != nil || !Cached(fresh, s) {
		t.Fatalf("fetch from the remote: %v", err)
	}
	dest := t.TempDir()
	if err := Stage(context.Background(), s, StageOptions{SourcesDir: fresh, BuildRoot: dest}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(dest + "/f.txt"); err != nil || string(got) != "from git\n" {
		t.Errorf("staged %q (%v)", got, err)
	}

	err := Fetch(context.Background(), s, FetchOptions{SourcesDir: t.TempDir(), Remotes: []AssetCache{newFakeAssets(false)}})
	want := "fetching git " + u.url() + ": "
	tail := "; the remotes keeping sources did not serve it either (remote grpc://cache.test:1: not in its source cache)"
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), tail) {
		t.Errorf("fetch with neither: %v\nwant %q … %q", err, want, tail)
	}
}
