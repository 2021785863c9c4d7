package element

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/source"
)

// junctionKind is the kind of an element whose sources hold another project: its
// elements are named through it, JUNCTION:ELEMENT (docs/junctions.md).
const junctionKind = "junction"

// projectContext is one project of a graph: the top project (path "") or the
// sub-project a junction holds (path "base.toml:", nested "a.toml:b.toml:"): its
// project.toml, its gantry.lock and its element directory. An element's qualified name
// is its context's path and its name in that project.
type projectContext struct {
	path     string
	project  *Project
	lock     *Lock
	dir      elementDir
	junction *Element // the junction holding the project (nil for the top project)
	parent   *projectContext
	// keyContext is keyContext(project) for a sub-project ("" for the top project:
	// Graph.keyContext).
	keyContext string
}

// keyContextOf is keyContext of e's own project (the graph's for the top project's).
func (g *Graph) keyContextOf(e *Element) string {
	if c := g.contexts[junctionPath(e.Name)]; c != nil && c.keyContext != "" {
		return c.keyContext
	}
	return g.keyContext
}

// openElementDir opens p's element directory for loadElement; show is p's root as
// errors name it ("" for the top project). Close it with close.
func openElementDir(p *Project, show string) (elementDir, error) {
	root, err := os.OpenRoot(p.Root)
	if err != nil {
		return elementDir{}, &ProjectError{File: filepath.Join(show, ProjectFile), Msg: fmt.Sprintf("cannot open the project directory %s: %v", p.Root, err)}
	}
	dir := elementDir{root: root, prefix: p.ElementPath, show: show}
	if er, err := root.OpenRoot(p.ElementPath); err == nil {
		root.Close()
		dir = elementDir{root: er, show: show}
	}
	if f, err := dir.root.Open("."); err == nil {
		dir.dir = f
	}
	return dir, nil
}

func (d elementDir) close() {
	if d.dir != nil {
		d.dir.Close()
	}
	d.root.Close()
}

func (g *Graph) closeContexts() {
	for _, c := range g.contexts {
		c.dir.close()
	}
}

// LockOf is where the refs of e's sources are locked: its own project's gantry.lock,
// under its name there. staged names, for an element of a project staged from a tar or
// git junction (or inside one), the outermost such junction: that lock is a copy in the
// source cache, not for writing; tracking that junction moves the project. e must be
// of g.
func (g *Graph) LockOf(e *Element) (lock *Lock, name string, staged string) {
	c := g.contexts[junctionPath(e.Name)]
	for j := c; j != nil && j.junction != nil; j = j.parent {
		if j.junction.Sources[0].Kind != source.Local {
			staged = j.junction.Name
		}
	}
	return c.lock, e.local, staged
}

// ElementNamesThrough lists, qualified and sorted, the elements of the project that
// junction path path ("base.toml:", nested "a.toml:b.toml:") of p holds (for
// completion): the junctions on the path are loaded as a graph would load them.
func ElementNamesThrough(p *Project, lock *Lock, path string) ([]string, error) {
	dir, err := openElementDir(p, "")
	if err != nil {
		return nil, err
	}
	g := &Graph{Project: p, Lock: lock}
	g.setTop(dir)
	defer g.closeContexts()
	c, err := g.context(path, path, nil)
	if err != nil {
		return nil, err
	}
	names, err := c.project.ElementNames()
	for i := range names {
		names[i] = path + names[i]
	}
	return names, err
}

// Holds is the project junction j holds and its directory as errors name it (relative to
// the top project's root when inside it), loaded by LoadShowingJunctions; nil and ""
// when it was not loaded (j has no ref, or is no junction target of such a load).
func (g *Graph) Holds(j *Element) (*Project, string) {
	c := g.contexts[j.Name+":"]
	if c == nil {
		return nil, ""
	}
	return c.project, c.dir.showRoot()
}

// junctionPath is the junction path of a qualified element name: everything up to its
// last colon, with it ("" for an element of the top project).
func junctionPath(name string) string {
	return name[:strings.LastIndexByte(name, ':')+1]
}

// Project is the project e belongs to: the sub-project of the junction it is named
// through, or the graph's. Its local sources are relative to this project's root.
func (e *Element) Project() *Project { return e.project }

// ownRoot is the root of e's own project (g's for an element made without one).
func (e *Element) ownRoot(g *Graph) string {
	if e.project != nil {
		return e.project.Root
	}
	return g.Project.Root
}

// qualify names d, a name e's file gives, as the graph does: with e's junction path.
func (e *Element) qualify(d string) string {
	if len(e.Name) == len(e.local) {
		return d
	}
	return e.Name[:len(e.Name)-len(e.local)] + d
}

// DepName is the graph's name (Graph.Elements) of d, a dependency as e's file names it
// (in Depends, BuildDepends or RuntimeDepends): d with e's junction path, or the name
// a junction's override gave.
func (e *Element) DepName(d string) string {
	if name, ok := e.depNames[d]; ok {
		return name
	}
	return e.qualify(d)
}

// IsJunction says whether e is a junction: a target of LoadWithJunctions, never built.
func (e *Element) IsJunction() bool { return e.Kind != nil && e.Kind.Name == junctionKind }

// unqualify is the name e's own project gives the element named d in the graph, a
// dependency of e: as e's file names it (d without e's junction path, or the name a
// junction's override replaced).
func (e *Element) unqualify(d string) string {
	if n, ok := e.named[d]; ok {
		return n
	}
	return strings.TrimPrefix(d, e.Name[:len(e.Name)-len(e.local)])
}

// contextOf returns the project the element name (qualified) belongs to, loading the
// junctions on its path if no name loaded them before; ref named it, for errors.
func (g *Graph) contextOf(name string, ref *Element) (*projectContext, error) {
	return g.context(junctionPath(name), name, ref)
}

// context returns the project of junction path path, loading it (and the projects
// holding it) if needed. Called only between rounds of parallel loading.
func (g *Graph) context(path, name string, ref *Element) (*projectContext, error) {
	if c, ok := g.contexts[path]; ok {
		return c, nil
	}
	inner := path[:len(path)-1] // without its last colon
	parent, err := g.context(junctionPath(inner), name, ref)
	if err != nil {
		return nil, err
	}
	junction := inner[len(parent.path):]
	defer g.making(path, "junction "+inner)()
	j, err := loadElement(parent.project, parent.dir, parent.lock, junction, nil)
	if errors.Is(err, errNoFile) {
		return nil, g.missing(parent, inner, ref)
	}
	if err != nil {
		return nil, err
	}
	j.Name, j.local, j.project = inner, junction, parent.project
	where := func() (string, int, string) {
		if ref == nil {
			return "", 0, ""
		}
		return ref.document().locate(dependsKeyOf(ref, name))
	}
	if j.Kind.Name != junctionKind {
		file, line, text := where()
		return nil, &ProjectError{File: file, Line: line, Text: text,
			Msg:  fmt.Sprintf("%s names an element of %s, which is not a junction (kind %q)", name, inner, j.Kind.Name),
			Hint: `in JUNCTION:ELEMENT, JUNCTION is an element of kind "junction"`}
	}
	dir, err := g.junctionDir(j)
	if err != nil {
		return nil, err
	}
	show := dir
	if rel, err := filepath.Rel(g.Project.Root, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		show = filepath.ToSlash(rel)
	}
	if _, err := os.Stat(filepath.Join(dir, ProjectFile)); err != nil {
		doc := j.document()
		line := doc.lineOf("sources[0].path")
		return nil, &ProjectError{File: j.File, Line: line, Text: doc.line(line), Msg: fmt.Sprintf("junction %s: its sources hold no %s (looked in %s)", inner, ProjectFile, show),
			Hint: "a junction's sources must hold a gantry project: a directory with project.toml"}
	}
	for c := parent; c != nil; c = c.parent {
		if c.project.Root == dir {
			return nil, junctionCycle(parent, j, c.project.Name)
		}
	}
	settings, err := junctionSettings(j, parent.project)
	if err != nil {
		return nil, err
	}
	var user []OptionSetting
	sub, err := loadProjectIn(dir, LoadOptions{Layers: func(name string) [][]OptionSetting {
		user = g.Project.UserOptions[name]
		return [][]OptionSetting{settings, user} // the user's configuration wins
	}, SourcesDir: g.Project.SourcesDir, SourcesWaiting: g.Project.SourcesWaiting, UserOptions: g.Project.UserOptions}, g.chainOut())
	if err != nil {
		return nil, inJunction(err, show, j.File, user)
	}
	sub.Hermetic, sub.UserOptions = g.Project.Hermetic, g.Project.UserOptions
	if err := g.sameProject(j, sub, show); err != nil {
		return nil, err
	}
	lock, err := LoadLock(dir)
	if err != nil {
		return nil, inJunction(err, show, "", nil)
	}
	edir, err := openElementDir(sub, show)
	if err != nil {
		return nil, err
	}
	if err := checkOverrides(j, parent, sub, edir); err != nil {
		edir.close()
		return nil, err
	}
	c := &projectContext{path: path, project: sub, lock: lock, dir: edir, junction: j, parent: parent, keyContext: keyContext(sub)}
	c.dir.origin = g.includeOrigin(c)
	g.contexts[path] = c
	return c, nil
}

// junctionCycle is the error for junction j (of project parent) holding the project
// again, which holds it already: the chain of junctions from the top project.
func junctionCycle(parent *projectContext, j *Element, again string) error {
	var chain []string
	for c := parent; c != nil; c = c.parent {
		if c.junction == nil {
			chain = append(chain, fmt.Sprintf("project %s", c.project.Name))
		} else {
			chain = append(chain, fmt.Sprintf("%s (project %s)", c.junction.Name, c.project.Name))
		}
	}
	slices.Reverse(chain)
	chain = append(chain, fmt.Sprintf("%s (project %s again)", j.Name, again))
	return &ProjectError{File: j.File, Msg: "junction cycle: " + strings.Join(chain, " -> "),
		Hint: "a junction may not hold a project that holds it"}
}

// sameProject refuses sub, the project junction j holds (at show), when the graph
// holds a project of the same name from another source already: two versions of one
// project would give two artifacts for one element name.
func (g *Graph) sameProject(j *Element, sub *Project, show string) error {
	for _, path := range slices.Sorted(maps.Keys(g.contexts)) {
		o := g.contexts[path]
		if o.project.Name != sub.Name || o.project.Root == sub.Root {
			continue
		}
		other := "this project"
		if o.junction != nil {
			other = "junction " + o.junction.Name
		}
		return &ProjectError{File: j.File, Msg: fmt.Sprintf("junction %s and %s hold project %q from different sources (%s and %s)", j.Name, other, sub.Name, show, o.dir.showRoot()),
			Hint: "make both junctions use the same source"}
	}
	return nil
}

// showRoot is the project root as errors name it.
func (d elementDir) showRoot() string {
	if d.show == "" {
		return "."
	}
	return d.show
}

// junctionDir is the directory holding the project of junction j: its one source's
// directory for a local source; for tar and git, the source fetched into the source
// cache (if it is not there) and staged, once per source key, under junctions/ there
// (cache.StagedJunction, which marks it used for `cache gc`).
func (g *Graph) junctionDir(j *Element) (string, error) {
	if err := checkJunctionSources(j); err != nil {
		return "", err
	}
	s := &j.Sources[0]
	if s.Kind == source.Local {
		dir, err := source.ProjectPath(j.project.Root, s.Path)
		if err != nil {
			return "", &ProjectError{File: j.File, Line: j.document().lineOf("sources[0].path"), Msg: fmt.Sprintf("junction %s: %v", j.Name, err)}
		}
		return dir, nil
	}
	if s.Ref == "" {
		return "", &ProjectError{File: j.File, Msg: fmt.Sprintf("junction %s has no ref for source 1 (%s)", j.Name, s.Describe()),
			Hint: fmt.Sprintf("run `gantry track %s` (a junction's project is loaded from a fixed version of its source)", j.Name)}
	}
	failed := func(doing string, err error) error {
		return &ProjectError{File: j.File, Msg: fmt.Sprintf("junction %s: %s source 1 (%s): %v", j.Name, doing, s.Describe(), err)}
	}
	if g.Project.SourcesDir == "" {
		return "", failed("loading", errors.New("no source cache to fetch it into"))
	}
	key, err := s.UniqueKey(j.project.Root)
	if err != nil {
		return "", failed("keying", err)
	}
	sum := sha256.Sum256([]byte(key))
	ctx := context.Background()
	dir, err := cache.StagedJunction(g.Project.SourcesDir, hex.EncodeToString(sum[:16]), cache.JunctionStaging{
		Fetch: func() error {
			if err := source.Fetch(ctx, s, source.FetchOptions{SourcesDir: g.Project.SourcesDir, ProjectRoot: j.project.Root}); err != nil {
				return failed("fetching", err)
			}
			return nil
		},
		Stage: func(tmp string) error {
			staged := *s
			staged.Directory = ""
			return source.Stage(ctx, &staged, source.StageOptions{ProjectRoot: j.project.Root, SourcesDir: g.Project.SourcesDir, BuildRoot: tmp})
		},
		Waiting: g.Project.SourcesWaiting,
	})
	var pe *ProjectError
	if errors.As(err, &pe) {
		return "", err
	}
	if err != nil {
		return "", failed("staging", err)
	}
	return dir, nil
}

// checkJunctionSources refuses a junction without exactly one local, tar or git source.
func checkJunctionSources(j *Element) error {
	if len(j.Sources) != 1 || j.Sources[0].Kind == source.Patch || j.Sources[0].Kind == source.Remote {
		doc := j.document()
		line := doc.lineOf(fmt.Sprintf("sources[%d]", min(1, len(j.Sources)-1))) // the one too many, or the wrong one
		return &ProjectError{File: j.File, Line: line, Text: doc.line(line),
			Msg:  fmt.Sprintf("junction %s: needs exactly one source, of kind \"local\", \"tar\" or \"git\"", j.Name),
			Hint: "a junction holds a project in one source: a local directory, a tarball or a git repository"}
	}
	return nil
}

// inJunction names the files of err, an error loading the project at show (a
// junction's), from the top project's root; but for file, the junction's, and the
// files of user's settings (the user configuration's), named so already (a bad option
// setting in the junction's [config.options] or in [projects.NAME.options]).
func inJunction(err error, show, file string, user []OptionSetting) error {
	var pe *ProjectError
	if errors.As(err, &pe) && pe.File != "" && pe.File != file && !filepath.IsAbs(pe.File) &&
		!slices.ContainsFunc(user, func(s OptionSetting) bool { return s.File == pe.File }) {
		pe.File = filepath.ToSlash(filepath.Join(show, pe.File))
	}
	return err
}

// junctionOptions reads a junction's [config.options]: the option settings of the
// project it holds, each with its line, in name order.
func junctionOptions(t *table) ([]OptionSetting, error) {
	m, err := junctionTable(t, "options", "a table of option settings")
	if err != nil {
		return nil, err
	}
	var out []OptionSetting
	for _, name := range sortedKeys(m) {
		key := t.keyPath("options") + "." + name
		value, err := optionSettingValue(t.doc, key, m[name])
		if err != nil {
			return nil, err
		}
		out = append(out, OptionSetting{Name: name, Value: value, File: t.doc.display, Line: t.doc.lineOf(key)})
	}
	return out, nil
}

// junctionSettings is junction j's [config.options] with the variables in each value
// expanded, as in any element's config: those of parent, the project holding j (its
// options' exported variables among them), and of j's file. So `arch = "%{arch}"`
// passes the parent's arch on, and the sub-project sees only the value it expands to:
// its keys depend on that, not on how the file spells it.
func junctionSettings(j *Element, parent *Project) ([]OptionSetting, error) {
	out := slices.Clone(j.Config.Options)
	var vars *Variables
	for i, s := range out {
		if !strings.Contains(s.Value, "%{") {
			continue
		}
		if vars == nil {
			vars = j.Variables(parent, keyPaths())
		}
		v, err := vars.Expand(s.Value)
		if err != nil {
			pe := s.error("%v", err).(*ProjectError)
			pe.Hint = `a junction's option values expand this project's variables and those of the junction's file; an option is a variable when it declares one (variable = "NAME" in [options.NAME])`
			return nil, pe
		}
		out[i].Value, out[i].Written = v, s.Value
	}
	return out, nil
}

// dependsOnJunction is the error for naming junction e (name) as an element.
func (g *Graph) dependsOnJunction(e *Element, name string, ref *Element) error {
	pe := &ProjectError{Msg: fmt.Sprintf("%s is a junction, not an element to build", name),
		Hint: fmt.Sprintf("name an element of the project it holds: %s:ELEMENT (`gantry show`, `gantry track` and `gantry fetch` take the junction itself)", name)}
	if ref != nil {
		pe.File, pe.Line, pe.Text = ref.document().locate(dependsKeyOf(ref, name))
		pe.Msg = fmt.Sprintf("depends on %s, which is a junction, not an element to build", name)
		pe.Hint = fmt.Sprintf("name an element of the project it holds: %s:ELEMENT", name)
	}
	return pe
}

// ArtifactName is the project and element names e's artifacts, logs and learnt
// durations are kept under: its own project's name and its name there (top, the graph's
// project name, and e.Name for an element made without a project), so a build through a
// junction and a direct build of the sub-project share artifacts, locally and on remotes.
func (e *Element) ArtifactName(top string) (project, name string) {
	if e.project == nil || e.local == "" {
		return top, e.Name
	}
	return e.project.Name, e.local
}

// Override is one entry of a junction's [config.overrides]: the element (or junction)
// Name of the project the junction holds is the element (or junction) As of the
// junction's own project.
type Override struct {
	Name, As string
	Line     int // in the junction's file
}

// junctionOverrides reads a junction's [config.overrides], in name order.
func junctionOverrides(t *table) ([]Override, error) {
	m, err := junctionTable(t, "overrides", `a table of overrides ("NAME" = "PARENT-NAME")`)
	if err != nil {
		return nil, err
	}
	var out []Override
	for _, name := range sortedKeys(m) {
		key := t.keyPath("overrides") + "." + name
		as, ok := m[name].(string)
		if !ok {
			return nil, t.doc.valueError(key, "override %q: expected the name of an element of this project, found %s", name, tomlTypeName(m[name]))
		}
		for _, n := range []string{name, as} {
			if err := checkElementName(n); err != nil {
				return nil, t.doc.valueError(key, "override %q = %q: %v", name, as, err)
			}
		}
		if strings.Contains(name, ":") {
			return nil, t.doc.valueError(key, "override %q: name an element or a junction of the project the junction holds, not one through its junctions", name)
		}
		line := t.doc.lineOf(key)
		if strings.Contains(name, ".") { // the file's quoted key, as the line index keeps it
			line = t.doc.lineOf(t.keyPath("overrides") + "." + strconv.Quote(name))
		}
		out = append(out, Override{Name: name, As: as, Line: line})
	}
	return out, nil
}

// resolve is the graph's name of d, a dependency as e's file names it: d qualified with
// e's junction path, unless the junction holding e's project overrides d (an element)
// or d's junction (its first part): then the name the override gives, in the project
// holding the junction, resolved there in turn.
func (g *Graph) resolve(e *Element, d string) string {
	c := g.contexts[junctionPath(e.Name)]
	if c == nil {
		return e.qualify(d)
	}
	c, d = resolveIn(c, d)
	return c.path + d
}

// canonical is the graph's name of q, a qualified name (a target, or a dependency name
// resolve gave): walking its junctions from the top project, the rest of the name after
// each is resolved in the project that junction holds, whose junction's overrides may
// send it back to a project holding it. ref named q, for errors.
func (g *Graph) canonical(q string, ref *Element) (string, error) {
	return g.walk(q, func(path, q string) (*projectContext, error) { return g.context(path, q, ref) })
}

// walk is canonical's walk, get giving the project of each junction path on the way
// (q: the name as resolved so far, for errors).
func (g *Graph) walk(q string, get func(path, q string) (*projectContext, error)) (string, error) {
	named, done := q, 0 // q[:done] is a junction path walked already
	for range 1000 {
		i := strings.IndexByte(q[done:], ':')
		if i < 0 {
			return q, nil
		}
		path := q[:done+i+1]
		c, err := get(path, q)
		if err != nil {
			return "", err
		}
		to, d := resolveIn(c, q[len(path):])
		q, done = to.path+d, len(to.path)
	}
	return "", &ProjectError{Msg: fmt.Sprintf("resolving %s: the junctions' [config.overrides] send it round in a loop", named),
		Hint: "an override must name an element that is not overridden back"}
}

// resolveIn resolves d, a name in the project of c, through the overrides of the
// junctions holding it: the context whose project d names an element of, and d set to
// the name there.
func resolveIn(c *projectContext, d string) (*projectContext, string) {
	for c.junction != nil {
		first, rest, nested := strings.Cut(d, ":")
		i := slices.IndexFunc(c.junction.Config.Overrides, func(o Override) bool { return o.Name == first })
		if i < 0 {
			break
		}
		d = c.junction.Config.Overrides[i].As
		if nested {
			d += ":" + rest
		}
		c = c.parent
	}
	return c, d
}

// checkOverrides checks junction j's [config.overrides]: each name is an element (or
// junction) of sub, the project j holds (its element directory subDir), and what it is overridden with (its first part, for a name through a
// junction) is one of the project of parent, the context holding j; an element is
// overridden by an element, a junction by a junction (for a value through the parent's
// junctions, its first part is a junction: what it names is checked when named).
func checkOverrides(j *Element, parent *projectContext, sub *Project, subDir elementDir) error {
	if len(j.Config.Overrides) == 0 {
		return nil
	}
	subNames, err := sub.ElementNames()
	if err != nil {
		return err
	}
	parentNames, err := parent.project.ElementNames()
	if err != nil {
		return err
	}
	for _, o := range j.Config.Overrides {
		fail := func(msg, hint string) error {
			doc := j.document()
			return &ProjectError{File: j.File, Line: o.Line, Text: doc.line(o.Line), Msg: fmt.Sprintf("junction %s: override %q = %q: %s", j.Name, o.Name, o.As, msg), Hint: hint}
		}
		const hint = "in [config.overrides], \"NAME\" = \"PARENT-NAME\" makes the element or junction NAME of the project the junction holds this project's PARENT-NAME"
		if !slices.Contains(subNames, o.Name) {
			return fail(fmt.Sprintf("project %s has no element %s%s", sub.Name, o.Name, didYouMean(o.Name, subNames)), hint)
		}
		first, _, nested := strings.Cut(o.As, ":")
		if !slices.Contains(parentNames, first) {
			return fail(fmt.Sprintf("project %s has no element %s%s", parent.project.Name, first, didYouMean(first, parentNames)), hint)
		}
		overridden, err := elementKind(sub, subDir, o.Name)
		if err != nil {
			return err
		}
		by, err := elementKind(parent.project, parent.dir, first)
		if err != nil {
			return err
		}
		isJunction, byJunction := overridden == junctionKind, by == junctionKind
		switch {
		case nested && !byJunction:
			return fail(fmt.Sprintf("%s names an element of %s, which is not a junction (kind %q)", o.As, first, by),
				`in JUNCTION:ELEMENT, JUNCTION is an element of kind "junction"`)
		case !nested && isJunction != byJunction:
			what := func(junction bool, kind string) string {
				if junction {
					return "a junction"
				}
				return fmt.Sprintf("an element (kind %q)", kind)
			}
			return fail(fmt.Sprintf("%s of project %s is %s, %s of project %s is %s", o.Name, sub.Name, what(isJunction, overridden), o.As, parent.project.Name, what(byJunction, by)),
				"an element is overridden by an element, a junction by a junction")
		}
	}
	return nil
}

// junctionTable is the table key of a junction's [config] (nil when absent); expected
// says what it holds, for the error when it is not a table.
func junctionTable(t *table, key, expected string) (map[string]any, error) {
	t.use(key)
	v, ok := t.m[key]
	if !ok {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, t.doc.valueError(t.keyPath(key), "expected %s, found %s", expected, tomlTypeName(v))
	}
	return m, nil
}

// overridden records that e's dependency d (as its file names it) is the graph's name
// name, which a junction's override gave.
func (e *Element) overridden(d, name string) {
	if e.named == nil {
		e.named, e.depNames = map[string]string{}, map[string]string{}
	}
	e.named[name], e.depNames[d] = d, name
}

// overridesIn is a hint for a dependency cycle (each element depending on the next):
// the edges a junction's [config.overrides] made, "" when none did.
func (g *Graph) overridesIn(cycle []*Element) string {
	var edges []string
	for i, e := range cycle[:len(cycle)-1] {
		d, ok := e.named[cycle[i+1].Name]
		if !ok {
			continue
		}
		first, _, _ := strings.Cut(d, ":")
		for c := g.contexts[junctionPath(e.Name)]; c != nil && c.junction != nil; c = c.parent {
			if slices.ContainsFunc(c.junction.Config.Overrides, func(o Override) bool { return o.Name == first }) {
				edges = append(edges, fmt.Sprintf("%s names %s, which junction %s overrides with %s", e.Name, d, c.junction.Name, cycle[i+1].Name))
				break
			}
		}
	}
	if len(edges) == 0 {
		return ""
	}
	return "the cycle goes through [config.overrides]: " + strings.Join(edges, "; ")
}

// elementKind reads only the kind of p's element file name (in dir; errNoFile when
// there is none): enough to tell a junction, without reading what the file includes.
func elementKind(p *Project, dir elementDir, name string) (string, error) {
	display := filepath.ToSlash(filepath.Join(dir.show, p.ElementPath, filepath.FromSlash(name)))
	data, _, err := readElementFile(dir, filepath.Join(dir.prefix, filepath.FromSlash(name)), display)
	if err != nil {
		return "", err
	}
	var f struct {
		Kind string `toml:"kind"`
	}
	if _, err := decodeTOMLBytes(data, display, &f); err != nil {
		return "", err
	}
	return f.Kind, nil
}
