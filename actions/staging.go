package actions

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
)

// Overlaps (docs/staging.md): artifacts are staged into one directory (a build's
// sysroot, a compose's, a checkout with dependencies) in staging order
// (element.Graph.Staging), and where two install the same path with other content the
// later one's replaces the earlier one's. Each such path is an overlap, reported once
// per staging in one warning, unless every element that overwrote it whitelists it
// ([public] overlap-whitelist); the project's fatal-warnings = ["overlaps"] makes it
// an error. A directory never replaces a file or symlink, nor a file a non-empty
// directory: that is always an error. Nothing outside the directory is touched
// (cache.Checkout follows no symlink).

// shownOverlaps is how many overlapping paths a report names before "and N more".
const shownOverlaps = 10

// staging is one staging of artifacts, in staging order, into dir.
type staging struct {
	c    *cache.Cache
	dir  string
	opts cache.CheckoutOptions // how files are staged: links, trusted blobs (Replace is stage's)

	staged []stagedTree // so far, in order

	mu       sync.Mutex // Checkout's goroutines record overlaps at once
	overlaps []overlap
}

// stagedTree is an artifact staged: who it is, its files, what it may overwrite.
type stagedTree struct {
	name      string // the element, as users name it
	files     cache.Digest
	whitelist []*regexp.Regexp
}

// overlap is a path (relative to the directory) that staged[by] replaced when
// staged[over]'s was there.
type overlap struct {
	rel      string
	by, over int
}

func newStaging(c *cache.Cache, dir string, opts cache.CheckoutOptions) *staging {
	return &staging{c: c, dir: dir, opts: opts}
}

// stage checks out files, the artifact of the element name (whose overlap whitelist is
// whitelist), over what was staged before. An error from the cache (a damaged blob) is
// returned as it is; a path it cannot replace is a *stagingError naming both elements.
func (s *staging) stage(name string, files cache.Digest, whitelist []string) error {
	i := len(s.staged)
	res, err := whitelistRegexps(name, whitelist)
	if err != nil {
		return err
	}
	s.staged = append(s.staged, stagedTree{name: name, files: files, whitelist: res})
	opts := s.opts
	opts.Replace = func(rel string) error { return s.replace(i, rel) }
	err = s.c.Checkout(files, s.dir, opts)
	var conflict *cache.ConflictError
	if errors.As(err, &conflict) {
		return s.conflict(i, conflict)
	}
	return err
}

// whitelistRegexps compiles the overlap whitelist of the element name; a glob that
// does not compile is a *stagingError.
func whitelistRegexps(name string, whitelist []string) ([]*regexp.Regexp, error) {
	var res []*regexp.Regexp
	for _, glob := range whitelist {
		re, err := whitelistRegexp(glob)
		if err != nil {
			return nil, &stagingError{fmt.Errorf("staging %s: [public] overlap-whitelist: %w", name, err)}
		}
		res = append(res, re)
	}
	return res, nil
}

// whitelistRegexp compiles a whitelist glob, matched against absolute paths: a glob
// without a leading '/' is taken from the root.
func whitelistRegexp(glob string) (*regexp.Regexp, error) {
	if !strings.HasPrefix(glob, "/") {
		glob = "/" + glob
	}
	return element.GlobRegexp(glob)
}

// replace is staged[i]'s Replace: it records the overlap at rel with the artifact
// staged before whose path it replaces. A path none of them staged was in the
// directory before staging began (a checkout with --force): never replaced.
func (s *staging) replace(i int, rel string) error {
	over := s.owner(i, rel)
	if over < 0 {
		return fmt.Errorf("%s already exists and differs from the tree being checked out", filepath.Join(s.dir, filepath.FromSlash(rel)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.overlaps = append(s.overlaps, overlap{rel: rel, by: i, over: over})
	return nil
}

// owner is the last of the artifacts staged before staged[i] that has rel, or -1.
func (s *staging) owner(i int, rel string) int {
	for j := i - 1; j >= 0; j-- {
		if s.has(s.staged[j].files, rel) {
			return j
		}
	}
	return -1
}

// has reports whether the tree root has an entry at rel.
func (s *staging) has(root cache.Digest, rel string) bool {
	d := root
	parts := strings.Split(rel, "/")
	for k, name := range parts {
		dir, err := s.c.ReadDirectory(d)
		if err != nil {
			return false
		}
		last := k == len(parts)-1
		if last && (slices.ContainsFunc(dir.Files, func(f *repb.FileNode) bool { return f.Name == name }) ||
			slices.ContainsFunc(dir.Symlinks, func(l *repb.SymlinkNode) bool { return l.Name == name })) {
			return true
		}
		i := slices.IndexFunc(dir.Directories, func(n *repb.DirectoryNode) bool { return n.Name == name })
		if i < 0 {
			return false
		}
		if last {
			return true
		}
		d = cache.DigestFromProto(dir.Directories[i].Digest)
	}
	return false
}

// conflict is the error of a path staged[i] has that cannot replace what is there.
func (s *staging) conflict(i int, c *cache.ConflictError) error {
	name := s.staged[i].name
	who := "staged before"
	if over := s.owner(i, c.Rel); over >= 0 {
		who = "of " + s.staged[over].name
	}
	return &stagingError{fmt.Errorf("staging %s: /%s is %s %s, where %s has %s: a directory never replaces a file or symlink, nor a file a non-empty directory",
		name, c.Rel, c.Have, who, name, c.Want)}
}

// report is what staging overlapped, not whitelisted: how many paths and the words
// naming the first shownOverlaps of them, with the elements that staged each, the
// last (the one whose file stays) first. n is 0 when nothing is to be reported.
func (s *staging) report() (n int, text string) {
	ovs := slices.Clone(s.overlaps)
	slices.SortFunc(ovs, cmpOverlap)
	chains := map[string][]int{} // path -> who staged it, in order
	for _, o := range ovs {
		c := chains[o.rel]
		if c == nil {
			c = []int{o.over}
		}
		chains[o.rel] = append(c, o.by)
	}
	var shown []string
	for _, rel := range slices.Sorted(maps.Keys(chains)) {
		chain := chains[rel]
		if !slices.ContainsFunc(chain[1:], func(j int) bool { return !s.whitelisted(j, "/"+rel) }) {
			continue
		}
		n++
		if len(shown) == shownOverlaps {
			continue
		}
		names := make([]string, len(chain))
		for k, j := range chain {
			names[len(chain)-1-k] = s.staged[j].name
		}
		shown = append(shown, "/"+rel+" ("+strings.Join(names, " over ")+")")
	}
	if n == 0 {
		return 0, ""
	}
	paths := "paths"
	if n == 1 {
		paths = "path"
	}
	text = fmt.Sprintf("%d %s staged by more than one element, the later in staging order wins: %s", n, paths, strings.Join(shown, ", "))
	if n > len(shown) {
		text += fmt.Sprintf(", and %d more", n-len(shown))
	}
	return n, text
}

func cmpOverlap(a, b overlap) int {
	if a.by != b.by {
		return a.by - b.by
	}
	return strings.Compare(a.rel, b.rel)
}

// whitelisted reports whether staged[j] may overwrite abs.
func (s *staging) whitelisted(j int, abs string) bool {
	return slices.ContainsFunc(s.staged[j].whitelist, func(re *regexp.Regexp) bool { return re.MatchString(abs) })
}

// overlapsWarning is the warning of report's text.
func overlapsWarning(text string) string {
	return "overlaps: " + text + " (let the later element overwrite them with [public] overlap-whitelist)"
}

// overlapsError is the error of report's text where overlaps are fatal.
func overlapsError(text string) error {
	return &stagingError{errors.New("overlaps are fatal in this project (fatal-warnings in project.toml): " + text +
		" (let the later element overwrite them with [public] overlap-whitelist, or remove \"overlaps\" from fatal-warnings)")}
}

// stagingError is a staging the project must change (a fatal overlap, a directory
// staged over a file): it fails the build, and is never cached as its failure, so the
// fix applies at once.
type stagingError struct{ err error }

func (e *stagingError) Error() string { return e.err.Error() }
func (e *stagingError) Unwrap() error { return e.err }

// Staged is an element to stage and its artifact.
type Staged struct {
	Element  *element.Element
	Artifact *cache.Artifact
}

// StageArtifacts copies arts, in staging order (element.Graph.Staging), into dir,
// with the overlap rules of a build, under fatal-warnings of project p. It returns the
// overlaps warning, "" for none. Errors of the staging itself (fatal overlaps,
// conflicts) begin with doing ("checking out app.toml") when it is not empty; a
// damaged artifact is dropped from the cache (CheckoutError).
func StageArtifacts(c *cache.Cache, p *element.Project, arts []Staged, dir, doing string) (warning string, err error) {
	prefix := func(err error) error {
		if doing == "" {
			return err
		}
		return fmt.Errorf("%s: %w", doing, err)
	}
	// Copies, every file hashed: the user's files must not alias the cache.
	s := newStaging(c, dir, cache.CheckoutOptions{})
	for _, a := range arts {
		whitelist, err := a.Element.OverlapWhitelist(p)
		if err != nil {
			return "", err
		}
		if err := s.stage(a.Element.Name, a.Artifact.Files, whitelist); err != nil {
			var staging *stagingError
			if errors.As(err, &staging) {
				return "", prefix(err)
			}
			return "", CheckoutError(c, a.Artifact, dir, err)
		}
	}
	n, text := s.report()
	switch {
	case n == 0:
		return "", nil
	case p.Fatal(element.WarningOverlaps):
		return "", prefix(overlapsError(text))
	}
	return overlapsWarning(text), nil
}
