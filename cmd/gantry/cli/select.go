package cli

import (
	"regexp"
	"strings"
)

// Element selection: what the element arguments of a command name.
//
// An argument is an element name, a path to an element file, or a glob over the
// project's element names with BuildStream's meaning: '*' and '?' stay inside one
// directory, '**' crosses directories ('**' alone is every element, 'base/*.toml'
// the elements directly in base/). With no argument a command works on the
// project's default-targets, or on every element when there are none (as
// BuildStream does without defaults: targets).

// isGlob says whether an element argument is a pattern.
func isGlob(a string) bool { return strings.ContainsAny(a, "*?[") }

// globRegexp compiles an element glob: '**' matches any text, '*' any text
// without '/', '?' one character but '/', '[...]' a character class.
func globRegexp(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			if i+1 < len(pattern) && pattern[i+1] == '*' {
				b.WriteString(".*")
				i++
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		case '[':
			end := strings.IndexByte(pattern[i:], ']')
			if end < 0 {
				return nil, usagef("element glob %q: '[' without ']'", pattern)
			}
			class := pattern[i+1 : i+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, usagef("element glob %q: %v", pattern, err)
	}
	return re, nil
}

// matchElements returns the project's elements a glob names, sorted; none is a
// usage error naming the pattern.
func (s *session) matchElements(pattern string) ([]string, error) {
	re, err := globRegexp(pattern)
	if err != nil {
		return nil, err
	}
	all, err := s.project.ElementNames()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range all {
		if re.MatchString(e) {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, usagef("%s matches no element of %s (quote globs so that the shell leaves them alone)", pattern, s.project.ElementDir())
	}
	return out, nil
}

// targets returns the elements the arguments name (globs expanded, duplicates
// dropped), else the default targets, else every element of the project.
func (s *session) targets(args []string) ([]string, error) {
	if len(args) == 0 {
		if len(s.project.DefaultTargets) > 0 {
			return s.project.DefaultTargets, nil
		}
		all, err := s.project.ElementNames()
		if err != nil {
			return nil, err
		}
		if len(all) == 0 {
			return nil, usagef("no elements named and %s holds no element: add one (see `gantry init`)", s.project.ElementDir())
		}
		return all, nil
	}
	var out []string
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	for _, a := range args {
		if !isGlob(a) {
			add(s.elementArg(a))
			continue
		}
		matched, err := s.matchElements(a)
		if err != nil {
			return nil, err
		}
		for _, m := range matched {
			add(m)
		}
	}
	return out, nil
}
