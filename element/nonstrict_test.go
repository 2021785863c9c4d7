package element

import (
	"strings"
	"testing"
)

// fakeArtifacts is a NonStrictCache: the successful artifacts of elements by name, by
// key and by weak key.
type fakeArtifacts struct {
	keys map[string]bool   // name + "@" + key
	weak map[string]string // name + "@" + weak key -> key
}

func (f *fakeArtifacts) built(g *Graph) {
	for _, e := range g.Order {
		f.keys[e.Name+"@"+e.Key] = true
		f.weak[e.Name+"@"+e.WeakKey] = e.Key
	}
}

func (f *fakeArtifacts) Succeeded(e *Element, key string) bool { return f.keys[e.Name+"@"+key] }

func (f *fakeArtifacts) ByWeakKey(e *Element) (string, bool) {
	k, ok := f.weak[e.Name+"@"+e.WeakKey]
	return k, ok
}

var nonStrictFiles = map[string]string{
	"project.toml":        "name = \"ns\"\n",
	"elements/base.toml":  "kind = \"import\"\n[[sources]]\nkind = \"local\"\npath = \"files/base\"\n",
	"elements/lib.toml":   "kind = \"manual\"\ndepends = [\"base.toml\"]\n[config]\nbuild-commands = [\"true\"]\n",
	"elements/app.toml":   "kind = \"manual\"\ndepends = [\"lib.toml\"]\n[config]\nbuild-commands = [\"true\"]\n",
	"elements/comp.toml":  "kind = \"compose\"\nbuild-depends = [\"app.toml\"]\n",
	"elements/all.toml":   "kind = \"stack\"\ndepends = [\"comp.toml\", \"app.toml\"]\n",
	"files/base/data.txt": "1\n",
}

// After a base element changed, a non-strict session reuses what it changed below by
// the weak keys of their last builds (lib.toml, app.toml), builds the element whose own
// input changed (base.toml) and a compose, which rebuilds when what it stages would
// (a strict rebuild), under a key of its own; the stack above them is reused (its weak
// key has names only). Nothing changed: nothing is reused, every key is strict.
func TestResolveNonStrict(t *testing.T) {
	dir := writeProject(t, nonStrictFiles)
	old := mustGraph(t, dir, "all.toml")
	cache := &fakeArtifacts{keys: map[string]bool{}, weak: map[string]string{}}
	cache.built(old)

	same := mustGraph(t, dir, "all.toml")
	same.ResolveNonStrict(cache)
	for _, e := range same.Order {
		if e.Reused || e.Key != e.StrictKey || e.Key != old.Elements[e.Name].Key {
			t.Errorf("nothing changed: %s reused %v, key %s, strict key %s, built %s", e.Name, e.Reused, e.Key, e.StrictKey, old.Elements[e.Name].Key)
		}
	}

	dir2 := writeProject(t, with(nonStrictFiles, "files/base/data.txt", "2\n"))
	g := mustGraph(t, dir2, "all.toml")
	strict := map[string]string{}
	for _, e := range g.Order {
		strict[e.Name] = e.Key
	}
	g.ResolveNonStrict(cache)
	g.ResolveNonStrict(cache) // again: the same keys
	for _, tc := range []struct {
		name   string
		reused bool
		key    string // "old", "strict" or "own"
	}{
		{"base.toml", false, "strict"},
		{"lib.toml", true, "old"},
		{"app.toml", true, "old"},
		{"comp.toml", false, "own"},
		{"all.toml", true, "old"}, // a stack: its weak key has only names
	} {
		e := g.Elements[tc.name]
		if e.StrictKey != strict[tc.name] {
			t.Errorf("%s: strict key %s, want the strict load's %s", tc.name, e.StrictKey, strict[tc.name])
		}
		want := map[string]string{"old": old.Elements[tc.name].Key, "strict": strict[tc.name]}[tc.key]
		switch {
		case e.Reused != tc.reused:
			t.Errorf("%s: reused %v, want %v", tc.name, e.Reused, tc.reused)
		case tc.key == "own" && (e.Key == strict[tc.name] || e.Key == old.Elements[tc.name].Key):
			t.Errorf("%s: key %s is its strict or its old key: want one of its own", tc.name, e.Key)
		case tc.key != "own" && e.Key != want:
			t.Errorf("%s: key %s, want its %s key %s", tc.name, e.Key, tc.key, want)
		}
	}
	recorded := map[string]string{"base.toml": old.Elements["base.toml"].Key, "lib.toml": old.Elements["lib.toml"].Key}
	x := g.ExplainReuse(g.Elements["app.toml"], recorded)
	if want := "app.toml: reused in non-strict mode although dependency base.toml changed (built against " + old.Elements["base.toml"].Key[:8] +
		", now " + g.Elements["base.toml"].Key[:8] + "; a strict build builds it again)"; x.Text != want || x.Reason != "reused-non-strict" {
		t.Errorf("ExplainReuse = %q (%s)\nwant %q", x.Text, x.Reason, want)
	}
	if x := g.ExplainReuse(g.Elements["app.toml"], map[string]string{}); !strings.Contains(x.Text, "although dependency lib.toml changed (built against no artifact of it, now ") {
		t.Errorf("ExplainReuse with a dependency not recorded = %q", x.Text)
	}
	if x, want := g.ExplainReuse(g.Elements["app.toml"], nil), "app.toml: reused in non-strict mode: its weak key matched (a strict build builds it again)"; x.Text != want {
		t.Errorf("ExplainReuse without a record = %q, want %q", x.Text, want)
	}
	// Tracking keys elements again in a non-strict session: StrictKey stays.
	lib := g.Elements["lib.toml"]
	g.ComputeKey(lib)
	if lib.StrictKey != strict["lib.toml"] {
		t.Errorf("ComputeKey in a non-strict session changed StrictKey")
	}

}
