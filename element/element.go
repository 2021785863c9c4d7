package element

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/gantry-build/gantry/source"
)

// elementFile is the TOML shape of an element file.
type elementFile struct {
	Kind           string            `toml:"kind"`
	Description    string            `toml:"description"`
	Depends        []string          `toml:"depends"`
	BuildDepends   []string          `toml:"build-depends"`
	RuntimeDepends []string          `toml:"runtime-depends"`
	Pool           string            `toml:"pool"`
	Variables      map[string]string `toml:"variables"`
	Environment    map[string]string `toml:"environment"`
	Sources        []toml.Primitive  `toml:"sources"`
	Config         toml.Primitive    `toml:"config"`
}

var elementKeys = []string{"kind", "description", "depends", "build-depends", "runtime-depends", "pool", "variables", "environment", "sources", "config"}

// Config is an element's kind-specific configuration, unexpanded.
type Config struct {
	Commands map[string][]string // manual-like kinds: step -> commands
	Source   string              // import: directory of the staged sources to import
	Target   string              // import: where in the artifact to put them
	Include  []string            // compose: globs of paths to keep (empty = all)
	Exclude  []string            // compose: globs of paths to drop
}

// Element is one loaded element. After Load its fields are never modified except the
// graph links and Key, which the graph sets once.
type Element struct {
	Name           string // path under element-path: "base/gcc.toml"
	File           string // path shown to users: "elements/base/gcc.toml"
	Kind           *Kind
	Description    string
	Depends        []string
	BuildDepends   []string
	RuntimeDepends []string
	Pool           string
	Sources        []source.Spec
	Config         Config

	vars map[string]string // project variables + kind defaults + element variables (raw)
	env  map[string]string // project environment + element environment (raw)
	doc  *tomlDoc

	// Set by the graph.
	BuildDeps []*Element // depends ∪ build-depends, in declaration order
	RunDeps   []*Element // depends ∪ runtime-depends, in declaration order
	Key       string     // full cache key; "" when some source (here or below) has no ref
	NoRef     bool       // some source of this element itself has no ref
	Workspace string     // the directory of its open workspace, which it builds from; "" for none

	position   int       // index in Graph.Order
	resolved   *Resolved // config and environment expanded with KeyPaths
	sourceKeys []string  // unique key per source; "" for a source without a ref
}

func (e *Element) String() string { return e.Name }

// ShortKey is the first 8 hex characters of the key, or "????????" without one.
func (e *Element) ShortKey() string {
	if e.Key == "" {
		return "????????"
	}
	return e.Key[:8]
}

// loadElement parses one element file. lock supplies refs for sources without one.
func loadElement(p *Project, lock *Lock, name string) (*Element, error) {
	display := filepath.ToSlash(filepath.Join(p.ElementPath, name))
	var f elementFile
	data, err := p.readInProject(filepath.Join(p.ElementPath, filepath.FromSlash(name)))
	if err != nil {
		pe := &ProjectError{File: display, Msg: fmt.Sprintf("cannot read file: %v", err)}
		if source.IsEscape(err) {
			pe.Hint = "element files must be inside the project: a symbolic link may not lead out of it"
		}
		return nil, pe
	}
	doc, err := decodeTOMLBytes(data, display, &f)
	if err != nil {
		return nil, err
	}
	topLevel := func(parent []string) []string {
		if len(parent) == 0 {
			return elementKeys
		}
		return nil
	}
	// Top-level typos first ("kinds" should not be reported as a missing "kind"); the
	// kind-specific tables are checked key by key below.
	if err := doc.unknownKeys(topLevel, "sources", "config"); err != nil {
		return nil, err
	}
	if err := doc.checkTables("variables", "environment", "config"); err != nil {
		return nil, err
	}
	e := &Element{Name: name, File: display, Description: f.Description, Pool: f.Pool, doc: doc}
	if f.Kind == "" {
		return nil, &ProjectError{File: display, Msg: "missing required key \"kind\"", Hint: "kinds: " + strings.Join(KindNames(), ", ")}
	}
	kind, ok := LookupKind(f.Kind)
	if !ok {
		return nil, doc.valueError("kind", "unknown kind %q%s; kinds: %s", f.Kind, didYouMean(f.Kind, KindNames()), strings.Join(KindNames(), ", "))
	}
	e.Kind = kind
	if e.Pool != "" {
		if _, ok := p.Pools[e.Pool]; !ok {
			return nil, doc.valueError("pool", "pool %q is not declared in project.toml [pools]", e.Pool)
		}
	}
	if err := e.setDepends(&f); err != nil {
		return nil, err
	}
	if err := checkVariableNames(doc, "variables", f.Variables); err != nil {
		return nil, err
	}
	if err := checkEnvironment(doc, "environment", f.Environment); err != nil {
		return nil, err
	}
	e.vars = merge(kind.Variables, p.Variables, f.Variables)
	e.env = merge(p.Environment, f.Environment)
	if err := e.parseSources(f.Sources, lock.Refs(name)); err != nil {
		return nil, err
	}
	if err := e.parseConfig(f.Config, doc.md.IsDefined("config")); err != nil {
		return nil, err
	}
	// Checked last: the kind-specific tables above mark their keys as decoded.
	if err := doc.unknownKeys(topLevel); err != nil {
		return nil, err
	}
	return e, nil
}

func merge(layers ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, l := range layers {
		for k, v := range l {
			out[k] = v
		}
	}
	return out
}

// setDepends validates the three dependency lists: names well formed, none listed twice.
func (e *Element) setDepends(f *elementFile) error {
	seen := map[string]string{}
	for _, list := range []struct {
		key   string
		names []string
	}{{"depends", f.Depends}, {"build-depends", f.BuildDepends}, {"runtime-depends", f.RuntimeDepends}} {
		for _, d := range list.names {
			if err := checkElementName(d); err != nil {
				return e.doc.valueError(list.key, "%v", err)
			}
			if prev, ok := seen[d]; ok {
				return e.doc.valueError(list.key, "%s is listed twice (also in %s)", d, prev)
			}
			seen[d] = list.key
		}
	}
	e.Depends, e.BuildDepends, e.RuntimeDepends = f.Depends, f.BuildDepends, f.RuntimeDepends
	return nil
}

func (e *Element) parseSources(prims []toml.Primitive, lockRefs []string) error {
	for i, prim := range prims {
		path := fmt.Sprintf("sources[%d]", i)
		t, err := e.doc.table(path, prim)
		if err != nil {
			return err
		}
		kind, err := t.str("kind")
		if err != nil {
			return err
		}
		if kind == "" {
			return &ProjectError{File: e.File, Line: e.doc.lineOf(path), Msg: fmt.Sprintf("source %d has no kind", i+1), Hint: "kinds: " + strings.Join(source.Kinds, ", ")}
		}
		if !source.IsKnown(kind) {
			return e.doc.valueError(path+".kind", "unknown source kind %q%s; kinds: %s", kind, didYouMean(kind, source.Kinds), strings.Join(source.Kinds, ", "))
		}
		s := source.Spec{Kind: source.Kind(kind)}
		allowed := source.AllowedKeys(s.Kind)
		for _, k := range allowed {
			if !t.has(k) {
				continue
			}
			var err error
			switch k {
			case "url":
				s.URL, err = t.str(k)
			case "path":
				s.Path, err = t.str(k)
			case "ref":
				s.Ref, err = t.str(k)
			case "track":
				s.Track, err = t.str(k)
			case "directory":
				s.Directory, err = t.str(k)
			case "base-dir":
				s.BaseDir, err = t.str(k)
			case "filename":
				s.Filename, err = t.str(k)
			case "executable":
				s.Executable, err = t.boolean(k)
			case "submodules":
				s.Submodules, err = t.boolean(k)
			case "checkout-dot-git":
				s.DotGit, err = t.boolean(k)
			case "strip-level":
				s.StripLevel, err = t.integer(k, 1)
			}
			if err != nil {
				return err
			}
		}
		if err := t.done(allowed); err != nil {
			return err
		}
		// Defaults that an explicit value (even "") overrides.
		if s.Kind == source.Tar && !t.has("base-dir") {
			s.BaseDir = "*" // strip a single top-level directory, as BuildStream does
		}
		if s.Kind == source.Patch && !t.has("strip-level") {
			s.StripLevel = 1
		}
		if err := e.checkSource(i, &s); err != nil {
			return err
		}
		s.Pinned = s.Ref != ""
		if s.Ref == "" && i < len(lockRefs) {
			s.Ref = lockRefs[i]
		}
		e.Sources = append(e.Sources, s)
	}
	return nil
}

func (e *Element) checkSource(i int, s *source.Spec) error {
	path := fmt.Sprintf("sources[%d]", i)
	switch s.Kind {
	case source.Local, source.Patch:
		if s.Path == "" {
			return &ProjectError{File: e.File, Line: e.doc.lineOf(path), Msg: fmt.Sprintf("%s source %d needs a path", s.Kind, i+1)}
		}
		if filepath.IsAbs(s.Path) || strings.HasPrefix(filepath.Clean(s.Path), "..") {
			return e.doc.valueError(path+".path", "%q must be a path inside the project", s.Path)
		}

	default:
		if s.URL == "" {
			return &ProjectError{File: e.File, Line: e.doc.lineOf(path), Msg: fmt.Sprintf("%s source %d needs a url", s.Kind, i+1)}
		}

	}
	if s.Directory != "" && (filepath.IsAbs(s.Directory) || strings.HasPrefix(filepath.Clean(s.Directory), "..")) {
		return e.doc.valueError(path+".directory", "%q must be a relative path inside the build root", s.Directory)
	}
	return nil
}

func (e *Element) parseConfig(prim toml.Primitive, defined bool) error {
	c := Config{Commands: map[string][]string{}}
	for step, cmds := range e.Kind.DefaultCommands {
		c.Commands[step] = cmds
	}
	if !defined {
		e.Config = c
		return nil
	}
	t, err := e.doc.table("config", prim)
	if err != nil {
		return err
	}
	switch {
	case e.Kind.Commands:
		for _, step := range CommandSteps {
			list, set, err := t.strings(step)
			if err != nil {
				return err
			}
			if set {
				c.Commands[step] = list
			}
		}
	case e.Kind.Name == "import":
		if c.Source, err = t.str("source"); err != nil {
			return err
		}
		if c.Target, err = t.str("target"); err != nil {
			return err
		}
	case e.Kind.Name == "compose":
		if c.Include, _, err = t.strings("include"); err != nil {
			return err
		}
		if c.Exclude, _, err = t.strings("exclude"); err != nil {
			return err
		}
	}
	if err := t.done(e.Kind.ConfigKeys); err != nil {
		if len(e.Kind.ConfigKeys) == 0 {
			return &ProjectError{File: e.File, Line: e.doc.lineOf("config"), Msg: fmt.Sprintf("kind %q takes no [config]", e.Kind.Name)}
		}
		return err
	}
	e.Config = c
	return nil
}

// Variables returns the element's variables expanded with the given paths.
func (e *Element) Variables(p *Project, paths Paths) *Variables {
	fixed := map[string]string{
		"build-root": paths.BuildRoot, "install-root": paths.InstallRoot, "sysroot": paths.Sysroot,
		"max-jobs": paths.MaxJobs, "element-name": e.Name, "project-name": p.Name,
	}
	return NewVariables(fixed, e.vars)
}

// Resolved is an element's configuration and environment with every variable expanded.
type Resolved struct {
	Commands map[string][]string `json:"commands,omitempty"`
	Source   string              `json:"source,omitempty"`
	Target   string              `json:"target,omitempty"`
	Include  []string            `json:"include,omitempty"`
	Exclude  []string            `json:"exclude,omitempty"`
	Env      map[string]string   `json:"env,omitempty"`
}

// Resolve expands the element's config and environment. Errors name the element and key.
func (e *Element) Resolve(p *Project, paths Paths) (*Resolved, error) {
	vars := e.Variables(p, paths)
	r := &Resolved{Env: map[string]string{}}
	expand := func(key, s string) (string, error) {
		out, err := vars.Expand(s)
		if err != nil {
			line := e.doc.lineOf(key)
			return "", &ProjectError{File: e.File, Line: line, Msg: fmt.Sprintf("in %s: %v", key, err), Text: e.doc.line(line)}
		}
		return out, nil
	}
	var err error
	for step, cmds := range e.Config.Commands {
		if len(cmds) == 0 {
			continue
		}
		if r.Commands == nil {
			r.Commands = map[string][]string{}
		}
		out := make([]string, len(cmds))
		for i, c := range cmds {
			if out[i], err = expand("config."+step, c); err != nil {
				return nil, err
			}
		}
		r.Commands[step] = out
	}
	if r.Source, err = expand("config.source", e.Config.Source); err != nil {
		return nil, err
	}
	if r.Target, err = expand("config.target", e.Config.Target); err != nil {
		return nil, err
	}
	for _, c := range []struct{ key, val, root string }{{"config.source", r.Source, "build"}, {"config.target", r.Target, "install"}} {
		if leavesRoot(c.val) {
			line := e.doc.lineOf(c.key)
			return nil, &ProjectError{File: e.File, Line: line, Text: e.doc.line(line),
				Msg: fmt.Sprintf("%s %q contains '..': it must name a directory inside the %s root (a leading / is the root itself)", c.key, c.val, c.root)}
		}
	}
	r.Include, r.Exclude = e.Config.Include, e.Config.Exclude
	for k, v := range e.env {
		if r.Env[k], err = expand("environment."+k, v); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// leavesRoot reports whether p, a path taken relative to a root (build or install), has a
// ".." component, which could climb out of it.
func leavesRoot(p string) bool {
	return slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "..")
}

// CheckVariables expands every variable of the element, so that an undefined or cyclic
// variable is reported at load time even when no command uses it.
func (e *Element) CheckVariables(p *Project) error {
	vars := e.Variables(p, KeyPaths)
	for _, name := range slices.Sorted(maps.Keys(e.vars)) {
		if _, err := vars.lookup(name, nil); err != nil {
			key := "variables." + name
			line := e.doc.lineOf(key)
			if line == 0 {
				return &ProjectError{File: ProjectFile, Line: 0, Msg: fmt.Sprintf("variable %q (used by %s): %v", name, e.Name, err)}
			}
			return &ProjectError{File: e.File, Line: line, Msg: fmt.Sprintf("variable %q: %v", name, err), Text: e.doc.line(line)}
		}
	}
	return nil
}
