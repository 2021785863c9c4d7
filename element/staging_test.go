package element

import (
	"strings"
	"testing"
)

func names(es []*Element) string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return strings.Join(out, " ")
}

// TestStagingOrder: depth-first, dependencies first, siblings by name whatever order
// the file lists them in, runtime dependencies of what is staged but never build-only
// ones; the same whichever targets the graph was loaded for.
func TestStagingOrder(t *testing.T) {
	dir := writeProject(t, map[string]string{
		"project.toml":      "name = \"p\"\n",
		"elements/a.toml":   "kind = \"stack\"\n",
		"elements/b.toml":   "kind = \"stack\"\nruntime-depends = [\"r.toml\"]\n",
		"elements/c.toml":   "kind = \"stack\"\ndepends = [\"a.toml\"]\n",
		"elements/r.toml":   "kind = \"stack\"\n",
		"elements/t.toml":   "kind = \"manual\"\n",
		"elements/z.toml":   "kind = \"stack\"\n",
		"elements/bt.toml":  "kind = \"stack\"\nbuild-depends = [\"t.toml\"]\n",
		"elements/app.toml": "kind = \"manual\"\ndepends = [\"z.toml\", \"c.toml\"]\nbuild-depends = [\"bt.toml\", \"b.toml\"]\n",
		"elements/x.toml":   "kind = \"stack\"\ndepends = [\"z.toml\", \"c.toml\", \"b.toml\", \"a.toml\"]\n",
	})
	const want = "r.toml b.toml bt.toml a.toml c.toml z.toml"
	for _, targets := range [][]string{{"app.toml"}, {"x.toml", "app.toml"}} {
		g := mustGraph(t, dir, targets...)
		app := g.Elements["app.toml"]
		if got := names(g.StageDeps(app)); got != want {
			t.Errorf("targets %v: StageDeps(app) = %s, want %s", targets, got, want)
		}
		if got := names(g.Staging([]*Element{app}, DepsRun)); got != "a.toml c.toml z.toml app.toml" {
			t.Errorf("targets %v: run scope = %s", targets, got)
		}
		if got := names(g.Staging([]*Element{app}, DepsAll)); got != "r.toml b.toml t.toml bt.toml a.toml c.toml z.toml app.toml" {
			t.Errorf("targets %v: all = %s", targets, got)
		}
		if got := names(g.Staging([]*Element{app}, DepsNone)); got != "app.toml" {
			t.Errorf("targets %v: none = %s", targets, got)
		}
	}
}
