package element

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gantry-build/gantry/source"
)

// Source aliases ([aliases] in project.toml) and mirrors ([[mirrors]] in project.toml
// and the user configuration). A source url "gnu:hello/hello-2.12.tar.gz" keeps its
// alias in the key (source.Resolve says how an alias is told from a URL scheme); loading
// an element expands it into the spec's Upstream and the mirrors' URLs into its Mirrors,
// in the order Project.UseMirrors set.

var mirrorKeys = []string{"name", "aliases"}

// checkAliases checks project.toml's [aliases] and [[mirrors]]: alias names, and mirrors
// named once each that name only defined aliases.
func checkAliases(doc *tomlDoc, p *Project) error {
	for _, name := range slices.Sorted(maps.Keys(p.Aliases)) {
		if err := source.CheckAliasName(name); err != nil {
			return doc.valueError("aliases."+name, "%v", err)
		}
		if p.Aliases[name] == "" {
			return doc.valueError("aliases."+name, "an alias needs a URL prefix, such as \"https://ftp.gnu.org/gnu/\"")
		}
	}
	if err := checkMirrors(doc, p.Mirrors); err != nil {
		return err
	}
	defined := slices.Sorted(maps.Keys(p.Aliases))
	for i, m := range p.Mirrors {
		for _, a := range slices.Sorted(maps.Keys(m.Aliases)) {
			if _, ok := p.Aliases[a]; !ok {
				return doc.valueError(fmt.Sprintf("mirrors[%d].aliases.%s", i, a), "mirror %q names the alias %q, which [aliases] does not define%s", m.Name, a, didYouMean(a, defined))
			}
		}
	}
	p.mirrors = p.Mirrors
	return nil
}

// checkMirrors checks that each mirror has a name, unlike the others', and URL prefixes.
func checkMirrors(doc *tomlDoc, mirrors []source.Mirror) error {
	seen := map[string]bool{}
	for i, m := range mirrors {
		at := fmt.Sprintf("mirrors[%d]", i)
		if m.Name == "" {
			return &ProjectError{File: doc.display, Line: doc.lineOf(at), Msg: fmt.Sprintf("mirror %d has no name", i+1), Hint: `add a line like name = "internal"`}
		}
		if seen[m.Name] {
			return doc.valueError(at+".name", "a mirror named %q is defined twice", m.Name)
		}
		seen[m.Name] = true
		for a, prefixes := range m.Aliases {
			if slices.Contains(prefixes, "") {
				return doc.valueError(at+".aliases."+a, "an empty URL prefix")
			}
		}
	}
	return nil
}

// UseMirrors sets the order in which fetch tries the mirrors: the default mirror def
// first (none when ""), then the user configuration's mirrors (user), then the
// project's; a user mirror replaces the project's of the same name. An unknown def is
// an error naming the mirrors there are.
func (p *Project) UseMirrors(user []source.Mirror, def string) error {
	all := slices.Clone(user)
	for _, m := range p.Mirrors {
		if !slices.ContainsFunc(user, func(u source.Mirror) bool { return u.Name == m.Name }) {
			all = append(all, m)
		}
	}
	if def != "" {
		i := slices.IndexFunc(all, func(m source.Mirror) bool { return m.Name == def })
		if i < 0 {
			names := make([]string, len(all))
			for j, m := range all {
				names[j] = m.Name
			}
			there := "no mirror is defined"
			if len(names) > 0 {
				there = "mirrors: " + strings.Join(names, ", ")
			}
			return fmt.Errorf("no mirror is named %q%s; %s", def, didYouMean(def, names), there)
		}
		first := all[i]
		all = append([]source.Mirror{first}, slices.Delete(all, i, i+1)...)
	}
	p.mirrors = all
	return nil
}

// resolveSources expands the aliases of e's source urls (source.Resolve). An alias
// project.toml does not define is an error at the url's line.
func (p *Project) resolveSources(e *Element) error {
	for i := range e.Sources {
		s := &e.Sources[i]
		if s.URL == "" {
			continue
		}
		err := source.Resolve(s, p.Aliases, p.mirrors)
		var ua *source.UndefinedAliasError
		if !errors.As(err, &ua) {
			continue
		}
		return undefinedAlias(e.document(), fmt.Sprintf("sources[%d]", i), i, ua, p.Aliases)
	}
	return nil
}

// undefinedAlias is the error for source i, at path in doc, whose url uses an alias
// that aliases, project.toml's, does not define: at the url's line.
func undefinedAlias(doc *tomlDoc, path string, i int, ua *source.UndefinedAliasError, aliases map[string]string) error {
	defined := slices.Sorted(maps.Keys(aliases))
	hint := "define it under [aliases] in project.toml, or write a full URL (" + strings.Join(source.KnownSchemes, ":, ") + ":)"
	if len(defined) > 0 {
		hint += "; aliases: " + strings.Join(defined, ", ")
	}
	line := doc.lineOf(path + ".url")
	return &ProjectError{File: doc.display, Line: line, Msg: fmt.Sprintf("source %d: %v%s", i+1, ua, didYouMean(ua.Alias, defined)), Text: doc.line(line), Hint: hint}
}
