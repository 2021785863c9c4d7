package element

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Includes through junctions (JUNCTION:PATH, docs/includes.md): the junction path is
// resolved from the project of the including file as a dependency name's is (its
// junctions' overrides apply), and the file read from the project it holds.

// errNeedProject is what resolving a JUNCTION:PATH include says during a round of
// parallel loading when the junction's project is not loaded yet: the element is
// loaded again after the round, when projects can be loaded (LoadCached).
var errNeedProject = errors.New("the project a junction holds is not loaded yet")

// includeOrigin is where the files of c's project read their includes from: its root,
// and through its junctions.
func (g *Graph) includeOrigin(c *projectContext) includeOrigin {
	return includeOrigin{
		src: includeSource{root: c.project.Root, show: c.dir.show, name: c.project.Name},
		resolve: func(via, step string) (*includeSource, error) {
			t, err := g.includeContext(c, via, step)
			if err != nil {
				return nil, err
			}
			return &includeSource{via: via, root: t.project.Root, show: t.dir.show, name: t.project.Name}, nil
		},
	}
}

// includeContext is the project that the junction path via ("base.toml:"), written in
// the project of c, holds: walked as canonical walks a name. During a round of
// parallel loading (g.inRound) a project not loaded yet is errNeedProject; else it is
// loaded, and a junction that is not one, or that is needed to read itself (step says
// what needs it), is an includeError.
func (g *Graph) includeContext(c *projectContext, via, step string) (*projectContext, error) {
	from, d := resolveIn(c, via+"-") // "-": a placeholder for the file, never a name
	name, err := g.walk(from.path+d, func(path, q string) (*projectContext, error) {
		if pc, ok := g.contexts[path]; ok {
			return pc, nil
		}
		if g.inRound {
			return nil, errNeedProject
		}
		if i, ok := g.makingAt[path]; ok {
			cycle := append(slices.Clone(g.steps[i:]), step, "junction "+path[:len(path)-1])
			return nil, &includeError{msg: "include cycle: " + strings.Join(cycle, " -> "),
				hint: "a junction's own file cannot include through the junction"}
		}
		defer g.making("", step)()
		done := g.making(path, "junction "+path[:len(path)-1])
		err := g.checkIncludeJunction(path)
		done() // context marks it again
		if err != nil {
			return nil, err
		}
		return g.context(path, q, nil)
	})
	if err != nil {
		return nil, err
	}
	return g.contexts[junctionPath(name)], nil
}

// making notes that the project of junction path is being loaded (path "": nothing
// is), step being what loads it (for a cycle); the function returned says it is done.
func (g *Graph) making(path, step string) func() {
	if g.makingAt == nil {
		g.makingAt = map[string]int{}
	}
	n := len(g.steps)
	g.steps = append(g.steps, step)
	prev, had := g.makingAt[path]
	if path != "" {
		g.makingAt[path] = n
	}
	return func() {
		g.steps = g.steps[:n]
		if path == "" {
			return
		}
		if had {
			g.makingAt[path] = prev
		} else {
			delete(g.makingAt, path)
		}
	}
}

// checkIncludeJunction checks that the last junction of path, a junction path an
// include names, is an element of kind junction of the project holding it.
func (g *Graph) checkIncludeJunction(path string) error {
	inner := path[:len(path)-1]
	parent := g.contexts[junctionPath(inner)]
	name := inner[len(parent.path):]
	kind, err := elementKind(parent.project, parent.dir, name)
	if errors.Is(err, errNoFile) {
		return &includeError{msg: fmt.Sprintf("project %s has no junction %s%s", parent.project.Name, name, didYouMean(name, junctionsNear(parent, name))),
			hint: `in JUNCTION:PATH, JUNCTION is an element of kind "junction"`}
	}
	if err != nil {
		return err
	}
	if kind != junctionKind {
		return &includeError{msg: fmt.Sprintf("%s is not a junction (kind %q)", name, kind),
			hint: `in JUNCTION:PATH, JUNCTION is an element of kind "junction"`}
	}
	return nil
}

// junctionsNear are the junctions of c's project whose names are near name, for a
// did-you-mean (only those are read).
func junctionsNear(c *projectContext, name string) []string {
	names, _ := c.project.ElementNames()
	var out []string
	for _, n := range names {
		if levenshtein(name, n) >= len(name)/2+2 {
			continue
		}
		if kind, err := elementKind(c.project, c.dir, n); err == nil && kind == junctionKind {
			out = append(out, n)
		}
	}
	return out
}

// chainLink is a project whose project.toml reads a file through a junction, while it
// loads: step says which ("project.toml includes base.toml:flags.toml").
type chainLink struct{ project, step string }

// includeCycle is the error for project name, loading with junction includes while
// chain (outermost first) loads it already.
func includeCycle(chain []chainLink, name string) error {
	i := slices.IndexFunc(chain, func(l chainLink) bool { return l.project == name })
	if i < 0 {
		return nil
	}
	var links []string
	for _, l := range chain[i:] {
		links = append(links, fmt.Sprintf("project %s (%s)", l.project, l.step))
	}
	return &ProjectError{Msg: fmt.Sprintf("include cycle through junctions: %s -> project %s again", strings.Join(links, " -> "), name),
		Hint: "a project.toml cannot include, through junctions, from a project that needs it to load"}
}

// chainOut is the chain a project loaded by g loads in: g's, and g's project if an
// include through a junction is what loads it.
func (g *Graph) chainOut() []chainLink {
	if len(g.steps) == 0 {
		return g.chain
	}
	return append(slices.Clone(g.chain), chainLink{g.Project.Name, g.steps[0]})
}
