package element

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Deps selects which dependencies of the targets a command works on.
type Deps string

const (
	DepsNone  Deps = "none"  // the targets only
	DepsRun   Deps = "run"   // the targets and what they need to run
	DepsBuild Deps = "build" // what the targets need to build (not the targets)
	DepsAll   Deps = "all"   // everything the targets depend on, and the targets
)

// ParseDeps validates a --deps value.
func ParseDeps(s string) (Deps, error) {
	switch d := Deps(s); d {
	case DepsNone, DepsRun, DepsBuild, DepsAll:
		return d, nil
	}
	return "", fmt.Errorf("invalid --deps %q: use none, run, build or all", s)
}

// Graph is the set of elements reachable from some targets, with links and keys.
type Graph struct {
	Project  *Project
	Lock     *Lock
	Elements map[string]*Element
	Targets  []*Element
	Order    []*Element // every loaded element, dependencies before dependants

	parseCache *ParseCache // where keys computed are remembered (nil for none)
	nonStrict  bool        // keys were resolved for a non-strict session (ResolveNonStrict)
	keyContext string      // keyContext(Project)
	// contexts are the projects loaded, by junction path ("" for Project; see
	// junction.go); made one by one between rounds of parallel loading, read only in them.
	contexts map[string]*projectContext
	// junctionTargets: a target may be a junction (LoadWithJunctions); with
	// junctionProjects, the project each one holds is loaded too (LoadShowingJunctions).
	junctionTargets, junctionProjects bool
	// inRound is true while a round of elements loads in parallel: a JUNCTION:PATH
	// include whose project is not loaded yet then waits for the round's end
	// (errNeedProject). Set only between rounds.
	inRound bool
	// makingAt and steps are the projects being loaded (by junction path, the index of
	// the step that needs it) and what needs each, for an include cycle
	// (include_junction.go); chain, the projects loading with this one (loadProjectIn).
	makingAt map[string]int
	steps    []string
	chain    []chainLink
}

// setTop makes g's top project's context, its element directory dir.
func (g *Graph) setTop(dir elementDir) {
	top := &projectContext{project: g.Project, lock: g.Lock, dir: dir}
	g.contexts = map[string]*projectContext{"": top}
	top.dir.origin = g.includeOrigin(top)
}

// LoadCached reads the targets and everything they depend on, checks the graph for
// missing elements and cycles, and computes cache keys. Files are parsed in parallel.
// With a parse cache (nil for none), element files it remembers unchanged are not
// read again; the caller saves pc afterwards.
func LoadCached(p *Project, lock *Lock, targets []string, pc *ParseCache) (*Graph, error) {
	return loadInto(&Graph{Project: p, Lock: lock, parseCache: pc}, targets)
}

// LoadWithJunctions is LoadCached where a target may be a junction, for the commands
// that work on a junction's own sources (track, fetch): it is loaded as an element of
// the project naming it, with its sources and no dependencies, and the project it holds
// is not loaded for it (a junction without a ref can be tracked).
func LoadWithJunctions(p *Project, lock *Lock, targets []string, pc *ParseCache) (*Graph, error) {
	return loadInto(&Graph{Project: p, Lock: lock, parseCache: pc, junctionTargets: true}, targets)
}

// LoadShowingJunctions is LoadWithJunctions that also loads the project each junction
// target with a ref holds (staging a tar or git junction's), for show (Graph.Holds).
func LoadShowingJunctions(p *Project, lock *Lock, targets []string, pc *ParseCache) (*Graph, error) {
	return loadInto(&Graph{Project: p, Lock: lock, parseCache: pc, junctionTargets: true, junctionProjects: true}, targets)
}

// loadInto loads targets into g, which has its project, lock, parse cache and settings.
func loadInto(g *Graph, targets []string) (*Graph, error) {
	p, pc := g.Project, g.parseCache
	if len(targets) == 0 {
		return nil, &ProjectError{Msg: "no elements given and project.toml has no default-targets",
			Hint: "name the elements to work on (e.g. `gantry show app.toml`) or add default-targets = [\"app.toml\"] to project.toml"}
	}
	dir, err := openElementDir(p, "")
	if err != nil {
		return nil, err
	}
	size := pc.size() // the files the last load saw: about as many elements as this one
	g.Elements, g.keyContext = make(map[string]*Element, size), keyContext(p)
	g.setTop(dir)
	defer g.closeContexts()
	// Every name queued, with the first element that named it (nil for a target), for errors.
	referrer := make(map[string]*Element, size)
	frontier := make([]string, 0, len(targets))
	canon := make([]string, 0, len(targets)) // targets by their graph names (canonical)
	for _, t := range targets {
		if err := checkElementName(t); err != nil {
			return nil, &ProjectError{Msg: err.Error()}
		}
		if t, err = g.canonical(t, nil); err != nil {
			return nil, err
		}
		canon = append(canon, t)
		if _, ok := referrer[t]; !ok {
			referrer[t] = nil
			frontier = append(frontier, t)
		}
	}
	var all []*Element // in the order loaded
	for len(frontier) > 0 {
		// The projects of this round's names first (junctions load one by one), then
		// the files in parallel.
		contexts := make([]*projectContext, len(frontier))
		for i, name := range frontier {
			if contexts[i], err = g.contextOf(name, referrer[name]); err != nil {
				return nil, err
			}
		}
		loaded := make([]*Element, len(frontier))
		errs := make([]error, len(frontier))
		g.inRound = true
		eachParallel(len(frontier), 2*runtime.GOMAXPROCS(0), func(i int) {
			loaded[i], errs[i] = g.loadOne(contexts[i], frontier[i], referrer[frontier[i]])
		})
		g.inRound = false
		for i, err := range errs { // includes through junctions not loaded yet: load them now
			if errors.Is(err, errNeedProject) {
				loaded[i], errs[i] = g.loadOne(contexts[i], frontier[i], referrer[frontier[i]])
			}
		}
		// Report the first failure in a deterministic order.
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
		var next []string
		for _, e := range loaded {
			g.Elements[e.Name] = e
			for _, list := range [...][]string{e.Depends, e.BuildDepends, e.RuntimeDepends} {
				for _, d := range list {
					name := g.resolve(e, d)
					if strings.Contains(name, ":") { // through junctions: their overrides apply
						if name, err = g.canonical(name, e); err != nil {
							return nil, err
						}
					}
					if name != e.qualify(d) {
						e.overridden(d, name)
					}
					d = name
					if _, ok := referrer[d]; !ok {
						referrer[d] = e
						next = append(next, d)
					}
				}
			}
		}
		all = append(all, loaded...)
		frontier = next
	}
	for _, t := range canon {
		g.Targets = append(g.Targets, g.Elements[t])
	}
	g.link(all)
	if err := g.order(all); err != nil {
		return nil, err
	}
	if err := g.checkSelections(); err != nil {
		return nil, err
	}
	g.computeKeys()
	if g.junctionProjects {
		for _, t := range g.Targets {
			if t.IsJunction() && !t.NoRef {
				if _, err := g.context(t.Name+":", t.Name, nil); err != nil {
					return nil, err
				}
			}
		}
	}
	return g, nil
}

// loadOne loads one element of the project c (ref named it, for errors) and the keys
// of its sources.
func (g *Graph) loadOne(c *projectContext, name string, ref *Element) (*Element, error) {
	local := name[len(c.path):]
	e, err := loadElement(c.project, c.dir, c.lock, local, g.parseCache)
	if errors.Is(err, errNoFile) {
		return nil, g.missing(c, name, ref)
	}
	if err != nil {
		return nil, err
	}
	if e.Kind.Name == junctionKind && (ref != nil || !g.junctionTargets) {
		return nil, g.dependsOnJunction(e, name, ref)
	}
	e.Name, e.local, e.project = name, local, c.project
	if e.Kind.Name == junctionKind {
		if err := checkJunctionSources(e); err != nil {
			return nil, err
		}
	}
	// Resolved now, unless its key memo says it would resolve without error: then only
	// if asked for (resolvedConfig).
	e.unresolved = e.keyMemo != nil && e.keyMemo.Context == g.keyContextOf(e)
	if !e.unresolved {
		vars := e.Variables(e.project, keyPaths())
		if err := e.checkVariables(vars); err != nil {
			return nil, err
		}
		if e.resolved, err = e.resolve(g.Project, vars); err != nil {
			return nil, err
		}
		if _, err := e.OverlapWhitelist(e.project); err != nil {
			return nil, err
		}
	}
	if e.keyMemo == nil { // else encoded only if the key must be computed (ComputeKey)
		e.encodeConfig(g)
	}
	if err := g.keySources(e); err != nil {
		return nil, err
	}
	e.doc = nil // positions for later errors are read again: a document is large
	return e, nil
}

// keySources computes the unique key of each of e's sources that has a ref, and
// whether one lacks a ref (NoRef).
func (g *Graph) keySources(e *Element) error {
	if dir, ok := e.project.Workspaces[e.local]; ok {
		return g.keyWorkspace(e, dir)
	}
	e.sourceKeys = make([]string, len(e.Sources))
	e.NoRef = false
	for i := range e.Sources {
		s := &e.Sources[i]
		if s.NeedsRef() && s.Ref == "" {
			e.NoRef = true
			continue
		}
		k, err := s.UniqueKey(e.project.Root)
		if err != nil {
			return &ProjectError{File: e.File, Line: e.document().lineOf(fmt.Sprintf("sources[%d]", i)), Msg: fmt.Sprintf("source %d (%s): %v", i+1, s.Describe(), err)}
		}
		e.sourceKeys[i] = k
	}
	return nil
}

// SetRefs gives e's sources the refs tracking found (by source index; "" keeps the ref
// it has; pinned refs are never replaced) and recomputes their keys. e's cache key and
// those of its dependants are stale afterwards: recompute them with ComputeKey, in
// dependency order.
func (g *Graph) SetRefs(e *Element, refs []string) error {
	for i := range e.Sources {
		if s := &e.Sources[i]; i < len(refs) && refs[i] != "" && !s.Pinned {
			s.Ref = refs[i]
		}
	}
	err := g.keySources(e)
	if err != nil {
		e.NoRef = true // no key from a source that cannot be keyed
	}
	return err
}

func (g *Graph) missing(c *projectContext, name string, ref *Element) error {
	display := filepath.ToSlash(filepath.Join(c.dir.show, c.project.ElementPath, name[len(c.path):]))
	all, _ := c.project.ElementNames()
	for i := range all {
		all[i] = c.path + all[i]
	}
	if ref == nil {
		return &ProjectError{Msg: fmt.Sprintf("element %s not found: %s does not exist%s", name, display, didYouMean(name, all))}
	}
	file, line, text := ref.document().locate(dependsKeyOf(ref, name))
	return &ProjectError{File: file, Line: line, Text: text,
		Msg: fmt.Sprintf("depends on %s, which does not exist (no file %s)%s", name, display, didYouMean(name, all))}
}

// dependsKeyOf is the key of e's file that names dep (qualified).
func dependsKeyOf(e *Element, dep string) string {
	dep = e.unqualify(dep)
	switch {
	case slices.Contains(e.BuildDepends, dep):
		return "build-depends"
	case slices.Contains(e.RuntimeDepends, dep):
		return "runtime-depends"
	}
	return "depends"
}

// link sets every element's BuildDeps and RunDeps, elements in parallel (each writes
// its own lists; the map is only read).
func (g *Graph) link(loaded []*Element) {
	eachParallel(len(loaded), runtime.GOMAXPROCS(0), func(i int) {
		e := loaded[i]
		e.BuildDeps = make([]*Element, 0, len(e.Depends)+len(e.BuildDepends))
		e.RunDeps = make([]*Element, 0, len(e.Depends)+len(e.RuntimeDepends))
		dep := func(d string) *Element { return g.Elements[e.DepName(d)] }
		for _, d := range e.Depends {
			de := dep(d)
			e.BuildDeps = append(e.BuildDeps, de)
			e.RunDeps = append(e.RunDeps, de)
		}
		for _, d := range e.BuildDepends {
			e.BuildDeps = append(e.BuildDeps, dep(d))
		}
		for _, d := range e.RuntimeDepends {
			e.RunDeps = append(e.RunDeps, dep(d))
		}
	})
}

// order sorts the graph (loaded: every element, in the order loaded) depth-first from
// the targets, dependencies first, sets each element's position, and reports a cycle with
// its path. While it walks, an element's position is its index in loaded, which indexes
// its state (a map of 100,000 entries before).
func (g *Graph) order(loaded []*Element) error {
	const (
		unseen = iota
		active
		done
	)
	for i, e := range loaded {
		e.position = i
	}
	state := make([]uint8, len(loaded))
	g.Order = make([]*Element, 0, len(loaded))
	defer func() {
		for i, e := range g.Order {
			e.position = i
		}
	}()
	var stack []*Element
	var visit func(e *Element) error
	visit = func(e *Element) error {
		switch state[e.position] {
		case done:
			return nil
		case active:
			i := slices.Index(stack, e)
			names := make([]string, 0, len(stack)-i+1)
			for _, s := range stack[i:] {
				names = append(names, s.Name)
			}
			names = append(names, e.Name)
			from := stack[len(stack)-1]
			file, line, text := from.document().locate(dependsKeyOf(from, e.Name))
			return &ProjectError{File: file, Line: line, Text: text,
				Msg: "dependency cycle: " + strings.Join(names, " -> "), Hint: g.overridesIn(append(stack[i:], e))}
		}
		state[e.position] = active
		stack = append(stack, e)
		for _, d := range e.BuildDeps {
			if err := visit(d); err != nil {
				return err
			}
		}
		for _, d := range e.RunDeps {
			if err := visit(d); err != nil {
				return err
			}
		}
		stack = stack[:len(stack)-1]
		state[e.position] = done
		g.Order = append(g.Order, e)
		return nil
	}
	for _, t := range g.Targets {
		if err := visit(t); err != nil {
			return err
		}
	}
	return nil
}

// Select returns the elements a command with --deps works on, dependencies first.
func (g *Graph) Select(targets []*Element, deps Deps) []*Element {
	if deps == DepsAll && slices.Equal(targets, g.Targets) {
		// All of what the graph's targets depend on is what was loaded for them, and
		// Order has it, dependencies first (a map of 100,000 entries for show otherwise).
		return slices.Clone(g.Order)
	}
	want := map[*Element]bool{}
	var addRun func(e *Element)
	addRun = func(e *Element) {
		if want[e] {
			return
		}
		want[e] = true
		for _, d := range e.RunDeps {
			addRun(d)
		}
	}
	var addAll func(e *Element)
	addAll = func(e *Element) {
		if want[e] {
			return
		}
		want[e] = true
		for _, d := range e.BuildDeps {
			addAll(d)
		}
		for _, d := range e.RunDeps {
			addAll(d)
		}
	}
	for _, t := range targets {
		switch deps {
		case DepsNone:
			want[t] = true
		case DepsRun:
			addRun(t)
		case DepsBuild:
			for _, d := range t.BuildDeps {
				addRun(d)
			}
		default:
			addAll(t)
		}
	}
	out := make([]*Element, 0, len(want))
	for e := range want {
		out = append(out, e)
	}
	// Sorting the selection by graph position costs O(k log k), not a walk of the whole
	// graph: StageDeps calls this once per element built.
	slices.SortFunc(out, func(a, b *Element) int { return a.position - b.position })
	return out
}

// eachParallel calls fn(i) for every i in [0, n) on up to workers goroutines, which
// take indexes in turn (a goroutine per index would grow a fresh stack for each: a
// visible cost when loading 100,000 elements). It returns when every call has.
func eachParallel(n, workers int, fn func(i int)) {
	if n < 64 || workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		})
	}
	wg.Wait()
}
