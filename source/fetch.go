package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// FetchOptions says where fetched sources go and how to reach the network.
type FetchOptions struct {
	SourcesDir  string                  // cache/sources: shared by all projects
	ProjectRoot string                  // file:relative urls are relative to it
	Log         io.Writer               // human-readable detail (git output, downloads); may be nil
	Progress    func(done, total int64) // bytes; total 0 when unknown; may be nil
	HTTPClient  *http.Client            // nil: connect timeout 30s, TLS handshake 30s, response headers 60s
	IdleTimeout time.Duration           // a download that receives no byte for this long fails (temporary); default 60s
	Deadline    time.Duration           // a download not finished after this long fails (not temporary); 0: $GANTRY_NET_DEADLINE, else DefaultNetDeadline
	MaxDownload int64                   // bytes; a larger download fails (not temporary); 0: $GANTRY_MAX_DOWNLOAD_SIZE, else DefaultMaxDownload
	// TrackWithMirrors: Track tries the mirrors as Fetch does, not upstream alone.
	TrackWithMirrors bool
	// Served, when set, hears which URL served a source with an alias (a mirror's, or
	// upstream's), once it did.
	Served func(url string)
	// Remotes are caches that keep sources (remotecache.go): asked before the
	// source's URLs, and given what those served.
	Remotes []AssetCache

	// remoteMisses are the remotes asked for the source being fetched, and why
	// they did not serve it (missedRemotes).
	remoteMisses []string

	// Set for the repositories of git submodules (see checkSubmoduleURL).
	submodule bool // the url comes from .gitmodules: git may use network transports only
	allowFile bool // ... and the file transport, for a local url checked beside the element's
}

// The layout of the source cache (DESIGN.md §3, sources/):
//
//	files/<sha256>                  downloaded tarballs and remote files, complete and verified
//	git/<sha256(url)[:16]>-<name>   bare mirrors of git repositories
//	tmp/                            downloads in progress (same filesystem, for renames)
//	locks/<sha256(url)[:16]>.lock   held while a URL is downloaded, so that it is downloaded once
const (
	filesDir = "files"
	gitDir   = "git"
	tmpDir   = "tmp"
	locksDir = "locks"
)

// Fetch makes the source available in the source cache; it does nothing when the source
// is already Cached, and needs no network then. The ref must be set. Fetch does not retry:
// a failure for which IsTemporary is true is for the caller to try again.
func Fetch(ctx context.Context, s *Spec, o FetchOptions) error {
	switch s.Kind {
	case Local, Patch:
		return nil
	case Tar, Remote:
		if s.Ref == "" {
			return fmt.Errorf("fetching %s: no ref; run `gantry track` first", s.Describe())
		}
		if !isSHA256(s.Ref) {
			return fmt.Errorf("fetching %s: ref %q is not a sha256 (64 hex digits)", s.Describe(), s.Ref)
		}
		if Cached(o.SourcesDir, s) {
			return nil
		}
		// Jobs fetching the same URL (two elements, or two gantry processes) take
		// turns: the one that waited finds the file cached and downloads nothing.
		unlock, err := lockURL(ctx, o.SourcesDir, s.URL)
		if err != nil {
			return fmt.Errorf("fetching %s: %w", s.Describe(), err)
		}
		defer unlock()
		if Cached(o.SourcesDir, s) {
			o.logf("%s was downloaded meanwhile by another job", redactURL(s.URL))
			return nil
		}
		if fileFromRemotes(ctx, s, &o) {
			return nil
		}
		err = fromURLs(ctx, s, s.fetchURLs(), &o, func(u string) error {
			_, err := storeFile(ctx, u, s.Ref, &o)
			return err
		})
		if err != nil {
			return o.missedRemotes(s, err)
		}
		pushFile(ctx, s, &o)
		return nil
	case Git:
		return fetchGit(ctx, s, &o)
	}
	return fmt.Errorf("fetching %s: unknown source kind %q", s.Describe(), s.Kind)
}

// Track resolves s.Track to a ref without changing s. git: the commit the branch or tag
// (default: the remote's HEAD) points at, fetched into the mirror. tar and remote: the
// sha256 of what the url serves now, downloaded into the cache so that a later Fetch needs
// no network. Local sources and patches need no ref: "".
func Track(ctx context.Context, s *Spec, o FetchOptions) (string, error) {
	switch s.Kind {
	case Local, Patch:
		return "", nil
	case Tar, Remote:
		var ref string
		err := fromURLs(ctx, s, s.trackURLs(o.TrackWithMirrors), &o, func(u string) error {
			var err error
			ref, err = storeFile(ctx, u, "", &o)
			return err
		})
		return ref, upstreamOnly(s, &o, err)
	case Git:
		ref, err := trackGit(ctx, s, &o)
		return ref, upstreamOnly(s, &o, err)
	}
	return "", fmt.Errorf("tracking %s: unknown source kind %q", s.Describe(), s.Kind)
}

// storeFile downloads rawURL into files/<sha256>, verifying it against want unless want
// is "", and returns the sha256. The file is written to tmp/, synced and renamed: a
// reader never sees a partial file.
func storeFile(ctx context.Context, rawURL, want string, o *FetchOptions) (string, error) {
	return storeFrom(rawURL, want, o, func(w io.Writer) error { return download(ctx, rawURL, w, o) })
}

// storeFrom is storeFile with what get writes for the content of rawURL.
func storeFrom(rawURL, want string, o *FetchOptions, get func(w io.Writer) error) (string, error) {
	if o.SourcesDir == "" {
		return "", fmt.Errorf("downloading %s: no source cache directory", redactURL(rawURL))
	}
	for _, d := range []string{filesDir, tmpDir} {
		if err := os.MkdirAll(filepath.Join(o.SourcesDir, d), 0o755); err != nil {
			return "", fmt.Errorf("preparing the source cache: %w", err)
		}
	}
	tmp, err := os.CreateTemp(filepath.Join(o.SourcesDir, tmpDir), "download-*")
	if err != nil {
		return "", fmt.Errorf("preparing the source cache: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	defer tmp.Close()

	h := sha256.New()
	if err := get(io.MultiWriter(tmp, h)); err != nil {
		return "", err
	}
	got := hex.EncodeToString(h.Sum(nil))
	if want != "" && got != want {
		return "", &ChecksumError{URL: rawURL, Expected: want, Actual: got}
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("writing %s to the source cache: %w", redactURL(rawURL), err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("writing %s to the source cache: %w", redactURL(rawURL), err)
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return "", fmt.Errorf("writing %s to the source cache: %w", redactURL(rawURL), err)
	}
	if err := os.Rename(tmp.Name(), cachedFile(o.SourcesDir, got)); err != nil {
		return "", fmt.Errorf("writing %s to the source cache: %w", redactURL(rawURL), err)
	}
	o.logf("stored %s as %s", redactURL(rawURL), got)
	return got, nil
}

// lockURL takes the lock of one URL's download, locks/<sha256(url)[:16]>.lock in the
// source cache, waiting while another job holds it.
func lockURL(ctx context.Context, sourcesDir, rawURL string) (unlock func(), err error) {
	dir := filepath.Join(sourcesDir, locksDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("preparing the source cache: %w", err)
	}
	sum := sha256.Sum256([]byte(rawURL))
	return lockFile(ctx, filepath.Join(dir, hex.EncodeToString(sum[:8])+".lock"))
}

func cachedFile(sourcesDir, sum string) string {
	return filepath.Join(sourcesDir, filesDir, sum)
}

// openCachedFile opens files/<ref> after checking that its content still has that hash.
func openCachedFile(sourcesDir string, s *Spec) (*os.File, error) {
	if !isSHA256(s.Ref) {
		return nil, fmt.Errorf("ref %q is not a sha256 (64 hex digits)", s.Ref)
	}
	f, err := os.Open(cachedFile(sourcesDir, s.Ref))
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("not in the source cache; run `gantry fetch` first")
	}
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != s.Ref {
		f.Close()
		os.Remove(f.Name()) // a later fetch downloads it again
		return nil, &CorruptError{Path: f.Name(), Got: got}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
