package element

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Public is an element's public data, [public] in its file: what it tells the elements
// that stage it. As written: variables are expanded in the element's own context
// (IntegrationCommands, SplitRules).
type Public struct {
	// Integration are the commands run in a sysroot the element is staged into, after
	// every dependency is staged and before the build's own commands.
	Integration []string
	// Splits are the element's [public.split-rules], by domain: each replaces the
	// domain's rules from the project (a list), or composes with them ({ prepend,
	// append }).
	Splits map[string]SplitRule
	// OverlapWhitelist are globs of the paths (absolute, as in the sysroot) this
	// element's artifact may overwrite when it is staged over another's without an
	// overlaps warning (staging.md).
	OverlapWhitelist []string
}

// SplitRule is one domain's rules as an element (or a project) writes them.
type SplitRule struct {
	Rules           []string // a plain list: the domain's rules
	Compose         bool     // written { prepend, append }: Prepend + the project's + Append
	Prepend, Append []string
}

var publicKeys = []string{"integration-commands", "split-rules", "overlap-whitelist"}

// domainRE is what a split domain's name may be: it cannot be mistaken for a path.
var domainRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// DefaultSplitRules are the split domains every project starts from (BuildStream's
// defaults); project.toml's [split-rules] replaces a domain's rules or adds domains.
var DefaultSplitRules = map[string][]string{
	"runtime": {"%{bindir}/*", "%{sbindir}/*", "%{libexecdir}/*", "%{libdir}/lib*.so*"},
	"devel": {"%{includedir}", "%{includedir}/**", "%{libdir}/lib*.a", "%{libdir}/lib*.la",
		"%{libdir}/pkgconfig/*.pc", "%{datadir}/pkgconfig/*.pc", "%{datadir}/aclocal/*.m4"},
	"debug":  {"%{debugdir}", "%{debugdir}/**"},
	"doc":    {"%{docdir}", "%{docdir}/**", "%{infodir}", "%{infodir}/**", "%{mandir}", "%{mandir}/**"},
	"locale": {"%{datadir}/locale", "%{datadir}/locale/**", "%{datadir}/i18n", "%{datadir}/i18n/**", "%{datadir}/zoneinfo", "%{datadir}/zoneinfo/**"},
}

// parsePublic reads [public] (v: a toml.Primitive or a plain table; nil when absent).
func parsePublic(doc *tomlDoc, v any) (Public, error) {
	var pub Public
	if v == nil {
		return pub, nil
	}
	t, err := doc.table("public", v)
	if err != nil {
		return pub, err
	}
	if pub.Integration, _, err = t.strings("integration-commands"); err != nil {
		return pub, err
	}
	if pub.OverlapWhitelist, _, err = t.strings("overlap-whitelist"); err != nil {
		return pub, err
	}
	t.use("split-rules")
	if sv, ok := t.m["split-rules"]; ok {
		m, ok := sv.(map[string]any)
		if !ok {
			return pub, doc.valueError("public.split-rules", "expected a table of domains, found %s", tomlTypeName(sv))
		}
		pub.Splits = map[string]SplitRule{}
		for _, domain := range sortedKeys(m) {
			path := "public.split-rules." + domain
			if !domainRE.MatchString(domain) {
				return pub, doc.valueError(path, "%q is not a split domain name: use lowercase letters, digits, '_' and '-'", domain)
			}
			var r SplitRule
			if c, ok := m[domain].(map[string]any); ok {
				r.Compose = true
				if r.Prepend, r.Append, err = composition(doc, path, c); err != nil {
					return pub, err
				}
			} else if r.Rules, ok = plainStrings(m[domain]); !ok {
				return pub, doc.valueError(path, "expected a list of globs or { prepend = [...], append = [...] }, found %s", tomlTypeName(m[domain]))
			}
			if err := checkRules(doc, path, r.Rules, r.Prepend, r.Append); err != nil {
				return pub, err
			}
			pub.Splits[domain] = r
		}
	}
	return pub, t.done(publicKeys)
}

// checkSplitRules checks project.toml's [split-rules] domain names.
func checkSplitRules(doc *tomlDoc, rules map[string][]string) error {
	for _, domain := range sortedKeys(rules) {
		if !domainRE.MatchString(domain) {
			return doc.valueError("split-rules."+domain, "%q is not a split domain name: use lowercase letters, digits, '_' and '-'", domain)
		}
		if err := checkRules(doc, "split-rules."+domain, rules[domain]); err != nil {
			return err
		}
	}
	return nil
}

// splitRules is e's split rules, unexpanded: the defaults, its project's [split-rules]
// over them, its own [public.split-rules] over those. declared lists the domains its
// project or itself declares (the ones its key holds, see resolvePublic).
func (e *Element) splitRules(p *Project) (rules map[string][]string, declared []string) {
	if e.project != nil {
		p = e.project
	}
	rules = make(map[string][]string, len(DefaultSplitRules)+len(p.SplitRules)+len(e.public.Splits))
	for d, r := range DefaultSplitRules {
		rules[d] = r
	}
	for d, r := range p.SplitRules {
		rules[d] = r
		declared = append(declared, d)
	}
	for d, r := range e.public.Splits {
		if r.Compose {
			rules[d] = slices.Concat(r.Prepend, rules[d], r.Append)
		} else {
			rules[d] = r.Rules
		}
		declared = append(declared, d)
	}
	slices.Sort(declared)
	return rules, slices.Compact(declared)
}

// SplitRules is e's split rules by domain, expanded in its own context with paths.
func (e *Element) SplitRules(p *Project, paths Paths) (map[string][]string, error) {
	rules, _ := e.splitRules(p)
	return e.expandRules(e.Variables(p, paths), rules, sortedKeys(rules))
}

// expandRules expands the rules of domains with vars.
func (e *Element) expandRules(vars *Variables, rules map[string][]string, domains []string) (map[string][]string, error) {
	out := make(map[string][]string, len(domains))
	for _, d := range domains {
		list := make([]string, len(rules[d]))
		for i, r := range rules[d] {
			x, err := vars.Expand(strings.TrimSpace(r))
			if err != nil {
				key := "public.split-rules." + d
				file, line, text := e.document().locate(key)
				if line == 0 {
					file, key = ProjectFile, "split-rules."+d
				}
				return nil, &ProjectError{File: file, Line: line, Text: text, Msg: fmt.Sprintf("in %s (split rules of %s): %v", key, e.Name, err)}
			}
			list[i] = x
		}
		out[d] = list
	}
	return out, nil
}

// IntegrationCommands is e's integration commands expanded in its own context with
// paths (those of the build whose sysroot it is staged into).
func (e *Element) IntegrationCommands(p *Project, paths Paths) ([]string, error) {
	return e.expandIntegration(e.Variables(p, paths))
}

func (e *Element) expandIntegration(vars *Variables) ([]string, error) {
	if len(e.public.Integration) == 0 {
		return nil, nil
	}
	out := make([]string, len(e.public.Integration))
	for i, c := range e.public.Integration {
		x, err := vars.Expand(c)
		if err != nil {
			file, line, text := e.document().locate("public.integration-commands")
			return nil, &ProjectError{File: file, Line: line, Text: text, Msg: fmt.Sprintf("in public.integration-commands: %v", err)}
		}
		out[i] = x
	}
	return out, nil
}

// HasIntegration reports whether e declares integration commands.
func (e *Element) HasIntegration() bool { return len(e.public.Integration) > 0 }

// ResolvedPublic is the part of an element's public data its own key holds: its
// integration commands, and the split rules of the domains it or its project declares,
// expanded. Nothing for an element that declares none, so that no key of a project
// without public data changed when it was introduced.
type ResolvedPublic struct {
	Integration []string            `json:"integration-commands,omitempty"`
	Splits      map[string][]string `json:"split-rules,omitempty"`
}

// resolvePublic is e's ResolvedPublic with vars, or nil when it has none.
func (e *Element) resolvePublic(p *Project, vars *Variables) (*ResolvedPublic, error) {
	if e.project != nil {
		p = e.project
	}
	if len(e.public.Integration) == 0 && len(e.public.Splits) == 0 && len(p.SplitRules) == 0 {
		return nil, nil // most elements: nothing to expand, no map to make (every element is resolved at load)
	}
	integration, err := e.expandIntegration(vars)
	if err != nil {
		return nil, err
	}
	rules, declared := e.splitRules(p)
	if len(integration) == 0 && len(declared) == 0 {
		return nil, nil
	}
	splits, err := e.expandRules(vars, rules, declared)
	if err != nil {
		return nil, err
	}
	if len(splits) == 0 {
		splits = nil
	}
	return &ResolvedPublic{Integration: integration, Splits: splits}, nil
}

// SplitDomains is every domain e's project defines (the defaults and its [split-rules]).
func (p *Project) SplitDomains() []string {
	var out []string
	for d := range DefaultSplitRules {
		out = append(out, d)
	}
	for d := range p.SplitRules {
		if _, ok := DefaultSplitRules[d]; !ok {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// parseSelection reads what a compose or filter element keeps of what it stages:
// include and exclude name split domains, include-orphans keeps (or drops) the files no
// domain claims, integrate (compose) runs the integration commands first. A value the
// kind has by default is left unset, so that writing it changes no key.
func parseSelection(t *table, kind *Kind, c *Config) error {
	var err error
	for _, k := range []struct {
		key  string
		list *[]string
	}{{"include", &c.Include}, {"exclude", &c.Exclude}} {
		if *k.list, _, err = t.strings(k.key); err != nil {
			return err
		}
		for _, d := range *k.list {
			if !domainRE.MatchString(d) {
				return t.doc.valueError(t.keyPath(k.key), "%q is not a split domain: %s include and exclude name split domains (runtime, devel, debug, doc, locale, or one of [split-rules] in project.toml), not paths; to select paths, declare a domain for them in [public.split-rules] of the elements that install them", d, kind.Name)
			}
		}
	}
	orphansDefault := kind.Name == "compose"
	if t.has("include-orphans") {
		b, err := t.boolean("include-orphans")
		if err != nil {
			return err
		}
		if b != orphansDefault {
			c.Orphans = &b
		}
	}
	if kind.Name == "compose" && t.has("integrate") {
		b, err := t.boolean("integrate")
		if err != nil {
			return err
		}
		if !b {
			c.Integrate = &b
		}
	}
	return nil
}

// IncludeOrphans reports whether a compose or filter element keeps the files that no
// split domain claims: by default a compose does and a filter does not.
func (r *Resolved) IncludeOrphans(kind string) bool {
	if r.Orphans != nil {
		return *r.Orphans
	}
	return kind == "compose"
}

// Integrates reports whether a compose element runs its staged elements' integration
// commands (the default).
func (r *Resolved) Integrates() bool { return r.Integrate == nil || *r.Integrate }

// checkFilter checks what a filter element's file says: exactly one build dependency,
// in build-depends (a dependency in depends would also be a runtime one, and staged
// whole for its dependants, which is what a filter exists to avoid), and no sources.
func checkFilter(doc *tomlDoc, f *elementFile, sources int) error {
	if len(f.Depends) > 0 {
		return doc.valueError("depends", "a filter element's build dependency must not also be a runtime dependency: move %s to build-depends (runtime dependencies of the filter go in runtime-depends)", f.Depends[0])
	}
	if n := len(f.BuildDepends); n != 1 {
		key, list := "build-depends", ""
		if n > 0 {
			list = ": " + strings.Join(f.BuildDepends, ", ")
		} else if !doc.md.IsDefined(key) {
			key = "kind"
		}
		return doc.valueError(key, "a filter element needs exactly one build dependency (the element it filters), it has %d%s", n, list)
	}
	if sources > 0 {
		return doc.valueError("sources[0]", "a filter element takes no sources: it selects files of its build dependency")
	}
	return nil
}

// checkSelections checks that every domain a compose or filter element names is
// defined: by its project, or by the split rules of an element it stages. (A domain
// some staged elements lack is fine, as in BuildStream; one none has is a typo.)
func (g *Graph) checkSelections() error {
	for _, e := range g.Order {
		if e.Kind.Name != "compose" && e.Kind.Name != "filter" {
			continue
		}
		p := g.Project
		if e.project != nil {
			p = e.project
		}
		known := p.SplitDomains()
		for _, d := range g.StageDeps(e) {
			_, declared := d.splitRules(g.Project)
			known = append(known, declared...)
		}
		slices.Sort(known)
		known = slices.Compact(known)
		for _, k := range []struct {
			key  string
			list []string
		}{{"config.include", e.Config.Include}, {"config.exclude", e.Config.Exclude}} {
			for _, d := range k.list {
				if !slices.Contains(known, d) {
					file, line, text := e.document().locate(k.key)
					return &ProjectError{File: file, Line: line, Text: text,
						Msg:  fmt.Sprintf("in %s: no split domain %q%s; domains: %s", k.key, d, didYouMean(d, known), strings.Join(known, ", ")),
						Hint: "declare it in [split-rules] of project.toml or [public.split-rules] of the elements it stages"}
				}
			}
		}
	}
	return nil
}

// publicChange is the first difference between two elements' public data as their keys
// hold it (explain), or nil.
func publicChange(o, n *ResolvedPublic) *Change {
	if o == nil {
		o = &ResolvedPublic{}
	}
	if n == nil {
		n = &ResolvedPublic{}
	}
	for i := range max(len(o.Integration), len(n.Integration)) {
		var a, b string
		if i < len(o.Integration) {
			a = o.Integration[i]
		}
		if i < len(n.Integration) {
			b = n.Integration[i]
		}
		if a != b {
			return &Change{What: "public", Name: "integration-commands", Old: a, New: b}
		}
	}
	domains := sortedKeys(o.Splits)
	domains = append(domains, sortedKeys(n.Splits)...)
	slices.Sort(domains)
	for _, d := range slices.Compact(domains) {
		if !slices.Equal(o.Splits[d], n.Splits[d]) {
			return &Change{What: "public", Name: "split-rules." + d, Old: strings.Join(o.Splits[d], " "), New: strings.Join(n.Splits[d], " ")}
		}
	}
	return nil
}

// SplitRegexp is the regular expression matching the absolute paths that any of a
// domain's rules (expanded) claims.
func SplitRegexp(rules []string) (*regexp.Regexp, error) {
	parts := make([]string, len(rules))
	for i, r := range rules {
		expr, err := globExpr(r)
		if err != nil {
			return nil, fmt.Errorf("split rule %q: %v", r, err)
		}
		parts[i] = expr
	}
	return regexp.Compile("^(?:" + strings.Join(parts, "|") + ")$")
}

// checkRules checks the globs of a domain's rules, written at path in doc.
func checkRules(doc *tomlDoc, path string, rules ...[]string) error {
	for _, list := range rules {
		for _, r := range list {
			if _, err := globExpr(r); err != nil {
				return doc.valueError(path, "split rule %q: %v", r, err)
			}
		}
	}
	return nil
}

// OverlapWhitelist is [public] overlap-whitelist with e's variables expanded (they
// name no build path: a whitelist is the same in every sandbox). Errors name the file
// and line.
func (e *Element) OverlapWhitelist(p *Project) ([]string, error) {
	if len(e.public.OverlapWhitelist) == 0 {
		return nil, nil
	}
	vars := e.Variables(p, keyPaths())
	out := make([]string, len(e.public.OverlapWhitelist))
	for i, glob := range e.public.OverlapWhitelist {
		var err error
		if out[i], err = vars.Expand(glob); err != nil {
			file, line, text := e.document().locate("public.overlap-whitelist")
			return nil, &ProjectError{File: file, Line: line, Msg: fmt.Sprintf("in public.overlap-whitelist: %v", err), Text: text}
		}
	}
	return out, nil
}
