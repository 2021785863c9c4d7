package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Git sources are kept as bare mirrors in the source cache (git/<sha256(url)[:16]>-<name>),
// made by `git clone --mirror` and updated by `git fetch --prune`. A mirror never runs
// gc by itself (gc.auto = 0), so a commit once fetched stays even when upstream drops
// the branch that held it. A mirror is changed only under its lock file (<mirror>.lock).
//
// Submodules (submodules = true) are mirrored the same way, each under its own url, at
// the commit the superproject records; staging checks them out from their mirrors, so a
// build needs no network for them either.

// maxSubmoduleDepth bounds the recursion through submodules of submodules.
const maxSubmoduleDepth = 8

// mirrorPath is where the mirror of url lives.
func mirrorPath(sourcesDir, url string) string {
	sum := sha256.Sum256([]byte(url))
	return filepath.Join(sourcesDir, gitDir, hex.EncodeToString(sum[:])[:16]+"-"+repoName(url))
}

var unsafeNameChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// repoName is a readable name for the mirror of url: its last path element.
func repoName(url string) string {
	s := strings.TrimRight(url, "/")
	if i := strings.LastIndexAny(s, "/:"); i >= 0 {
		s = s[i+1:]
	}
	s = unsafeNameChars.ReplaceAllString(s, "_")
	if strings.Trim(s, ".") == "" {
		return "repo"
	}
	return s
}

var commitID = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

func checkCommitRef(s *Spec) error {
	switch {
	case s.Ref == "":
		return fmt.Errorf("no ref; run `gantry track` first")
	case !commitID.MatchString(s.Ref):
		return fmt.Errorf("ref %q is not a full commit id (40 or 64 lowercase hex digits)", s.Ref)
	}
	return nil
}

// gitCachedTimeout bounds gitCached's local git commands: a mirror that takes longer
// to answer counts as not holding the commit.
const gitCachedTimeout = 30 * time.Second

// gitWaitDelay is how long a git command's pipes are waited for after it exited or
// was killed: git's helpers (ssh, remote helpers) may still hold them.
const gitWaitDelay = 10 * time.Second

// gitCached reports whether the mirror of s holds its commit, and those of its
// submodules when they are wanted.
func gitCached(sourcesDir string, s *Spec) bool {
	if checkCommitRef(s) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), gitCachedTimeout)
	defer cancel()
	return gitCachedAt(ctx, sourcesDir, s.upstreamURL(), s.URL, s.upstreamURL(), s.Ref, s.Submodules, 0)
}

// gitCachedAt is gitCached for the repository at url, whose mirror key names (the url
// as written, alias and all), a submodule (at depth) of the element's repository top.
func gitCachedAt(ctx context.Context, sourcesDir, top, key, url, ref string, submodules bool, depth int) bool {
	m := mirrorPath(sourcesDir, key)
	if !hasCommit(ctx, m, ref) {
		return false
	}
	if !submodules || depth > maxSubmoduleDepth {
		return true
	}
	subs, err := listSubmodules(ctx, m, ref, url, top)
	if err != nil {
		return false
	}
	for _, sub := range subs {
		if !gitCachedAt(ctx, sourcesDir, top, sub.url, sub.url, sub.commit, true, depth+1) {
			return false
		}
	}
	return true
}

func hasCommit(ctx context.Context, mirror, ref string) bool {
	if _, err := os.Stat(mirror); err != nil {
		return false
	}
	_, err := runGit(ctx, gitRun{}, "--git-dir="+mirror, "cat-file", "-e", ref+"^{commit}")
	return err == nil
}

// fetchGit makes the commit s.Ref (and its submodules' commits) available in the cache,
// from the first of its URLs (mirrors, then upstream) that has it.
func fetchGit(ctx context.Context, s *Spec, o *FetchOptions) error {
	if err := checkCommitRef(s); err != nil {
		return fmt.Errorf("fetching %s: %w", s.Describe(), err)
	}
	return fetchCommit(ctx, s.upstreamURL(), s, s.Ref, s.Submodules, o, 0)
}

// fetchCommit fetches ref of repo, a submodule (at depth) of the element's repository
// top. The mirror is repo.URL's, whichever of its URLs serves.
func fetchCommit(ctx context.Context, top string, repo *Spec, ref string, submodules bool, o *FetchOptions, depth int) error {
	if depth > maxSubmoduleDepth {
		return fmt.Errorf("fetching git %s: submodules nest deeper than %d levels", redactURL(repo.URL), maxSubmoduleDepth)
	}
	m := mirrorPath(o.SourcesDir, repo.URL)
	err := withMirror(ctx, repo.URL, o, func() error {
		if hasCommit(ctx, m, ref) {
			return nil
		}
		if gitFromRemotes(ctx, repo, m, ref, o) {
			return nil
		}
		err := fromURLs(ctx, repo, repo.fetchURLs(), o, func(url string) error {
			return fetchCommitFrom(ctx, url, m, ref, o)
		})
		if err != nil {
			return o.missedRemotes(repo, err)
		}
		pushGit(ctx, repo, m, ref, o)
		return nil
	})
	if err != nil || !submodules {
		return err
	}
	subs, err := listSubmodules(ctx, m, ref, repo.upstreamURL(), top)
	if err != nil {
		return fmt.Errorf("fetching git %s: %w", redactURL(repo.URL), err)
	}
	for _, sub := range subs {
		so := *o
		so.submodule = true
		so.allowFile = urlIsLocal(sub.url) // listSubmodules let it through: beside top
		if err := fetchCommit(ctx, top, &Spec{Kind: Git, URL: sub.url}, sub.commit, true, &so, depth+1); err != nil {
			return fmt.Errorf("submodule %s: %w", sub.path, err)
		}
	}
	return nil
}

// missingCommitError is a repository that does not have the commit a ref names.
type missingCommitError struct{ url, ref string }

func (e *missingCommitError) Error() string {
	return fmt.Sprintf("fetching git %s: commit %s is not in the repository (was it force-pushed away? `gantry track` finds the current one)", redactURL(e.url), e.ref)
}

// fetchCommitFrom brings ref into the mirror m from url: the mirror cloned or its
// branches and tags fetched, then, when ref is on none of them, the commit itself.
func fetchCommitFrom(ctx context.Context, url, m, ref string, o *FetchOptions) error {
	if err := updateMirror(ctx, url, m, o); err != nil {
		return err
	}
	if hasCommit(ctx, m, ref) {
		return nil
	}
	// Not on any branch or tag: ask for the commit itself (servers allow it for
	// reachable commits with protocol v2).
	o.logf("commit %s is on no branch or tag of %s; fetching it by id", ref, redactURL(url))
	err := o.remoteGit(ctx, url, "git fetch", "--git-dir="+m, "fetch", "--quiet", "--no-tags", "--", url, ref)
	if ctx.Err() != nil {
		return fmt.Errorf("fetching git %s: %w", redactURL(url), context.Cause(ctx))
	}
	if IsTemporary(err) || errors.Is(err, errDeadline) {
		return err
	}
	if err != nil || !hasCommit(ctx, m, ref) {
		return &missingCommitError{url: url, ref: ref}
	}
	return nil
}

// trackGit fetches the mirror (from upstream, or from its URLs in order when
// o.TrackWithMirrors) and resolves s.Track (default HEAD, the remote's default branch)
// to a commit.
func trackGit(ctx context.Context, s *Spec, o *FetchOptions) (string, error) {
	track := s.Track
	if track == "" {
		track = "HEAD"
	}
	if strings.HasPrefix(track, "-") {
		return "", fmt.Errorf("tracking %s: bad track %q", s.Describe(), track)
	}
	m := mirrorPath(o.SourcesDir, s.URL)
	var commit string
	err := withMirror(ctx, s.URL, o, func() error {
		err := fromURLs(ctx, s, s.trackURLs(o.TrackWithMirrors), o, func(url string) error {
			return updateMirror(ctx, url, m, o)
		})
		if err != nil {
			return err
		}
		out, err := runGit(ctx, gitRun{}, "--git-dir="+m, "rev-parse", "--verify", "--quiet", track+"^{commit}")
		if ctx.Err() != nil {
			return fmt.Errorf("tracking %s: %w", s.Describe(), context.Cause(ctx))
		}
		if err != nil {
			return fmt.Errorf("tracking %s: %q is no branch or tag there", s.Describe(), track)
		}
		commit = out
		return nil
	})
	return commit, err
}

// withMirror runs f holding the lock of the mirror of key (the url as written).
func withMirror(ctx context.Context, key string, o *FetchOptions, f func() error) error {
	if o.SourcesDir == "" {
		return fmt.Errorf("fetching git %s: no source cache directory", redactURL(key))
	}
	m := mirrorPath(o.SourcesDir, key)
	if err := os.MkdirAll(filepath.Dir(m), 0o755); err != nil {
		return fmt.Errorf("preparing the source cache: %w", err)
	}
	unlock, err := lockFile(ctx, m+".lock")
	if err != nil {
		return err
	}
	defer unlock()
	return f()
}

// updateMirror clones url into the mirror m when there is none yet, else fetches its
// branches and tags into m. The caller holds the mirror's lock.
func updateMirror(ctx context.Context, url, m string, o *FetchOptions) error {
	if strings.HasPrefix(url, "-") {
		return fmt.Errorf("fetching git %s: bad url", url)
	}
	if _, err := os.Stat(m); os.IsNotExist(err) {
		return cloneMirror(ctx, url, m, o)
	}
	return fetchMirror(ctx, url, m, o)
}

// cloneMirror clones url into a temporary directory and renames it to m: a mirror is
// either absent or complete.
func cloneMirror(ctx context.Context, url, m string, o *FetchOptions) error {
	tmpParent := filepath.Join(o.SourcesDir, tmpDir)
	if err := os.MkdirAll(tmpParent, 0o755); err != nil {
		return fmt.Errorf("preparing the source cache: %w", err)
	}
	tmp, err := os.MkdirTemp(tmpParent, "git-")
	if err != nil {
		return fmt.Errorf("preparing the source cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, filepath.Base(m))
	o.logf("cloning %s", redactURL(url))
	if err := o.remoteGit(ctx, url, "git clone", "clone", "--mirror", "--quiet", "--", url, dir); err != nil {
		return err
	}
	if _, err := runGit(ctx, gitRun{}, "--git-dir="+dir, "config", "gc.auto", "0"); err != nil {
		return fmt.Errorf("configuring the mirror of %s: %w", redactURL(url), err)
	}
	if err := os.Rename(dir, m); err != nil {
		return fmt.Errorf("storing the mirror of %s: %w", redactURL(url), err)
	}
	return nil
}

// fetchMirror fetches every ref of url into the mirror m, as `git fetch origin` does in
// a mirror clone, but from url: the mirror serves every URL of its source.
func fetchMirror(ctx context.Context, url, m string, o *FetchOptions) error {
	o.logf("fetching %s", redactURL(url))
	return o.remoteGit(ctx, url, "git fetch", "--git-dir="+m, "fetch", "--prune", "--quiet", "--", url, "+refs/*:refs/*")
}

// remoteGit runs a git command that reaches url, within the download deadline (see
// DefaultNetDeadline); a failure is a *NetworkError (op says what was done).
func (o *FetchOptions) remoteGit(ctx context.Context, url, op string, args ...string) error {
	deadline, err := o.deadline()
	if err != nil {
		return err
	}
	gctx, cancel := context.WithTimeoutCause(ctx, deadline, errDeadline)
	defer cancel()
	_, err = runGit(gctx, o.gitRun(), args...)
	if err != nil && ctx.Err() == nil && context.Cause(gctx) == errDeadline {
		return &NetworkError{URL: url, Op: op, Err: fmt.Errorf("not finished after %s, the download deadline (raise GANTRY_NET_DEADLINE for a slow remote): %w", deadline, errDeadline)}
	}
	if err != nil {
		return remoteError(url, op, err)
	}
	return nil
}

// stageGit checks out s.Ref from the mirror into dest: the files only, or with a .git
// holding the ref's history when checkout-dot-git is set; then the submodules' files.
func stageGit(ctx context.Context, s *Spec, o StageOptions, dest string) error {
	if err := checkCommitRef(s); err != nil {
		return err
	}
	m := mirrorPath(o.SourcesDir, s.URL)
	if !hasCommit(ctx, m, s.Ref) {
		return fmt.Errorf("commit %s is not in the source cache; run `gantry fetch` first", s.Ref)
	}
	run := gitRun{log: o.Log}
	if s.DotGit {
		if err := checkoutRepo(ctx, run, m, s.upstreamURL(), s.Ref, dest); err != nil {
			return err
		}
	} else if err := checkoutFiles(ctx, run, m, s.Ref, dest, o.SourcesDir); err != nil {
		return err
	}
	if s.Submodules {
		return stageSubmodules(ctx, run, o.SourcesDir, m, s.upstreamURL(), s.upstreamURL(), s.Ref, dest, 0)
	}
	return nil
}

// checkoutFiles writes the tree of ref into dest with a throwaway index, leaving no .git.
// Files already in dest that the tree does not have stay.
func checkoutFiles(ctx context.Context, run gitRun, mirror, ref, dest, sourcesDir string) error {
	tmp, err := os.MkdirTemp(filepath.Join(sourcesDir, tmpDir), "index-")
	if err != nil {
		tmp, err = os.MkdirTemp("", "gantry-index-")
		if err != nil {
			return err
		}
	}
	defer os.RemoveAll(tmp)
	run.env = append(run.env, "GIT_INDEX_FILE="+filepath.Join(tmp, "index"))
	_, err = runGit(ctx, run, "--git-dir="+mirror, "--work-tree="+dest,
		"-c", "core.autocrlf=false", "-c", "core.symlinks=true",
		"checkout", "--quiet", ref, "--", ".")
	return err
}

// checkoutRepo makes dest a repository holding the history of ref (no branches, no
// tags; HEAD detached at ref; origin = the upstream url) with ref checked out.
func checkoutRepo(ctx context.Context, run gitRun, mirror, url, ref, dest string) error {
	steps := [][]string{
		{"init", "--quiet", dest},
		{"-C", dest, "fetch", "--quiet", "--no-tags", "--", mirror, ref},
		{"-C", dest, "remote", "add", "origin", url},
		{"-C", dest, "-c", "advice.detachedHead=false", "checkout", "--quiet", "--force", "--detach", ref},
	}
	for _, args := range steps {
		if _, err := runGit(ctx, run, args...); err != nil {
			return err
		}
	}
	return nil
}

// stageSubmodules checks out the files of each submodule of ref (from its own mirror)
// into its path under dest, recursively. Submodules get no .git.
func stageSubmodules(ctx context.Context, run gitRun, sourcesDir, mirror, top, url, ref, dest string, depth int) error {
	if depth > maxSubmoduleDepth {
		return fmt.Errorf("submodules nest deeper than %d levels", maxSubmoduleDepth)
	}
	subs, err := listSubmodules(ctx, mirror, ref, url, top)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		subRoot, subDest, err := OpenDir(dest, sub.path)
		if err != nil {
			return fmt.Errorf("submodule %s: %w", sub.path, err)
		}
		subRoot.Close() // only its path is needed: git writes there
		m := mirrorPath(sourcesDir, sub.url)
		if !hasCommit(ctx, m, sub.commit) {
			return fmt.Errorf("submodule %s: commit %s of %s is not in the source cache; run `gantry fetch` first", sub.path, sub.commit, redactURL(sub.url))
		}
		if err := checkoutFiles(ctx, run, m, sub.commit, subDest, sourcesDir); err != nil {
			return fmt.Errorf("submodule %s: %w", sub.path, err)
		}
		if err := stageSubmodules(ctx, run, sourcesDir, m, top, sub.url, sub.commit, subDest, depth+1); err != nil {
			return fmt.Errorf("submodule %s: %w", sub.path, err)
		}
	}
	return nil
}

// submodule is one gitlink of a commit, with its url from .gitmodules.
type submodule struct {
	path, url, commit string
}

// listSubmodules reads the submodules of ref: .gitmodules at ref gives paths and urls
// (relative urls resolve against parentURL), the tree gives each one's commit. Entries of
// .gitmodules without a gitlink in the tree are ignored. A url that checkSubmoduleURL
// refuses (given top, the element's own url) is an error.
func listSubmodules(ctx context.Context, mirror, ref, parentURL, top string) ([]submodule, error) {
	if _, err := runGit(ctx, gitRun{}, "--git-dir="+mirror, "cat-file", "-e", ref+":.gitmodules"); err != nil {
		return nil, nil // no .gitmodules
	}
	out, err := runGit(ctx, gitRun{}, "--git-dir="+mirror, "config", "--blob", ref+":.gitmodules",
		"--get-regexp", `^submodule\..*\.(path|url)$`)
	var ge *gitError
	if errors.As(err, &ge) && ge.exitCode == 1 {
		return nil, nil // no entries
	}
	if err != nil {
		return nil, fmt.Errorf("reading .gitmodules: %w", err)
	}
	paths, urls := map[string]string{}, map[string]string{}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		key, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		key = strings.TrimPrefix(key, "submodule.")
		if name, ok := strings.CutSuffix(key, ".path"); ok {
			if _, seen := paths[name]; !seen {
				names = append(names, name)
			}
			paths[name] = value
		} else if name, ok := strings.CutSuffix(key, ".url"); ok {
			urls[name] = value
		}
	}
	var subs []submodule
	for _, name := range names {
		p, err := memberPath(paths[name])
		if err != nil || p == "." {
			return nil, fmt.Errorf("submodule %s: bad path %q", name, paths[name])
		}
		u := urls[name]
		if u == "" {
			return nil, fmt.Errorf("submodule %s has no url in .gitmodules", name)
		}
		tree, err := runGit(ctx, gitRun{}, "--git-dir="+mirror, "ls-tree", ref, "--", p)
		if err != nil {
			return nil, fmt.Errorf("submodule %s: %w", name, err)
		}
		fields := strings.Fields(tree)
		if len(fields) < 3 || fields[0] != "160000" || fields[1] != "commit" {
			continue
		}
		resolved := resolveSubmoduleURL(parentURL, u)
		if err := checkSubmoduleURL(top, resolved); err != nil {
			return nil, fmt.Errorf("submodule %s: url %q in .gitmodules: %w", name, redactURL(u), err)
		}
		subs = append(subs, submodule{path: p, url: resolved, commit: fields[2]})
	}
	return subs, nil
}

// resolveSubmoduleURL resolves a .gitmodules url that starts with ./ or ../ against the
// superproject's url, as git does.
func resolveSubmoduleURL(parent, u string) string {
	if !strings.HasPrefix(u, "./") && !strings.HasPrefix(u, "../") {
		return u
	}
	base := strings.TrimRight(parent, "/")
	for {
		switch {
		case strings.HasPrefix(u, "./"):
			u = u[2:]
			continue
		case strings.HasPrefix(u, "../"):
			u = u[3:]
			if i := strings.LastIndexAny(base, "/:"); i >= 0 && base[i] == ':' {
				base = base[:i+1] // host:repo → host:
			} else if i >= 0 {
				base = base[:i]
			}
			continue
		}
		break
	}
	if strings.HasSuffix(base, ":") {
		return base + u
	}
	return base + "/" + u
}

// Submodule urls come from upstream's .gitmodules, not from the element: one naming a
// repository on the build machine (file://, a path) would let upstream read any local
// repository into the build (the CVE-2022-39253 class). So a local submodule url is
// allowed only when the element itself names a local repository and the submodule lies
// in the same directory tree (beside it: a mirror directory); helper transports
// (ext::…) never. Git is told the same: submodule fetches run with
// GIT_PROTOCOL_FROM_USER=0, so it uses only http(s), git and ssh unless gantry allowed
// the file transport for that url.

var helperTransport = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*::`)

// checkSubmoduleURL refuses a submodule url (resolved) that is local and not beside top,
// the element's own url, or that uses a helper transport.
func checkSubmoduleURL(top, u string) error {
	if helperTransport.MatchString(u) {
		return errors.New("remote helper transports (such as ext::) are not allowed in submodules")
	}
	if !urlIsLocal(u) {
		return nil
	}
	if !urlIsLocal(top) {
		return fmt.Errorf("a local repository (file:// or a path) in the submodules of the remote repository %s: refused, as it could read any repository on this machine; mirror the submodule and point .gitmodules at a remote url", redactURL(top))
	}
	dir := path.Dir(localURLPath(top))
	p := localURLPath(u)
	if !path.IsAbs(p) || (p != dir && !strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")) {
		return fmt.Errorf("a local repository outside %s, the directory of the element's repository %s: refused, as it could read any repository on this machine", dir, redactURL(top))
	}
	return nil
}

// urlIsLocal reports whether git would reach u through the local file transport: a
// file:// url, or a path (git's rule: an scp-like host:path has a colon before any slash).
func urlIsLocal(u string) bool {
	if i := strings.Index(u, "://"); i >= 0 {
		return strings.EqualFold(u[:i], "file")
	}
	colon, slash := strings.IndexByte(u, ':'), strings.IndexByte(u, '/')
	return colon < 0 || (slash >= 0 && slash < colon)
}

// localURLPath is the cleaned path of a local url (file:///p, file://host/p, or a path).
func localURLPath(u string) string {
	if len(u) >= 7 && strings.EqualFold(u[:7], "file://") {
		u = u[7:]
		if i := strings.IndexByte(u, '/'); i > 0 {
			u = u[i:] // file://localhost/p
		}
	}
	return path.Clean(u)
}

// gitRun says how to run git: extra environment and configuration (git -c), and where
// its stderr goes besides the error message.
type gitRun struct {
	env    []string
	config []string
	log    io.Writer
}

// gitRun is for commands that reach the remote: a stalled http transfer fails like a
// stalled download.
func (o *FetchOptions) gitRun() gitRun {
	run := gitRun{log: o.Log, config: []string{
		"http.lowSpeedLimit=1",
		"http.lowSpeedTime=" + strconv.Itoa(max(1, int(o.idleTimeout().Seconds()))),
		"protocol.ext.allow=never",
	}}
	if o.submodule {
		// Only the known network transports, unless checkSubmoduleURL allowed this
		// local url (see there).
		run.env = append(run.env, "GIT_PROTOCOL_FROM_USER=0")
		if o.allowFile {
			run.config = append(run.config, "protocol.file.allow=always")
		}
	}
	return run
}

// gitError is a git command that failed: its command line and the end of its stderr.
type gitError struct {
	args     []string
	exitCode int
	stderr   string
	err      error
}

func (e *gitError) Error() string {
	args := make([]string, len(e.args))
	for i, a := range e.args {
		args[i] = redactURL(a)
	}
	msg := fmt.Sprintf("`git %s` failed: %v", strings.Join(args, " "), e.err)
	if e.stderr != "" {
		msg += ": " + e.stderr
	}
	return msg
}

func (e *gitError) Unwrap() error { return e.err }

// runGit runs git with args and returns its trimmed stdout. It never prompts for
// credentials, and stops when ctx ends.
func runGit(ctx context.Context, run gitRun, args ...string) (string, error) {
	var full []string
	for _, c := range run.config {
		full = append(full, "-c", c)
	}
	cmd := exec.CommandContext(ctx, "git", append(full, args...)...)
	cmd.Env = append(gitEnviron(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	cmd.Env = append(cmd.Env, run.env...)
	cmd.WaitDelay = gitWaitDelay
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stdout = &stdout
	cmd.Stderr = stderr
	if run.log != nil {
		cmd.Stderr = io.MultiWriter(stderr, run.log)
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		ge := &gitError{args: args, exitCode: -1, stderr: strings.TrimSpace(stderr.String()), err: err}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ge.exitCode = ee.ExitCode()
		}
		return "", ge
	}
	return strings.TrimSpace(stdout.String()), nil
}

// repoEnv are the variables that point git at a repository: inherited (gantry run from a
// git hook), they would turn our commands to another repository.
var repoEnv = []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
	"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_PREFIX"}

func gitEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(repoEnv, name) {
			env = append(env, kv)
		}
	}
	return env
}

// remoteError wraps a failed git remote operation as a NetworkError, temporary when git's
// message says the network or the server failed rather than the request.
func remoteError(url, op string, err error) error {
	var ge *gitError
	if !errors.As(err, &ge) {
		return &NetworkError{URL: url, Op: op, Err: err}
	}
	msg := strings.ToLower(ge.stderr)
	ne := &NetworkError{URL: url, Op: op, Err: err}
	if m := httpStatusInGit.FindStringSubmatch(msg); m != nil {
		ne.Status, _ = strconv.Atoi(m[1])
		ne.Temporary = temporaryStatus(ne.Status)
		return ne
	}
	for _, s := range temporaryGitMessages {
		if strings.Contains(msg, s) {
			ne.Temporary = true
		}
	}
	return ne
}

var httpStatusInGit = regexp.MustCompile(`returned error: (\d{3})`)

// temporaryGitMessages are parts of git's messages (LC_ALL=C) for failures of the network
// or the server, which may go away by themselves.
var temporaryGitMessages = []string{
	"could not resolve host", "temporary failure in name resolution", "connection refused",
	"connection timed out", "operation timed out", "timed out", "connection reset",
	"network is unreachable", "no route to host", "early eof", "unexpected disconnect",
	"the remote end hung up unexpectedly", "rpc failed", "transfer closed",
	"operation too slow", "http/2 stream", "ssl_read", "gnutls_handshake",
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }

// Date returns the time the source's content was last changed, where the source says so
// itself: a git source's commit time (its committer date at Ref, from the source cache).
// Other kinds report false: a tarball's member times and a local file's mtime are not
// the source's date. Used for SOURCE_DATE_EPOCH.
func Date(ctx context.Context, s *Spec, sourcesDir string) (time.Time, bool) {
	if s.Kind != Git || s.Ref == "" {
		return time.Time{}, false
	}
	out, err := runGit(ctx, gitRun{}, "--git-dir="+mirrorPath(sourcesDir, s.URL), "show", "-s", "--format=%ct", s.Ref+"^{commit}")
	if err != nil {
		return time.Time{}, false
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(secs, 0), true
}
