package element

import (
	"bytes"
	"fmt"
)

// maxTOMLDepth is how deeply tables and arrays may nest in a TOML file gantry reads. The
// decoder's cost grows with the square of the nesting (4,000 nested inline tables took
// 14.6 s and 656 MB), so a file nested deeper is refused before it is decoded.
const maxTOMLDepth = 64

// scanDepth measures how deeply the TOML text nests, without decoding it: the root table
// is level 1, and each table or array inside a container is one level below it, whether
// it is written as a [header], a dotted key, an inline table or an array. It stops at the
// first level over limit (over: its 1-based line, deepest: that level); otherwise over is
// 0 and deepest the deepest level seen. One pass, no allocation beyond the stack of open
// brackets: a 10 MB file takes milliseconds.
//
// The level is never more than the decoded value's depth, so a valid file nested within
// the limit is never refused; it may be less, only where a header names an array of
// tables defined earlier ([[a]] then [[a.b]]), by at most one level per key: at most
// twice the limit. Invalid TOML is measured as well as it can be; the decoder reports it.
func scanDepth(text []byte, limit int) *depthScanner {
	s := &depthScanner{b: text, line: 1, base: 1, limit: limit, deepest: 1}
	s.run()
	return s
}

// shownLineMax is how much of a refused file's line an error shows.
const shownLineMax = 120

// depthScanner is the state of one tomlDepth pass.
type depthScanner struct {
	b       []byte
	i       int
	line    int   // 1-based line of b[i]
	base    int   // level of the table the last [header] opened (the root: 1)
	open    []int // levels of the open inline tables (negative) and arrays (positive)
	limit   int
	deepest int
	over    int // the line where a level first went over limit, 0 while none did
	overAt  int // and its byte offset
}

func (s *depthScanner) run() {
	for s.over == 0 {
		s.skipBlank()
		if s.i >= len(s.b) {
			return
		}
		c := s.b[s.i]
		if len(s.open) == 0 {
			if c == '[' {
				s.header()
			} else {
				s.keyValue(s.base)
			}
			continue
		}
		top := s.open[len(s.open)-1]
		switch {
		case c == ',':
			s.i++
		case c == ']' || c == '}':
			s.open = s.open[:len(s.open)-1]
			s.i++
		case top > 0:
			s.value(top + 1)
		default:
			s.keyValue(-top)
		}
	}
}

// reach records that a table or array sits at level.
func (s *depthScanner) reach(level int) {
	if level > s.deepest {
		s.deepest = level
	}
	if level > s.limit && s.over == 0 {
		s.over, s.overAt = s.line, s.i
	}
}

// header reads [a.b] or [[a.b]]: the tables it names sit below the root.
func (s *depthScanner) header() {
	s.i++
	aot := s.i < len(s.b) && s.b[s.i] == '['
	if aot {
		s.i++
	}
	k := s.key()
	s.base = 1 + k
	if aot {
		s.base++ // the array, then the table appended to it
	}
	s.reach(s.base)
	for s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
	}
}

// keyValue reads key = value in a table at level: a dotted key's tables and the value's
// container sit below it.
func (s *depthScanner) keyValue(level int) {
	start := s.i
	k := s.key()
	if k > 1 {
		s.reach(level + k - 1)
	}
	if s.i < len(s.b) && s.b[s.i] == '=' {
		s.i++
		s.skipSpace()
		s.value(level + k)
		return
	}
	if s.i == start {
		s.i++ // not a key: invalid TOML, which the decoder reports; move on
	}
}

// value reads one value; a table or array opens at level.
func (s *depthScanner) value(level int) {
	if s.i >= len(s.b) {
		return
	}
	switch c := s.b[s.i]; c {
	case '[', '{':
		s.reach(level)
		if c == '{' {
			level = -level
		}
		s.open = append(s.open, level)
		s.i++
	case '"', '\'':
		s.skipString()
	default:
		// A number, date, boolean (a date may hold a space): up to what ends a value.
		start := s.i
		for s.i < len(s.b) && !endsScalar(s.b[s.i], len(s.open) == 0) {
			s.i++
		}
		if s.i == start && len(s.open) > 0 && s.b[s.i] != ',' && s.b[s.i] != ']' && s.b[s.i] != '}' {
			s.i++ // not a value: invalid TOML; move on
		}
	}
}

func endsScalar(c byte, topLevel bool) bool {
	switch c {
	case '\n', '#':
		return true
	case ',', ']', '}':
		return !topLevel
	}
	return false
}

// key reads a (dotted) key and returns its number of parts.
func (s *depthScanner) key() int {
	k := 0
	for {
		s.skipSpace()
		if s.i >= len(s.b) {
			return k
		}
		switch c := s.b[s.i]; {
		case c == '"' || c == '\'':
			s.skipString()
		case isBareKeyByte(c):
			for s.i < len(s.b) && isBareKeyByte(s.b[s.i]) {
				s.i++
			}
		default:
			return k
		}
		k++
		s.skipSpace()
		if s.i >= len(s.b) || s.b[s.i] != '.' {
			return k
		}
		s.i++
	}
}

func isBareKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c >= 0x80
}

// skipString skips a basic, literal or multi-line string starting at s.b[s.i].
func (s *depthScanner) skipString() {
	q := s.b[s.i]
	if s.i+2 < len(s.b) && s.b[s.i+1] == q && s.b[s.i+2] == q {
		s.i += 3
		for s.i < len(s.b) {
			c := s.b[s.i]
			switch {
			case c == '\\' && q == '"':
				s.i++
				if s.i < len(s.b) && s.b[s.i] == '\n' {
					s.line++
				}
			case c == '\n':
				s.line++
			case c == q && s.i+2 < len(s.b) && s.b[s.i+1] == q && s.b[s.i+2] == q:
				s.i += 3
				for n := 0; n < 2 && s.i < len(s.b) && s.b[s.i] == q; n++ {
					s.i++ // """"" ends a string whose text ends in ""
				}
				return
			}
			s.i++
		}
		return
	}
	s.i++
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '\n':
			return // an unterminated string: invalid TOML
		case c == '\\' && q == '"':
			s.i++
			if s.i < len(s.b) && s.b[s.i] == '\n' {
				return
			}
		case c == q:
			s.i++
			return
		}
		s.i++
	}
}

// skipSpace skips spaces and tabs.
func (s *depthScanner) skipSpace() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t') {
		s.i++
	}
}

// skipBlank skips whitespace, newlines and comments.
func (s *depthScanner) skipBlank() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\n':
			s.line++
		case ' ', '\t', '\r':
		case '#':
			for s.i < len(s.b) && s.b[s.i] != '\n' {
				s.i++
			}
			continue
		default:
			return
		}
		s.i++
	}
}

// checkDepth refuses text nested deeper than maxTOMLDepth, naming the file and line.
func checkDepth(text []byte, doc *tomlDoc) error {
	s := scanDepth(text, maxTOMLDepth)
	if s.over == 0 {
		return nil
	}
	lineStart := bytes.LastIndexByte(text[:s.overAt], '\n') + 1
	col := s.overAt - lineStart + 1
	shown := doc.line(s.over)
	if len(shown) > shownLineMax {
		shown = shown[:shownLineMax] + " …"
	}
	if col > shownLineMax {
		col = 0
	}
	level := s.deepest
	return &ProjectError{File: doc.display, Line: s.over, Col: col, Text: shown,
		Msg:  fmt.Sprintf("tables or arrays nested more than %d levels deep (level %d here); gantry refuses such a file before decoding it", maxTOMLDepth, level),
		Hint: fmt.Sprintf("flatten the nesting to at most %d levels", maxTOMLDepth)}
}
