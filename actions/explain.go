package actions

import (
	"encoding/json"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
)

// Explain explains, in dependency order, each of elements that is not cached at its
// current key (gantry explain, gantry build --explain): the comparison is with the most
// recent artifact of the same element in c; and each that a non-strict session reuses.
func Explain(g *element.Graph, c *cache.Cache, elements []*element.Element) []element.Explanation {
	h := &artifactHistory{c: c, g: g}
	var out []element.Explanation
	for _, e := range elements {
		x := element.Explanation{Element: e.Name, Key: e.Key}
		if e.Key == "" {
			x.Reason, x.Text = "no-ref", e.Name+": a source (here or below) has no ref: run 'gantry track'"
			out = append(out, x)
			continue
		}
		project, name := e.ArtifactName(g.Project.Name)
		a, err := c.Lookup(project, name, e.Key)
		switch {
		case err == nil && a.Success && e.Reused:
			x = reuseExplanation(g, e, a)
		case err == nil && a.Success:
			continue
		case err == nil:
			where := ""
			if a.BuiltOn != "" {
				where = " on " + a.BuiltOn
			}
			x.Reason, x.Text = "failed", e.Name+": its build at this key failed"+where+" and is cached: 'gantry build --retry-failed' builds it again"
		default:
			x = g.Explain(e, h)
		}
		out = append(out, x)
	}
	return out
}

// artifactHistory answers explain's questions from the local cache, about the
// artifacts of g's elements, each under its own project and name (Element.ArtifactName).
type artifactHistory struct {
	c      *cache.Cache
	g      *element.Graph
	latest map[string]map[string]*cache.Artifact // project -> element -> its most recent artifact that recorded its inputs
}

// names are the project and element names of the element g names name.
func (h *artifactHistory) names(name string) (string, string) {
	if e := h.g.Elements[name]; e != nil {
		return e.ArtifactName(h.g.Project.Name)
	}
	return h.g.Project.Name, name
}

func (h *artifactHistory) Latest(name string) (string, *element.Inputs, bool) {
	project, name := h.names(name)
	if h.latest == nil {
		h.latest = map[string]map[string]*cache.Artifact{}
	}
	if h.latest[project] == nil {
		latest := map[string]*cache.Artifact{}
		arts, _ := h.c.List(project) // unreadable refs: `cache verify` reports them
		for _, a := range arts {
			if a.Inputs == nil {
				continue
			}
			if b := latest[a.Element]; b == nil || a.Finished.After(b.Finished) {
				latest[a.Element] = a
			}
		}
		h.latest[project] = latest
	}
	a := h.latest[project][name]
	if a == nil {
		return "", nil, false
	}
	in, ok := decodeInputs(a)
	return a.Key, in, ok
}

func (h *artifactHistory) At(name, key string) (*element.Inputs, bool) {
	project, name := h.names(name)
	a, err := h.c.Lookup(project, name, key)
	if err != nil {
		return nil, false
	}
	return decodeInputs(a)
}

func decodeInputs(a *cache.Artifact) (*element.Inputs, bool) {
	var in element.Inputs
	if a.Inputs == nil || json.Unmarshal(a.Inputs, &in) != nil {
		return nil, false
	}
	return &in, true
}
