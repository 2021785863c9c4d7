package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Aliases and mirrors. A source url "gnu:hello/hello-2.12.tar.gz" names the alias gnu,
// which project.toml's [aliases] expands to a URL prefix. The url as written, alias and
// all, is what keys the source (UniqueKey), names its git mirror and its download lock:
// where the bytes come from does not change what is built. The expansion (Spec.Upstream)
// and the mirrors' URLs (Spec.Mirrors) travel with the spec to the jobs that download.
//
// Telling an alias from a URL scheme: the part before the first ':' is an alias when the
// project defines it; otherwise, a known URL scheme (KnownSchemes) is a URL; otherwise, a
// word that could be an alias name (letters, digits, '-', '_') is an undefined alias, an
// error; anything else (git@host:path, host.example:path) is left as written.

// KnownSchemes are the URL schemes that are never aliases; no alias may be named so.
var KnownSchemes = []string{"http", "https", "file", "git", "ssh", "ftp", "sftp"}

// isAliasName reports whether name could be an alias: letters, digits, '-' and '_',
// starting with a letter or digit. (By hand: it runs for every source url loaded.)
func isAliasName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return name != ""
}

// Mirror is one [[mirrors]] entry: per alias, the URL prefixes that serve what the alias
// serves, tried in order.
type Mirror struct {
	Name    string              `toml:"name"`
	Aliases map[string][]string `toml:"aliases"`
}

// splitAlias returns the alias of url and the rest after its ':', or ok false when the
// part before the first ':' could not be an alias: there is none, it is a known URL
// scheme, or it is not an alias name (git@host:path).
func splitAlias(url string) (alias, rest string, ok bool) {
	alias, rest, found := strings.Cut(url, ":")
	if !found || !isAliasName(alias) || isKnownScheme(alias) {
		return "", "", false
	}
	return alias, rest, true
}

// isKnownScheme reports whether name is one of KnownSchemes (in any case).
func isKnownScheme(name string) bool {
	return slices.Contains(KnownSchemes, strings.ToLower(name))
}

// CheckAliasName says why name cannot be an alias, or nil.
func CheckAliasName(name string) error {
	switch {
	case isKnownScheme(name):
		return fmt.Errorf("%q is a URL scheme, which cannot be an alias (URL schemes: %s)", name, strings.Join(KnownSchemes, ", "))
	case !isAliasName(name):
		return fmt.Errorf("%q is not an alias name: use letters, digits, '-' and '_', starting with a letter or digit", name)
	}
	return nil
}

// UndefinedAliasError is a source url whose alias the project does not define.
type UndefinedAliasError struct {
	URL, Alias string
}

func (e *UndefinedAliasError) Error() string {
	return fmt.Sprintf("url %q uses the alias %q, which project.toml does not define", redactURL(e.URL), e.Alias)
}

// Resolve expands the alias of s.URL, if it has one: Upstream becomes aliases[alias] +
// the rest of the url, and Mirrors the mirrors' prefixes for the alias + the rest, in the
// order of mirrors (and of each mirror's prefixes). A url without an alias is left alone.
// An alias not in aliases is an *UndefinedAliasError.
func Resolve(s *Spec, aliases map[string]string, mirrors []Mirror) error {
	s.Upstream, s.Mirrors = "", nil
	alias, rest, ok := splitAlias(s.URL)
	if !ok {
		return nil
	}
	prefix, defined := aliases[alias]
	if !defined {
		return &UndefinedAliasError{URL: s.URL, Alias: alias}
	}
	s.Upstream = prefix + rest
	for _, m := range mirrors {
		for _, p := range m.Aliases[alias] {
			s.Mirrors = append(s.Mirrors, p+rest)
		}
	}
	return nil
}

// upstreamURL is the URL the source's project serves it from: its alias expanded.
func (s *Spec) upstreamURL() string {
	if s.Upstream != "" {
		return s.Upstream
	}
	return s.URL
}

// fetchURLs are the URLs a fetch tries, in order: the mirrors, then upstream.
func (s *Spec) fetchURLs() []string {
	return append(slices.Clone(s.Mirrors), s.upstreamURL())
}

// trackURLs are the URLs a track tries: upstream alone, unless withMirrors (then as
// a fetch does: a mirror may lag behind upstream, so it is asked only when told).
func (s *Spec) trackURLs(withMirrors bool) []string {
	if withMirrors {
		return s.fetchURLs()
	}
	return []string{s.upstreamURL()}
}

// fromURLs runs get on each of urls in turn until one succeeds. It moves on past a
// failure of the remote (movesOn: no connection, an HTTP error status, a stalled or cut
// transfer, wrong bytes, a repository without the commit) and stops at any other
// (cancelled, the local disk full). With one url the error is get's own; with more, a
// *MirrorsError with each one's. For a source with an alias, the URL that served is
// logged and told to o.Served.
func fromURLs(ctx context.Context, s *Spec, urls []string, o *FetchOptions, get func(url string) error) error {
	var errs []error
	for i, u := range urls {
		err := get(u)
		if err == nil {
			if s.Upstream != "" {
				o.logf("%s served by %s", s.URL, redactURL(u))
				if o.Served != nil {
					o.Served(redactURL(u))
				}
			}
			return nil
		}
		if ctx.Err() != nil || !movesOn(err) {
			return err
		}
		errs = append(errs, err)
		if i < len(urls)-1 {
			o.logf("%v; trying %s next", err, redactURL(urls[i+1]))
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return &MirrorsError{URL: s.URL, Errs: errs}
}

// movesOn reports whether err is a failure of one URL that another may not have.
func movesOn(err error) bool {
	var (
		ne *NetworkError
		ce *ChecksumError
		mc *missingCommitError
	)
	return errors.As(err, &ne) || errors.As(err, &ce) || errors.As(err, &mc)
}

// MirrorsError is a source that none of its URLs (mirrors, then upstream) served. It
// is temporary when one of the failures was: the scheduler's retry, after its backoff,
// tries every URL again.
type MirrorsError struct {
	URL  string  // as written, with its alias
	Errs []error // one per URL, in the order tried
}

func (e *MirrorsError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("no URL served %s: %s", redactURL(e.URL), strings.Join(msgs, "; "))
}

func (e *MirrorsError) Unwrap() []error { return e.Errs }

func (e *MirrorsError) temporary() bool { return slices.ContainsFunc(e.Errs, IsTemporary) }

// upstreamOnly adds to a track's failure, when the source has mirrors track did not ask,
// how to ask them: first, as a message from git goes on for several lines.
func upstreamOnly(s *Spec, o *FetchOptions, err error) error {
	if err == nil || o.TrackWithMirrors || len(s.Mirrors) == 0 {
		return err
	}
	return fmt.Errorf("tracking from upstream only, as a mirror may lag behind it (--track-with-mirrors asks the mirrors too): %w", err)
}
