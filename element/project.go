// Package element loads a gantry project: project.toml, the user configuration, element
// files and gantry.lock; it expands variables, builds the dependency graph and computes
// cache keys.
package element

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/source"
)

// ProjectFile is the name of the file that marks a project root.
const ProjectFile = "project.toml"

// Project is a loaded project.toml.
type Project struct {
	Root           string            // absolute directory holding project.toml
	Name           string            `toml:"name"`
	ElementPath    string            `toml:"element-path"`
	DefaultTargets []string          `toml:"default-targets"`
	Variables      map[string]string `toml:"variables"`
	Environment    map[string]string `toml:"environment"`
	Pools          map[string]int    `toml:"pools"`
	Remotes        []remote.Spec     `toml:"remote"`
	// RemoteExecution is [remote-execution] (remoteexec.go); nil: none. Where builds
	// run is not what they make: in no key.
	RemoteExecution *RemoteExecution `toml:"remote-execution" json:"-"`
	// Aliases and Mirrors: see aliases.go. Neither reaches a key (json "-": not in
	// keyContext either); mirrors is the order fetch tries them in (UseMirrors).
	Aliases map[string]string `toml:"aliases" json:"-"`
	Mirrors []source.Mirror   `toml:"mirrors" json:"-"`
	mirrors []source.Mirror
	// FatalWarnings are the warnings that fail a build instead (WarningOverlaps). They
	// change whether a build succeeds, never what it makes: in no key.
	FatalWarnings []string `toml:"fatal-warnings" json:"-"`
	// WorkspaceDir is where `workspace open` puts workspaces by default: relative to
	// the project root, or absolute.
	WorkspaceDir string `toml:"workspace-dir"`
	// Hermetic is set by the command, not the file (--sandbox bwrap): the commands of
	// every element run in the bwrap sandbox, and their keys say so (sandboxClass).
	Hermetic bool `toml:"-"`
	// SourcesDir is the source cache, set by the command: tar and git junctions are
	// fetched into it and staged under it (junction.go). Not in any key.
	SourcesDir string `toml:"-" json:"-"`
	// UserOptions are the user configuration's [projects.NAME.options], by project name,
	// set by the command: a junction's sub-project is loaded with its own (junction.go).
	UserOptions map[string][]OptionSetting `toml:"-" json:"-"`
	// SourcesWaiting, set by the command, is told why a load waits for the cache's lock
	// (staging a junction while a cleanup runs).
	SourcesWaiting func(string) `toml:"-" json:"-"`
	// NoWeakKeys, set by a command that reads no weak key (a strict show without
	// %{weak-key}), leaves WeakKey empty: keys are computed without it (ComputeKey).
	NoWeakKeys bool `toml:"-" json:"-"`
	// Workspaces maps an element to the directory of its open workspace (from
	// WorkspacesFile).
	Workspaces map[string]string `toml:"-"`
	// Options are the declared [options], by name, and OptionValues their values for
	// this load (options.go); both enter keyContext.
	Options      map[string]*Option    `toml:"-"`
	OptionValues map[string]string     `toml:"-"`
	OptionsFile  map[string]optionFile `toml:"options" json:"-"`
	If           []toml.Primitive      `toml:"if" json:"-"`
	// Kinds are the defaults of [kinds.NAME], layered under each element file of the
	// kind (include.go).
	Kinds map[string]map[string]any `toml:"kinds" json:",omitempty"`
	// SplitRules are the project's split domains over DefaultSplitRules (public.go).
	SplitRules map[string][]string `toml:"split-rules" json:"split-rules,omitempty"`
	// Include are the files project.toml includes (include.go).
	Include []string     `toml:"include" json:"-"`
	scope   *optionScope // what element files are read in
	// junctionIncludes is set by a load that left includes through junctions out.
	junctionIncludes bool
}

var projectKeys = []string{"name", "element-path", "default-targets", "variables", "environment", "pools", "remote", "remote-execution", "workspace-dir", "options", "if", "aliases", "mirrors", "kinds", "include", "split-rules", "fatal-warnings"}

// WarningOverlaps is the warning of a path staged by two artifacts (staging.md).
const WarningOverlaps = "overlaps"

// Fatal reports whether fatal-warnings names warning.
func (p *Project) Fatal(warning string) bool { return slices.Contains(p.FatalWarnings, warning) }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// FindProject searches dir and its parents for project.toml and returns the directory
// holding it.
func FindProject(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	var looked []string
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, ProjectFile)); err == nil {
			return d, nil
		}
		looked = append(looked, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	return "", &ProjectError{
		Msg:  fmt.Sprintf("no %s found in %s or any parent directory", ProjectFile, abs),
		Hint: "run gantry inside a project, pass -C DIR, or create one with `gantry init`",
	}
}

// OptionLayers gives the option settings a project is loaded with from outside it,
// once its name is known, weakest layer first: the session's are the user
// configuration's [projects.NAME.options], then the command line's; a parent project
// would give its own the same way. Later layers win; unset options keep their defaults.
type OptionLayers func(project string) [][]OptionSetting

// LoadOptions are what a project is loaded with from outside it.
type LoadOptions struct {
	Layers OptionLayers // option settings (nil: every option at its default)
	// SourcesDir, SourcesWaiting and UserOptions are the Project fields of the same
	// names, set before project.toml's includes through tar and git junctions are read.
	SourcesDir     string
	SourcesWaiting func(string)
	UserOptions    map[string][]OptionSetting
}

// LoadProjectFor reads root/project.toml as o says.
func LoadProjectFor(root string, o LoadOptions) (*Project, error) {
	return loadProjectIn(root, o, nil)
}

// loadProjectIn reads root/project.toml in one pass, or, when it (or a file it includes)
// includes through a junction (JUNCTION:PATH), in two, as BuildStream does: first
// without those includes, which gives the project the junctions are loaded from (the
// junction elements' files are read from it); then again, reading them through the
// junctions. chain is the projects loading through their includes that this load is
// for (outermost first), for a cycle.
func loadProjectIn(root string, o LoadOptions, chain []chainLink) (*Project, error) {
	p, err := readProject(root, o, nil)
	if err != nil || !p.junctionIncludes {
		return p, err
	}
	if err := includeCycle(chain, p.Name); err != nil {
		return nil, err
	}
	lock, err := LoadLock(root)
	if err != nil {
		return nil, err
	}
	dir, err := openElementDir(p, "")
	if err != nil {
		return nil, err
	}
	g := &Graph{Project: p, Lock: lock, chain: chain}
	g.setTop(dir)
	defer g.closeContexts()
	return readProject(root, o, g.contexts[""].dir.origin.resolve)
}

// readProject reads root/project.toml; resolve reads its includes through junctions
// (nil: they are left out, and p.junctionIncludes says there were some).
func readProject(root string, o LoadOptions, resolve includeResolver) (*Project, error) {
	layers := o.Layers
	p := &Project{Root: root, SourcesDir: o.SourcesDir, SourcesWaiting: o.SourcesWaiting, UserOptions: o.UserOptions}
	doc, err := decodeTOML(filepath.Join(root, ProjectFile), ProjectFile, p)
	if err != nil {
		return nil, err
	}
	if err := doc.unknownKeys(func(parent []string) []string {
		switch {
		case len(parent) == 0:
			return projectKeys
		case parent[0] == "remote":
			return remoteKeys
		case parent[0] == "remote-execution":
			return remoteExecCandidates(parent)
		case parent[0] == "options" && len(parent) == 2:
			return optionKeys
		case parent[0] == "mirrors":
			return mirrorKeys
		}
		return nil
	}, "if", "kinds"); err != nil {
		return nil, err
	}
	if err := doc.checkTables("variables", "environment", "pools", "aliases"); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, &ProjectError{File: ProjectFile, Msg: "missing required key \"name\"", Hint: `add a line like name = "demo"`}
	}
	if !nameRE.MatchString(p.Name) {
		return nil, doc.valueError("name", "%q is not a valid project name: use lowercase letters, digits, '.', '_' and '-', starting with a letter or digit", p.Name)
	}
	if p.ElementPath == "" {
		p.ElementPath = "elements"
	}
	if filepath.IsAbs(p.ElementPath) || strings.HasPrefix(filepath.Clean(p.ElementPath), "..") {
		return nil, doc.valueError("element-path", "%q must be a directory inside the project", p.ElementPath)
	}
	if _, err := source.ProjectPath(root, p.ElementPath); err != nil {
		return nil, doc.valueError("element-path", "%v", err)
	}
	for name, n := range p.Pools {
		if n < 1 {
			return nil, doc.valueError("pools."+name, "a pool needs at least 1 token, got %d", n)
		}
	}
	if err := checkRemotes(doc, p.Remotes, root); err != nil {
		return nil, err
	}
	if err := checkRemoteExecution(doc, p.RemoteExecution, root); err != nil {
		return nil, err
	}
	if err := checkAliases(doc, p); err != nil {
		return nil, err
	}
	for _, w := range p.FatalWarnings {
		if w != WarningOverlaps {
			return nil, doc.valueError("fatal-warnings", "unknown warning %q%s; warnings: %s", w, didYouMean(w, []string{WarningOverlaps}), WarningOverlaps)
		}
	}
	for _, t := range p.DefaultTargets {
		if err := checkElementName(t); err != nil {
			return nil, doc.valueError("default-targets", "%v", err)
		}
	}
	if err := checkVariableNames(doc, "variables", p.Variables); err != nil {
		return nil, err
	}
	if err := checkEnvironment(doc, "environment", p.Environment); err != nil {
		return nil, err
	}
	if err := checkSplitRules(doc, p.SplitRules); err != nil {
		return nil, err
	}
	if err := doc.checkTables("options", "kinds", "split-rules"); err != nil {
		return nil, err
	}
	if err := checkKindDefaults(doc, p.Kinds); err != nil {
		return nil, err
	}
	if err := includeIntoProject(doc, p, resolve); err != nil {
		return nil, err
	}
	if p.Options, err = parseOptions(doc, p.OptionsFile); err != nil {
		return nil, err
	}
	var settings [][]OptionSetting
	if layers != nil {
		settings = layers(p.Name)
	}
	if p.OptionValues, err = resolveOptions(p.Options, settings...); err != nil {
		return nil, err
	}
	p.scope = newOptionScope(p)
	if err := p.exportOptionVariables(doc); err != nil {
		return nil, err
	}
	if err := p.applyProjectBlocks(doc, p.If); err != nil {
		return nil, err
	}
	if p.WorkspaceDir == "" {
		p.WorkspaceDir = defaultWorkspaceDir
	}
	ws, err := LoadWorkspaces(root)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		if p.Workspaces == nil {
			p.Workspaces = map[string]string{}
		}
		p.Workspaces[w.Element] = w.Directory
	}
	return p, nil
}

// ElementDir is the absolute directory holding element files.
func (p *Project) ElementDir() string { return filepath.Join(p.Root, p.ElementPath) }

// ElementNames lists every element file of the project, sorted.
func (p *Project) ElementNames() ([]string, error) {
	var names []string
	dir := p.ElementDir()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == dir {
				return fs.SkipAll
			}
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".toml") {
			rel, _ := filepath.Rel(dir, path)
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing elements in %s: %w", dir, err)
	}
	sort.Strings(names)
	return names, nil
}

// checkElementName checks an element name: each part of JUNCTION:...:ELEMENT, by
// checkElementPart.
func checkElementName(name string) error {
	for part := range strings.SplitSeq(name, ":") {
		if err := checkElementPart(part); err != nil {
			return err
		}
	}
	return nil
}

// checkElementPart rejects names that are absolute, escape the element directory, or are
// not .toml files.
func checkElementPart(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty element name")
	case filepath.IsAbs(name) || strings.HasPrefix(name, "/"):
		return fmt.Errorf("element name %q is an absolute path: name elements by their path under element-path", name)
	case strings.Contains("/"+name+"/", "/../") || strings.Contains("/"+name+"/", "/./"):
		return fmt.Errorf("element name %q contains '.' or '..': name elements by their path under element-path", name)
	case !strings.HasSuffix(name, ".toml"):
		return fmt.Errorf("element name %q must end in .toml", name)
	case strings.Contains(name, "//") || strings.Contains(name, "\\"):
		return fmt.Errorf("element name %q is not a clean path", name)
	}
	return nil
}
