package element

import (
	"strings"
	"testing"
)

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
		if got := joinElementNames(g.StageDeps(app)); got != want {
			t.Errorf("targets %v: StageDeps(app) = %s, want %s", targets, got, want)
		}
		if got := joinElementNames(g.Staging([]*Element{app}, DepsRun)); got != "a.toml c.toml z.toml app.toml" {
			t.Errorf("targets %v: run scope = %s", targets, got)
		}
		if got := joinElementNames(g.Staging([]*Element{app}, DepsAll)); got != "r.toml b.toml t.toml bt.toml a.toml c.toml z.toml app.toml" {
			t.Errorf("targets %v: all = %s", targets, got)
		}
		if got := joinElementNames(g.Staging([]*Element{app}, DepsNone)); got != "app.toml" {
			t.Errorf("targets %v: none = %s", targets, got)
		}
	}
}

// TestOverlapWhitelist: [public] overlap-whitelist is read with the element's
// variables expanded, also through the parse cache, and is in no key.
func TestOverlapWhitelist(t *testing.T) {
	files := map[string]string{
		"project.toml":    "name = \"p\"\n[variables]\nprefix = \"/opt\"\n",
		"elements/a.toml": "kind = \"stack\"\n",
	}
	dir := writeProject(t, files)
	before := mustGraph(t, dir, "a.toml").Elements["a.toml"].Key
	files["elements/a.toml"] = "kind = \"stack\"\n[public]\noverlap-whitelist = [\"%{libdir}/*.so\", \"/etc/**\"]\n"
	dir = writeProject(t, files)
	cacheDir := t.TempDir()
	for range 2 { // parsed, then from the parse cache
		g, _, err := loadThroughCache(dir, cacheDir, "a.toml")
		if err != nil {
			t.Fatal(err)
		}
		a := g.Elements["a.toml"]
		got, err := a.OverlapWhitelist(g.Project)
		if err != nil || strings.Join(got, " ") != "/opt/lib/*.so /etc/**" {
			t.Fatalf("OverlapWhitelist = %q, %v", got, err)
		}
		if a.Key != before {
			t.Errorf("the whitelist changed the key: %s, was %s", a.Key, before)
		}
	}
}

func TestPublicAndFatalWarningErrors(t *testing.T) {
	for _, c := range []struct{ name, project, app, want string }{
		{name: "an unknown key in [public]",
			app:  "[public]\noverlap-whitelst = []\n",
			want: `elements/app.toml:3: unknown key "overlap-whitelst" in [public] (did you mean "overlap-whitelist"?)`},
		{name: "a whitelist that is not a list",
			app:  "[public]\noverlap-whitelist = \"/x\"\n",
			want: `elements/app.toml:3: key "public.overlap-whitelist": expected a list of strings, found a string`},
		{name: "an undefined variable in a whitelist",
			app:  "[public]\noverlap-whitelist = [\"%{nope}/x\"]\n",
			want: `elements/app.toml:3: in public.overlap-whitelist: undefined variable %{nope}`},
		{name: "an unknown warning",
			project: "fatal-warnings = [\"overlap\"]\n",
			want:    `project.toml:2: key "fatal-warnings": unknown warning "overlap" (did you mean "overlaps"?); warnings: overlaps`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeProject(t, map[string]string{
				"project.toml":      "name = \"p\"\n" + c.project,
				"elements/app.toml": "kind = \"stack\"\n" + c.app,
			})
			_, err := loadGraph(t, dir, "app.toml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %s", err, c.want)
			}
		})
	}
}

// TestOverlapWhitelistWithIncludes: an element that includes files and has kind
// defaults keeps its own [public]; an included file may not set one.
func TestOverlapWhitelistWithIncludes(t *testing.T) {
	dir := writeProject(t, map[string]string{
		"project.toml":      "name = \"p\"\n[kinds.manual.variables]\nx = \"1\"\n",
		"inc.toml":          "[variables]\ny = \"2\"\n",
		"bad.toml":          "[public]\noverlap-whitelist = [\"/x\"]\n",
		"elements/app.toml": "kind = \"manual\"\ninclude = [\"inc.toml\"]\n[public]\noverlap-whitelist = [\"/etc/%{y}\"]\n",
		"elements/bad.toml": "kind = \"manual\"\ninclude = [\"bad.toml\"]\n",
	})
	g := mustGraph(t, dir, "app.toml")
	got, err := g.Elements["app.toml"].OverlapWhitelist(g.Project)
	if err != nil || strings.Join(got, " ") != "/etc/2" {
		t.Errorf("OverlapWhitelist = %q, %v; want /etc/2", got, err)
	}
	const want = `bad.toml:1: unknown key "public"`
	if _, err := loadGraph(t, dir, "bad.toml"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("an include with [public]: %v, want %s", err, want)
	}
}
