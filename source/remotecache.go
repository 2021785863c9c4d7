package source

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Sources through a cache: a [[remote]] with sources = true keeps sources as
// Remote Asset blobs (cache/remote's Assets). Fetch asks each such remote
// before the source's own URLs, and gives the remotes that may be pushed to
// what those URLs served. The names:
//   - a tar or remote file: the url as written (alias and all, without
//     userinfo) with the qualifier checksum.sri = sha256-BASE64 of its ref,
//     as Bazel's remote downloader names the same download;
//   - a git commit: urn:gantry:git-bundle:URL (the url as written) with the
//     qualifier vcs.commit = the commit: a git bundle of the commit's history,
//     fetched into the mirror. Submodules go the same way, each its own.
//
// A remote that fails or lacks a source costs nothing but the asking: the
// source's URLs are tried next, and an error names the remotes tried too.

// AssetCache is a remote that keeps sources.
type AssetCache interface {
	Name() string
	// CanPush says whether fetched sources are given to it.
	CanPush() bool
	// GetAsset writes the blob held for uri and exactly the qualifiers qs to w;
	// found is false when there is none.
	GetAsset(ctx context.Context, uri string, qs [][2]string, w io.Writer) (found bool, err error)
	// PutAsset stores the file at path for uri and qs.
	PutAsset(ctx context.Context, uri string, qs [][2]string, path string) error
}

// gitBundleRef is the ref a git bundle of the cache carries (and, while the
// bundle is made, the mirror).
const gitBundleRef = "refs/gantry/snapshot"

func fileAsset(s *Spec) (string, [][2]string) {
	sum, _ := hex.DecodeString(s.Ref)
	return redactURL(s.URL), [][2]string{{"checksum.sri", "sha256-" + base64.StdEncoding.EncodeToString(sum)}}
}

func gitAsset(url, ref string) (string, [][2]string) {
	return "urn:gantry:git-bundle:" + redactURL(url), [][2]string{{"vcs.commit", ref}}
}

// errNotOnRemote is a remote without the asset.
var errNotOnRemote = errors.New("not in its source cache")

// missed notes why r did not serve the source being fetched.
func (o *FetchOptions) missed(r AssetCache, err error) {
	if errors.Is(err, errNotOnRemote) {
		o.remoteMisses = append(o.remoteMisses, fmt.Sprintf("remote %s: not in its source cache", r.Name()))
		return
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "remote "+r.Name()+": ") { // a *remote.Error names it already
		msg = fmt.Sprintf("remote %s: %s", r.Name(), msg)
	}
	o.logf("%s; trying the source's urls", msg)
	o.remoteMisses = append(o.remoteMisses, msg)
}

// RemotesMissedError is a source that neither the remotes keeping sources nor
// its own URLs served. It unwraps to the URLs' failure (IsTemporary asks that).
type RemotesMissedError struct {
	Source string   // Describe()
	Misses []string // per remote tried, why it did not serve
	Err    error
}

func (e *RemotesMissedError) Error() string {
	return fmt.Sprintf("%s: %v; the remotes keeping sources did not serve it either (%s)", e.Source, e.Err, strings.Join(e.Misses, "; "))
}

func (e *RemotesMissedError) Unwrap() error { return e.Err }

// missedRemotes adds to err, the failure of s's URLs, the remotes asked before them.
func (o *FetchOptions) missedRemotes(s *Spec, err error) error {
	if len(o.remoteMisses) == 0 {
		return err
	}
	return &RemotesMissedError{Source: "fetching " + s.Describe(), Misses: o.remoteMisses, Err: err}
}

// fileFromRemotes stores s's file from the first remote that has it, checked
// against its ref.
func fileFromRemotes(ctx context.Context, s *Spec, o *FetchOptions) bool {
	o.remoteMisses = nil
	uri, qs := fileAsset(s)
	for _, r := range o.Remotes {
		_, err := storeFrom(uri, s.Ref, o, func(w io.Writer) error {
			found, err := r.GetAsset(ctx, uri, qs, w)
			if err == nil && !found {
				return errNotOnRemote
			}
			return err
		})
		if err != nil {
			o.missed(r, err)
			continue
		}
		o.logf("%s served by remote %s", redactURL(s.URL), r.Name())
		if o.Served != nil {
			o.Served("remote " + r.Name())
		}
		return true
	}
	return false
}

// pushFile gives s's stored file to the remotes that may be pushed to. A
// failure is only logged: the fetch itself succeeded.
func pushFile(ctx context.Context, s *Spec, o *FetchOptions) {
	uri, qs := fileAsset(s)
	for _, r := range o.Remotes {
		if r.CanPush() {
			if err := r.PutAsset(ctx, uri, qs, cachedFile(o.SourcesDir, s.Ref)); err != nil {
				o.logf("warning: pushing %s to remote %s: %v", redactURL(s.URL), r.Name(), err)
			}
		}
	}
}

// gitFromRemotes brings commit ref of repo into its mirror m from the first
// remote that has a bundle of it. The caller holds the mirror's lock.
func gitFromRemotes(ctx context.Context, repo *Spec, m, ref string, o *FetchOptions) bool {
	o.remoteMisses = nil
	if len(o.Remotes) == 0 {
		return false
	}
	uri, qs := gitAsset(repo.URL, ref)
	tmpParent := filepath.Join(o.SourcesDir, tmpDir)
	if err := os.MkdirAll(tmpParent, 0o755); err != nil {
		return false
	}
	for _, r := range o.Remotes {
		err := func() error {
			f, err := os.CreateTemp(tmpParent, "bundle-*")
			if err != nil {
				return err
			}
			defer os.Remove(f.Name())
			found, err := r.GetAsset(ctx, uri, qs, f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil && !found {
				return errNotOnRemote
			}
			if err != nil {
				return err
			}
			if _, err := os.Stat(m); os.IsNotExist(err) {
				if err := initMirror(ctx, m, o); err != nil {
					return err
				}
			}
			if _, err := runGit(ctx, gitRun{}, "--git-dir="+m, "fetch", "--quiet", "--no-tags", f.Name(), gitBundleRef); err != nil {
				return fmt.Errorf("reading its bundle of %s: %w", redactURL(repo.URL), err)
			}
			if !hasCommit(ctx, m, ref) {
				return fmt.Errorf("its bundle of %s lacks commit %s", redactURL(repo.URL), ref)
			}
			return nil
		}()
		if err != nil {
			o.missed(r, err)
			continue
		}
		o.logf("git %s at %s served by remote %s", redactURL(repo.URL), ref, r.Name())
		if o.Served != nil {
			o.Served("remote " + r.Name())
		}
		return true
	}
	return false
}

// initMirror makes an empty mirror at m (made aside and renamed: a mirror is
// absent or whole).
func initMirror(ctx context.Context, m string, o *FetchOptions) error {
	tmp, err := os.MkdirTemp(filepath.Join(o.SourcesDir, tmpDir), "git-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, filepath.Base(m))
	if _, err := runGit(ctx, gitRun{}, "init", "--bare", "--quiet", dir); err != nil {
		return err
	}
	if _, err := runGit(ctx, gitRun{}, "--git-dir="+dir, "config", "gc.auto", "0"); err != nil {
		return err
	}
	return os.Rename(dir, m)
}

// pushGit gives a bundle of commit ref of repo's mirror m to the remotes that
// may be pushed to. A failure is only logged. The caller holds the mirror's lock.
func pushGit(ctx context.Context, repo *Spec, m, ref string, o *FetchOptions) {
	var pushers []AssetCache
	for _, r := range o.Remotes {
		if r.CanPush() {
			pushers = append(pushers, r)
		}
	}
	if len(pushers) == 0 {
		return
	}
	warn := func(err error) {
		o.logf("warning: pushing git %s at %s to the remotes: %v", redactURL(repo.URL), ref, err)
	}
	f, err := os.CreateTemp(filepath.Join(o.SourcesDir, tmpDir), "bundle-*")
	if err != nil {
		warn(err)
		return
	}
	f.Close()
	defer os.Remove(f.Name())
	os.Remove(f.Name()) // git bundle create makes it
	if _, err := runGit(ctx, gitRun{}, "--git-dir="+m, "update-ref", gitBundleRef, ref); err != nil {
		warn(err)
		return
	}
	_, err = runGit(ctx, gitRun{}, "--git-dir="+m, "bundle", "create", "--quiet", f.Name(), gitBundleRef)
	runGit(ctx, gitRun{}, "--git-dir="+m, "update-ref", "-d", gitBundleRef)
	if err != nil {
		warn(err)
		return
	}
	uri, qs := gitAsset(repo.URL, ref)
	for _, r := range pushers {
		if err := r.PutAsset(ctx, uri, qs, f.Name()); err != nil {
			o.logf("warning: pushing git %s at %s to remote %s: %v", redactURL(repo.URL), ref, r.Name(), err)
		}
	}
}
