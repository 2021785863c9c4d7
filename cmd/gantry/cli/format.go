package cli

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// lineFormat is a parsed --format string: literal text and %{name[:spec]} placeholders,
// where spec is an optional fill character, an alignment (< > ^) and a width, as in
// BuildStream ("%{state: >12}").
type lineFormat struct {
	parts []formatPart
}

type formatPart struct {
	literal string
	name    string // "" for a literal
	fill    rune
	align   byte
	width   int
}

var placeholderRE = regexp.MustCompile(`%\{([a-z-]+)(?::(?:(.)?([<>^]))?(\d+))?\}`)

func parseFormat(s string, known []string) (*lineFormat, error) {
	f := &lineFormat{}
	last := 0
	for _, m := range placeholderRE.FindAllStringSubmatchIndex(s, -1) {
		if m[0] > last {
			f.parts = append(f.parts, formatPart{literal: s[last:m[0]]})
		}
		p := formatPart{name: s[m[2]:m[3]], fill: ' ', align: '<'}
		if !contains(known, p.name) {
			return nil, usagef("--format: unknown placeholder %%{%s}; known: %s", p.name, "%{"+strings.Join(known, "} %{")+"}")
		}
		if m[4] >= 0 && m[5] > m[4] {
			p.fill, _ = utf8.DecodeRuneInString(s[m[4]:m[5]])
		}
		if m[6] >= 0 {
			p.align = s[m[6]]
		}
		if m[8] >= 0 {
			p.width, _ = strconv.Atoi(s[m[8]:m[9]])
		}
		f.parts = append(f.parts, p)
		last = m[1]
	}
	if last < len(s) {
		f.parts = append(f.parts, formatPart{literal: s[last:]})
	}
	return f, nil
}

// render writes the line with value(name) for each placeholder: only the placeholders
// the format names are computed (show renders one line per element of the graph).
func (f *lineFormat) render(value func(name string) string) string {
	var b strings.Builder
	for _, p := range f.parts {
		if p.name == "" {
			b.WriteString(p.literal)
			continue
		}
		v := value(p.name)
		pad := p.width - utf8.RuneCountInString(v)
		if pad <= 0 {
			b.WriteString(v)
			continue
		}
		fill := strings.Repeat(string(p.fill), pad)
		switch p.align {
		case '>':
			b.WriteString(fill + v)
		case '^':
			left := strings.Repeat(string(p.fill), pad/2)
			b.WriteString(left + v + fill[len(left)*utf8.RuneLen(p.fill):])
		default:
			b.WriteString(v + fill)
		}
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
