package element

import "testing"

// A build whose key differs only by its sandbox is explained by the sandbox.
func TestExplainNamesTheSandbox(t *testing.T) {
	host := &Inputs{Kind: "manual", Config: &Resolved{Env: map[string]string{"A": "1"}}}
	hermetic := &Inputs{Kind: "manual", Sandbox: hermeticSandbox, Config: &Resolved{Env: map[string]string{"A": "1"}}}
	c := ownChange(host, hermetic)
	if c == nil || c.What != "sandbox" {
		t.Fatalf("ownChange = %+v, want a sandbox change", c)
	}
	want := "its sandbox changed: host or auto (not hermetic) → bwrap (hermetic) (a host artifact never satisfies a hermetic build)"
	if got := c.String(); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if c := ownChange(host, host); c != nil {
		t.Errorf("same inputs: %+v", c)
	}
}

// fakeHistory answers explain from records made by hand: element -> key -> inputs.
type fakeHistory struct {
	latest map[string]string // element -> its latest key
	at     map[string]map[string]*Inputs
}

func (h fakeHistory) Latest(element string) (string, *Inputs, bool) {
	key, ok := h.latest[element]
	if !ok {
		return "", nil, false
	}
	in, ok := h.At(element, key)
	return key, in, ok
}

func (h fakeHistory) At(element, key string) (*Inputs, bool) {
	in, ok := h.at[element][key]
	return in, ok
}

// A sub-project element's record names its dependencies as its own project does, so
// explain through the junction follows the one that changed; a record made before
// (OwnNames false: names through the junction of that build) is read as well.
func TestExplainDependenciesByOwnNames(t *testing.T) {
	g := mustGraph(t, writeProject(t, junctionFiles()), "app.toml")
	lib, util := g.Elements["base.toml:lib.toml"], g.Elements["base.toml:util.toml"]
	if got := g.Inputs(lib).Deps; len(got) != 2 || got["util.toml"] != util.Key || !g.Inputs(lib).OwnNames {
		t.Fatalf("lib's recorded dependencies = %v, want by its own project's names", got)
	}
	utilOld := g.hashedInputs(util)
	before := *utilOld.Config // the graph's own: not to be changed
	before.Commands = map[string][]string{"install-commands": {"echo before"}}
	utilOld.Config = &before
	zlib := g.Elements["base.toml:core.toml:zlib.toml"].Key
	for _, c := range []struct {
		name string
		deps map[string]string
		own  bool
	}{
		{"own names", map[string]string{"util.toml": "old", "core.toml:zlib.toml": zlib}, true},
		{"names through the junction, recorded before", map[string]string{"base.toml:util.toml": "old", "base.toml:core.toml:zlib.toml": zlib}, false},
	} {
		libOld := g.hashedInputs(lib)
		libOld.Deps, libOld.OwnNames = c.deps, c.own
		h := fakeHistory{latest: map[string]string{lib.Name: "lib-old"}, at: map[string]map[string]*Inputs{
			lib.Name: {"lib-old": libOld}, util.Name: {"old": utilOld}}}
		x := g.Explain(lib, h)
		if x.Reason != "dependency" || len(x.Chain) != 1 || x.Chain[0] != util.Name || x.Cause == nil || x.Cause.What != "command" {
			t.Errorf("%s: explain = %+v, want dependency %s's command changed", c.name, x, util.Name)
		}
	}
}
