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

// appendLine appends the line with value(name) for each placeholder to b: only the
// placeholders the format names are computed, and nothing is allocated but b's growth
// (show renders one line per element of the graph into one buffer).
func (f *lineFormat) appendLine(b []byte, value func(name string) string) []byte {
	for _, p := range f.parts {
		if p.name == "" {
			b = append(b, p.literal...)
			continue
		}
		v := value(p.name)
		pad := p.width - utf8.RuneCountInString(v)
		if pad <= 0 {
			b = append(b, v...)
			continue
		}
		left := 0 // fill runes before the value
		switch p.align {
		case '>':
			left = pad
		case '^':
			left = pad / 2
		}
		b = appendFill(b, p.fill, left)
		b = append(b, v...)
		b = appendFill(b, p.fill, pad-left)
	}
	return b
}

// appendFill appends n copies of fill.
func appendFill(b []byte, fill rune, n int) []byte {
	for range n {
		b = utf8.AppendRune(b, fill)
	}
	return b
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
