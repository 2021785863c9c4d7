package actions

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/sandbox"
	"github.com/gantry-build/gantry/source"
)

// Integration commands and split domains (docs/integration.md). A staged element's
// public data travels in the build spec, expanded by the planning process: its
// integration commands for each sandbox (the build picks one only once its sysroot is
// staged, under auto), and, for a compose or filter that selects domains, its split
// rules.

// stagedPublic is what a build uses of one staged element's public data.
type stagedPublic struct {
	Host  []string            `json:"host,omitempty"`  // integration commands, host paths
	Bwrap []string            `json:"bwrap,omitempty"` // the same, sandbox paths
	Split map[string][]string `json:"split,omitempty"` // domain -> rules, for a selection
}

// commands is s's integration commands in the sandbox kind.
func (s *stagedPublic) commands(kind sandbox.Kind) []string {
	if s == nil {
		return nil
	}
	if kind == sandbox.Bwrap {
		return s.Bwrap
	}
	return s.Host
}

// integrates reports whether the build runs integration commands: a kind that runs
// commands, or a compose that integrates, staging an element that has some.
func (spec *buildSpec) integrates() bool {
	return slices.ContainsFunc(spec.Stage, func(s stagedArtifact) bool { return s.Public != nil && len(s.Public.Bwrap) > 0 })
}

// selects reports whether a compose or filter keeps only some of what it stages.
func selects(r *element.Resolved, kind string) bool {
	return len(r.Include) > 0 || len(r.Exclude) > 0 || !r.IncludeOrphans(kind)
}

// addPublicData sets the public data of the elements spec stages that the build of e
// uses: their integration commands when e runs commands (or is a compose that
// integrates), expanded in each one's own context with the paths of e's build tree t;
// their split rules when e is a compose or filter that selects. stage is what e's
// build stages (StageDeps). A filter stages only its one build dependency's artifact,
// not what that one stages.
func addPublicData(g *element.Graph, e *element.Element, spec *buildSpec, stage []*element.Element, t tree, jobs string) error {
	if e.Kind.Name == "filter" {
		stage = e.BuildDeps // one: checked at load
		spec.Stage = slices.DeleteFunc(spec.Stage, func(s stagedArtifact) bool { return s.ref() != stagedRef(spec, stage[0]) })
	}
	integrates := e.Kind.Commands || e.Kind.Name == "compose" && spec.Bwrap.Integrates()
	split := (e.Kind.Name == "compose" || e.Kind.Name == "filter") && selects(spec.Bwrap, e.Kind.Name)
	if !integrates && !split {
		return nil
	}
	host, bwrap := hostRefs(t.paths(sandbox.Host, jobs)), t.paths(sandbox.Bwrap, jobs)
	public := map[[2]string]*stagedPublic{} // by stagedRef
	for _, d := range stage {
		var pub stagedPublic
		var err error
		if integrates && d.HasIntegration() {
			if pub.Host, err = d.IntegrationCommands(g.Project, host); err != nil {
				return err
			}
			if pub.Bwrap, err = d.IntegrationCommands(g.Project, bwrap); err != nil {
				return err
			}
		}
		if split {
			if pub.Split, err = d.SplitRules(g.Project, bwrap); err != nil {
				return err
			}
		}
		if pub.Bwrap != nil || pub.Split != nil {
			public[stagedRef(spec, d)] = &pub
		}
	}
	for i := range spec.Stage { // matched by name: the staged list's order is the staging's
		spec.Stage[i].Public = public[spec.Stage[i].ref()]
	}
	return nil
}

// stagedRef is how spec.Stage names d's artifact: its project ("" for spec's) and name.
func stagedRef(spec *buildSpec, d *element.Element) [2]string {
	project, name := d.ArtifactName(spec.Project)
	if project == spec.Project {
		project = ""
	}
	return [2]string{project, name}
}

func (s stagedArtifact) ref() [2]string { return [2]string{s.Project, s.Element} }

// integrate runs the integration commands of spec's staged elements in runner, in
// staging order, each in the sysroot (/ under bwrap), before the build's own
// commands. A failing command fails the build, naming the element and the command.
func integrate(ctx context.Context, runner *sandbox.Runner, spec *buildSpec, kind sandbox.Kind, t tree, r *job.Reporter) error {
	var steps []integration
	for _, s := range spec.Stage {
		if cmds := s.Public.commands(kind); len(cmds) > 0 {
			steps = append(steps, integration{s.Element, cmds})
		}
	}
	return runIntegration(ctx, runner, sysrootDir(kind, t), steps, r.Log, r.Status)
}

// integration is one staged element's integration commands, expanded.
type integration struct {
	element  string
	commands []string
}

// sysrootDir is the sysroot of t as commands of the sandbox kind see it.
func sysrootDir(kind sandbox.Kind, t tree) string {
	if kind == sandbox.Bwrap {
		return "/"
	}
	return t.sysroot
}

// runIntegration runs steps in order in runner, in dir, saying what it does with log
// and status (a build's log and status line; a shell's stderr).
func runIntegration(ctx context.Context, runner *sandbox.Runner, dir string, steps []integration, log, status func(string)) error {
	for _, s := range steps {
		started := time.Now()
		log("integrating " + s.element)
		for _, cmd := range s.commands {
			status("integrate " + s.element + ": " + firstLine(cmd))
			log("+ " + cmd)
			if err := runner.RunIn(ctx, dir, cmd); err != nil {
				log(fmt.Sprintf("integration-commands of %s failed after %s", s.element, since(started)))
				return fmt.Errorf("integration-commands of %s: %w", s.element, err)
			}
		}
		log(fmt.Sprintf("integration-commands of %s done in %s", s.element, since(started)))
	}
	return nil
}

// composeJob assembles a compose or a filter from what spec staged (deps, in the
// sysroot of t): a compose that integrates runs the integration commands there first;
// then the files the selection keeps are copied into the install root. It returns the
// Runner the integration commands ran in, if any, for build's caller to close.
func composeJob(ctx context.Context, c *cache.Cache, spec *buildSpec, deps []*cache.Artifact, t tree, r *job.Reporter, out io.Writer) (*sandbox.Runner, error) {
	res := spec.Bwrap
	split := selects(res, spec.Kind)
	var before map[string]bool // the sysroot's paths as staged, before integration
	var runner *sandbox.Runner
	skip := map[string]bool{} // the mount points a sandbox made in the sysroot
	if spec.integrates() {
		var err error
		if before, err = sysrootPaths(t.sysroot); err != nil {
			return nil, &infraError{err}
		}
		for _, p := range []string{"dev", "proc", "tmp", "gantry", "gantry/build", "gantry/install"} {
			skip[p] = !before[p]
		}
		if runner, err = prepareIntegration(ctx, c, spec, deps, t, r, out); err != nil {
			return runner, err
		}
	} else if err := waitForBuilder(ctx, r); err != nil {
		return nil, err
	}
	if !split {
		return runner, copySelection(t.sysroot, t.install, nil, skip)
	}
	keep := map[string]bool{}
	for i, a := range deps {
		s := spec.Stage[i]
		var rules map[string][]string
		if s.Public != nil {
			rules = s.Public.Split
		}
		sel, err := newSelection(rules, res.Include, res.Exclude, res.IncludeOrphans(spec.Kind))
		if err != nil {
			return runner, fmt.Errorf("split rules of %s: %w", s.Element, err)
		}
		err = c.WalkTree(a.Files, func(e cache.TreeEntry) error {
			if sel.keeps(e.Path) {
				keep[e.Path] = true
			}
			return nil
		})
		if err != nil {
			return runner, &infraError{fmt.Errorf("listing the files of %s: %w", s.Element, err)}
		}
	}
	if before != nil && split {
		// What integration added is kept, what it removed is not (BuildStream's compose).
		after, err := sysrootPaths(t.sysroot)
		if err != nil {
			return runner, &infraError{err}
		}
		added := 0
		for p := range after {
			if !before[p] && !skip[p] {
				keep[p], added = true, added+1
			}
		}
		for p := range keep {
			if !after[p] {
				delete(keep, p)
			}
		}
		r.Log(fmt.Sprintf("integration added %d paths", added))
	}
	r.Log(fmt.Sprintf("%s: keeping %d paths (include %v, exclude %v, orphans %v)", spec.Kind, len(keep), res.Include, res.Exclude, res.IncludeOrphans(spec.Kind)))
	return runner, copySelection(t.sysroot, t.install, keep, skip)
}

// prepareIntegration runs the integration commands of a compose in a sandbox of its
// sysroot (staged as copies: stageLinks), as a build would run its own commands.
func prepareIntegration(ctx context.Context, c *cache.Cache, spec *buildSpec, deps []*cache.Artifact, t tree, r *job.Reporter, out io.Writer) (*sandbox.Runner, error) {
	runner, kind, err := prepareCommands(ctx, c, spec, t, deps, false, r, out)
	if err != nil {
		return runner, err
	}
	if err := waitForBuilder(ctx, r); err != nil {
		return runner, err
	}
	return runner, integrate(ctx, runner, spec, kind, t, r)
}

// sysrootPaths lists every path under sysroot (slash-separated, relative), but the
// mount points a bwrap sandbox made in it.
func sysrootPaths(sysroot string) (map[string]bool, error) {
	out := map[string]bool{}
	err := filepath.WalkDir(sysroot, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == sysroot {
			return err
		}
		rel, _ := filepath.Rel(sysroot, p)
		out[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the sysroot: %w", err)
	}
	return out, nil
}

// copySelection copies the paths of sysroot that keep holds (all when keep is nil)
// but those skip holds into install: files and links as they are, directories as the
// parents of what they hold (an empty one is left out, as compose always did). Writes
// go through an os.Root of the install root; links are copied, never followed.
func copySelection(sysroot, install string, keep, skip map[string]bool) error {
	out, err := os.OpenRoot(install)
	if err != nil {
		return &infraError{err}
	}
	defer out.Close()
	return filepath.WalkDir(sysroot, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == sysroot {
			return err
		}
		rel, _ := filepath.Rel(sysroot, p)
		rel = filepath.ToSlash(rel)
		if skip[rel] {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || keep != nil && !keep[rel] {
			return nil
		}
		return source.CopyTree(p, out, filepath.FromSlash(path.Dir(rel))) // keeps the mode or symlink
	})
}

// selection is what a compose or filter keeps of one staged element's files, by its
// split rules (BuildStream's split filter): a file one of the included domains claims
// (every domain the element has, when include is empty), unless an excluded domain
// claims it too; a file no domain claims when orphans are kept.
type selection struct {
	domains          map[string]*regexp.Regexp
	include, exclude []string
	orphans          bool
}

func newSelection(rules map[string][]string, include, exclude []string, orphans bool) (*selection, error) {
	s := &selection{domains: map[string]*regexp.Regexp{}, exclude: exclude, orphans: orphans}
	for d, globs := range rules {
		if len(globs) == 0 {
			continue
		}
		re, err := element.SplitRegexp(globs)
		if err != nil {
			return nil, fmt.Errorf("domain %s: %w", d, err)
		}
		s.domains[d] = re
	}
	s.include = include
	if len(include) == 0 {
		for d := range s.domains {
			s.include = append(s.include, d)
		}
	}
	return s, nil
}

// keeps reports whether the selection keeps rel, a path relative to the artifact root.
func (s *selection) keeps(rel string) bool {
	abs := "/" + rel
	claimed, in, out := false, false, false
	for d, re := range s.domains {
		if !re.MatchString(abs) {
			continue
		}
		claimed = true
		in = in || slices.Contains(s.include, d)
		out = out || slices.Contains(s.exclude, d)
	}
	if s.orphans && !claimed {
		in = true
	}
	return in && !out
}
