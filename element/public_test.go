package element

import (
	"reflect"
	"testing"
)

var publicFiles = map[string]string{
	"project.toml": "name = \"demo\"\n[split-rules]\nextra = [\"%{datadir}/extra/**\"]\n",
	"elements/lib.toml": `kind = "manual"
[variables]
prefix = "/opt"
[public]
integration-commands = ["ldconfig -r %{sysroot} %{libdir}"]
[public.split-rules]
devel = { append = ["%{libdir}/*.o"] }
plugins = ["%{libdir}/plugins/**"]
`,
	"elements/app.toml": "kind = \"manual\"\ndepends = [\"lib.toml\"]\n",
	"elements/image.toml": `kind = "compose"
build-depends = ["app.toml"]
[config]
include = ["runtime", "plugins"]
exclude = ["devel"]
integrate = true
include-orphans = true
`,
	"elements/docs.toml": "kind = \"filter\"\nbuild-depends = [\"lib.toml\"]\n[config]\ninclude = [\"doc\"]\n",
}

// [public] is read and expanded in the element's own context: integration commands
// with its variables and the build's paths, split rules as the defaults, then the
// project's [split-rules], then the element's (a list replaces a domain's rules,
// { append } extends them).
func TestPublicIsExpandedInTheElementsContext(t *testing.T) {
	g := mustGraph(t, writeProject(t, publicFiles), "image.toml", "docs.toml")
	lib := g.Elements["lib.toml"]
	cmds, err := lib.IntegrationCommands(g.Project, Paths{Sysroot: "/host/sysroot"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ldconfig -r /host/sysroot /opt/lib"}; !reflect.DeepEqual(cmds, want) {
		t.Errorf("integration commands = %q, want %q", cmds, want)
	}
	rules, err := lib.SplitRules(g.Project, keyPaths())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"devel":   {"/opt/include", "/opt/include/**", "/opt/lib/lib*.a", "/opt/lib/lib*.la", "/opt/lib/pkgconfig/*.pc", "/opt/share/pkgconfig/*.pc", "/opt/share/aclocal/*.m4", "/opt/lib/*.o"},
		"plugins": {"/opt/lib/plugins/**"},
		"extra":   {"/opt/share/extra/**"},
		"runtime": {"/opt/bin/*", "/opt/sbin/*", "/opt/libexec/*", "/opt/lib/lib*.so*"},
	}
	for d, w := range want {
		if !reflect.DeepEqual(rules[d], w) {
			t.Errorf("domain %s = %q, want %q", d, rules[d], w)
		}
	}
	if got := sortedKeys(rules); !reflect.DeepEqual(got, []string{"debug", "devel", "doc", "extra", "locale", "plugins", "runtime"}) {
		t.Errorf("domains = %q", got)
	}
	image := g.Elements["image.toml"].resolved
	if image.Integrate != nil || image.Orphans != nil || !image.Integrates() || !image.IncludeOrphans("compose") {
		t.Errorf("compose defaults written out are kept as unset: integrate %v, include-orphans %v", image.Integrate, image.Orphans)
	}
	if docs := g.Elements["docs.toml"].resolved; docs.IncludeOrphans("filter") {
		t.Error("a filter keeps orphans by default")
	}
}

// An element's integration commands and the split rules it (or its project) declares
// are in its own key, and so in its dependants'; an element with no public data keeps
// the key it had before public data existed (TestKeyEncodingIsPinned holds those).
func TestPublicDataEntersKeys(t *testing.T) {
	keysOf := func(t *testing.T, files map[string]string) map[string]string {
		out := map[string]string{}
		for name, e := range mustGraph(t, writeProject(t, files), "image.toml").Elements {
			out[name] = e.Key
		}
		return out
	}
	base := keysOf(t, publicFiles)
	lib := publicFiles["elements/lib.toml"]
	cases := []struct {
		name              string
		files             map[string]string
		changed, constant []string
	}{
		{"integration command", with(publicFiles, "elements/lib.toml", replace(lib, "ldconfig -r", "ldconfig -v -r")), []string{"lib.toml", "app.toml"}, nil},
		{"element split rule", with(publicFiles, "elements/lib.toml", replace(lib, "plugins/**", "plugins/*.so")), []string{"lib.toml", "app.toml"}, nil},
		{"project split rule", with(publicFiles, "project.toml", replace(publicFiles["project.toml"], "extra/**", "extra/*")), []string{"lib.toml", "app.toml"}, nil},
		{"compose selection", with(publicFiles, "elements/image.toml", replace(publicFiles["elements/image.toml"], `exclude = ["devel"]`, `exclude = ["doc"]`)), []string{"image.toml"}, []string{"lib.toml", "app.toml"}},
		{"compose default written out", with(publicFiles, "elements/image.toml", replace(publicFiles["elements/image.toml"], "integrate = true\n", "")), nil, []string{"image.toml"}},
		{"compose integrate off", with(publicFiles, "elements/image.toml", replace(publicFiles["elements/image.toml"], "integrate = true", "integrate = false")), []string{"image.toml"}, []string{"app.toml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, want := keysOf(t, tc.files), map[string]bool{} // name -> must change
			for _, n := range tc.changed {
				want[n] = true
			}
			for _, n := range tc.constant {
				want[n] = false
			}
			for n, change := range want {
				if changed := got[n] != base[n]; changed != change {
					t.Errorf("%s: key changed %v, want %v", n, changed, change)
				}
			}
		})
	}
}

// Every refusal of public data, filter and compose selections names the file, the line
// and what to do.
func TestPublicErrors(t *testing.T) {
	cases := []struct {
		name, path, content, want string
	}{
		{"unknown public key", "elements/lib.toml", "kind = \"manual\"\n[public]\nintegration-command = [\"x\"]\n",
			"elements/lib.toml:3: unknown key \"integration-command\" in [public] (did you mean \"integration-commands\"?)\n    integration-command = [\"x\"]\nknown keys: integration-commands, split-rules, overlap-whitelist"},
		{"bad domain", "elements/lib.toml", "kind = \"manual\"\n[public.split-rules]\n\"Dev/el\" = [\"x\"]\n",
			"elements/lib.toml:3: key \"public.split-rules.Dev/el\": \"Dev/el\" is not a split domain name: use lowercase letters, digits, '_' and '-'\n    \"Dev/el\" = [\"x\"]"},
		{"rules not a list", "elements/lib.toml", "kind = \"manual\"\n[public.split-rules]\ndevel = \"x\"\n",
			"elements/lib.toml:3: key \"public.split-rules.devel\": expected a list of globs or { prepend = [...], append = [...] }, found a string\n    devel = \"x\""},
		{"bad glob", "elements/lib.toml", "kind = \"manual\"\n[public.split-rules]\ndevel = { append = [\"/usr/[ab\"] }\n",
			"elements/lib.toml:3: key \"public.split-rules.devel\": split rule \"/usr/[ab\": '[' without ']'\n    devel = { append = [\"/usr/[ab\"] }"},
		{"compose path glob", "elements/image.toml", "kind = \"compose\"\nbuild-depends = [\"app.toml\"]\n[config]\ninclude = [\"usr/bin/**\"]\n",
			"elements/image.toml:4: key \"config.include\": \"usr/bin/**\" is not a split domain: compose include and exclude name split domains (runtime, devel, debug, doc, locale, or one of [split-rules] in project.toml), not paths; to select paths, declare a domain for them in [public.split-rules] of the elements that install them\n    include = [\"usr/bin/**\"]"},
		{"unknown domain", "elements/image.toml", "kind = \"compose\"\nbuild-depends = [\"app.toml\"]\n[config]\nexclude = [\"plugin\"]\n",
			"elements/image.toml:4: in config.exclude: no split domain \"plugin\" (did you mean \"plugins\"?); domains: debug, devel, doc, extra, locale, plugins, runtime\n    exclude = [\"plugin\"]\ndeclare it in [split-rules] of project.toml or [public.split-rules] of the elements it stages"},
		{"filter two deps", "elements/docs.toml", "kind = \"filter\"\nbuild-depends = [\"lib.toml\", \"app.toml\"]\n",
			"elements/docs.toml:2: key \"build-depends\": a filter element needs exactly one build dependency (the element it filters), it has 2: lib.toml, app.toml\n    build-depends = [\"lib.toml\", \"app.toml\"]"},
		{"filter none", "elements/docs.toml", "kind = \"filter\"\n",
			"elements/docs.toml:1: key \"kind\": a filter element needs exactly one build dependency (the element it filters), it has 0\n    kind = \"filter\""},
		{"filter depends", "elements/docs.toml", "kind = \"filter\"\ndepends = [\"lib.toml\"]\n",
			"elements/docs.toml:2: key \"depends\": a filter element's build dependency must not also be a runtime dependency: move lib.toml to build-depends (runtime dependencies of the filter go in runtime-depends)\n    depends = [\"lib.toml\"]"},
		{"filter sources", "elements/docs.toml", "kind = \"filter\"\nbuild-depends = [\"lib.toml\"]\n[[sources]]\nkind = \"local\"\npath = \"x\"\n",
			"elements/docs.toml:3: key \"sources[0]\": a filter element takes no sources: it selects files of its build dependency\n    [[sources]]"},
		{"filter integrate", "elements/docs.toml", "kind = \"filter\"\nbuild-depends = [\"lib.toml\"]\n[config]\nintegrate = true\n",
			"elements/docs.toml:4: unknown key \"integrate\" in [config]\n    integrate = true\nknown keys: include, exclude, include-orphans"},
		{"project domain", "project.toml", "name = \"demo\"\n[split-rules]\n\"a b\" = []\n",
			"project.toml:3: key \"split-rules.a b\": \"a b\" is not a split domain name: use lowercase letters, digits, '_' and '-'\n    \"a b\" = []"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadGraph(t, writeProject(t, with(publicFiles, tc.path, tc.content)), "image.toml", "docs.toml")
			if err == nil || err.Error() != tc.want {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// explain names the public data that changed an element's key.
func TestExplainNamesPublicData(t *testing.T) {
	in := func(p *ResolvedPublic) *Inputs { return &Inputs{Kind: "import", Config: &Resolved{Public: p}} }
	cases := []struct {
		old, cur *ResolvedPublic
		want     string
	}{
		{nil, &ResolvedPublic{Integration: []string{"ldconfig"}}, `public data integration-commands changed: "" → "ldconfig"`},
		{&ResolvedPublic{Integration: []string{"a", "b"}}, &ResolvedPublic{Integration: []string{"a", "c"}}, `public data integration-commands changed: "b" → "c"`},
		{&ResolvedPublic{Splits: map[string][]string{"devel": {"/x"}}}, &ResolvedPublic{Splits: map[string][]string{"devel": {"/x", "/y"}}}, `public data split-rules.devel changed: "/x" → "/x /y"`},
	}
	for _, tc := range cases {
		c := ownChange(in(tc.old), in(tc.cur))
		if c == nil || c.String() != tc.want {
			t.Errorf("got %v, want %s", c, tc.want)
		}
	}
}
