package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
)

// artifactArg is an artifact a command names: ELEMENT (its current key), ELEMENT@KEYPREFIX
// or a bare KEYPREFIX (any cached artifact of the project).
type artifactArg struct {
	ref     cache.ArtifactRef
	current *element.Element // set when the artifact is the element's current one
	graph   *element.Graph   // the graph current was loaded in
}

// minKeyPrefix is the shortest bare key prefix accepted, so that a mistyped element
// name is not taken for a key.
const minKeyPrefix = 4

// isKeyPrefix says whether a looks like a bare cache key prefix.
func isKeyPrefix(a string) bool {
	if len(a) < minKeyPrefix || len(a) > 64 {
		return false
	}
	return strings.Trim(a, "0123456789abcdef") == ""
}

// findByKey finds the one cached artifact of element ("" for any) whose key starts with
// prefix.
func (s *session) findByKey(c *cache.Cache, element, prefix, arg string) (cache.ArtifactRef, error) {
	refs, err := c.FindArtifacts(s.project.Name, element, prefix)
	if err != nil {
		return cache.ArtifactRef{}, err
	}
	switch len(refs) {
	case 0:
		return cache.ArtifactRef{}, fmt.Errorf("%s: no cached artifact has a key starting with %q: see `gantry artifact list`", arg, prefix)
	case 1:
		return refs[0], nil
	}
	var names []string
	for _, r := range refs {
		names = append(names, r.Element+"@"+r.Key[:min(12, len(r.Key))])
	}
	return cache.ArtifactRef{}, usagef("%s is ambiguous: it names %d artifacts (%s); give more of the key", arg, len(refs), strings.Join(names, ", "))
}

// artifactArgs resolves the arguments of an artifact command. Element names and globs
// over the project's element names ('base/*.toml') name their current artifacts, with
// the dependencies --deps adds; ELEMENT@KEYPREFIX and KEYPREFIX name cached artifacts
// whatever their key. Current artifacts may be absent from the cache: the caller decides.
func (s *session) artifactArgs(c *cache.Cache, args []string, deps element.Deps) ([]artifactArg, error) {
	var out []artifactArg
	var names []string
	for _, a := range args {
		if name, prefix, ok := strings.Cut(a, "@"); ok {
			ref, err := s.findByKey(c, s.elementArg(name), prefix, a)
			if err != nil {
				return nil, err
			}
			out = append(out, artifactArg{ref: ref})
			continue
		}
		if element.IsGlob(a) {
			matched, err := s.matchElements(a)
			if err != nil {
				return nil, err
			}
			names = append(names, matched...)
			continue
		}
		if isKeyPrefix(a) && !s.elementExists(a) {
			ref, err := s.findByKey(c, "", a, a)
			if err != nil {
				return nil, err
			}
			out = append(out, artifactArg{ref: ref})
			continue
		}
		names = append(names, s.elementArg(a))
	}
	if len(names) == 0 {
		return out, nil
	}
	g, err := s.loadGraph(names)
	if err != nil {
		return nil, err
	}
	var hermetic *element.Graph // loaded when an element has no artifact at its current key
	for _, e := range g.Select(g.Targets, deps) {
		if e.Key == "" {
			return nil, fmt.Errorf("%s has no cache key (a source has no ref): run `gantry track %s`", e.Name, e.Name)
		}
		project, name := e.ArtifactName(s.project.Name)
		arg := artifactArg{ref: cache.ArtifactRef{Project: project, Element: name, Key: e.Key}, current: e, graph: g}
		if found, _, _ := c.Outcome(project, name, e.Key); !found && !s.project.Hermetic {
			if hermetic == nil {
				if hermetic, err = s.hermeticGraph(names); err != nil {
					return nil, err
				}
			}
			if h := hermetic.Elements[e.Name]; h != nil && h.Key != "" {
				if found, _, _ := c.Outcome(project, name, h.Key); found {
					arg = artifactArg{ref: cache.ArtifactRef{Project: project, Element: name, Key: h.Key}, current: h, graph: hermetic}
				}
			}
		}
		out = append(out, arg)
	}
	return out, nil
}

// hermeticGraph loads names as a --sandbox bwrap build sees them. A command without
// --sandbox (and without GANTRY_SANDBOX=bwrap) that finds no artifact of an element at
// its current key takes the element's hermetic artifact instead, if it has one: an
// element built only with --sandbox bwrap. (Never the other way round: a hermetic
// request never takes a host artifact.)
func (s *session) hermeticGraph(names []string) (*element.Graph, error) {
	project := s.project
	defer func() { s.project = project }()
	hermetic := *project
	hermetic.Hermetic = true
	s.project = &hermetic
	return s.loadGraph(names)
}

func (s *session) elementExists(name string) bool {
	all, err := s.project.ElementNames()
	if err != nil {
		return false
	}
	for _, e := range all {
		if e == name || strings.TrimSuffix(e, ".toml") == name {
			return true
		}
	}
	return false
}

// oneArtifact resolves the single artifact a command works on and reads it.
func (s *session) oneArtifact(c *cache.Cache, arg string) (artifactArg, *cache.Artifact, error) {
	args, err := s.artifactArgs(c, []string{arg}, element.DepsNone)
	if err != nil {
		return artifactArg{}, nil, err
	}
	if len(args) != 1 {
		return artifactArg{}, nil, usagef("%s names %d artifacts: name one", arg, len(args))
	}
	a, err := s.lookupArg(c, args[0])
	return args[0], a, err
}

// lookupArg reads the artifact an argument names, saying what to do when it is absent.
func (s *session) lookupArg(c *cache.Cache, a artifactArg) (*cache.Artifact, error) {
	r := a.ref
	art, err := c.Lookup(r.Project, r.Element, r.Key)
	if errors.Is(err, cache.ErrNotFound) {
		return nil, fmt.Errorf("%s is not in the cache at key %s: run `gantry build %s`", r.Element, shortKey(r.Key), r.Element)
	}
	return art, err
}
