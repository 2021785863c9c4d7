package cli

import "github.com/gantry-build/gantry/element"

// Element selection: what the element arguments of a command name.
//
// An argument is an element name, a path to an element file, or a glob over the
// project's element names (element.GlobRegexp). With no argument a command works on
// the project's default-targets, or on every element when there are none (as
// BuildStream does without defaults: targets).

// matchElements returns the project's elements a glob names, sorted; none is a
// usage error naming the pattern.
func (s *session) matchElements(pattern string) ([]string, error) {
	re, err := element.GlobRegexp(pattern)
	if err != nil {
		return nil, usagef("%v", err)
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
		if !element.IsGlob(a) {
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
