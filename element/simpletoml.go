package element

import "unicode/utf8"

// simpleTOML decodes text as BurntSushi's decoder decodes it into an `any` (tables as
// map[string]any, arrays as []any), when text is written in the plain subset most
// element files use, and reports whether it was. The subset: comments, bare keys, `key =
// value` lines at the top level or under one-level `[table]` headers, and values that
// are basic strings (the escapes \b \t \n \f \r \" \\ only), literal strings, or arrays
// of those (on one line or several, a trailing comma allowed, no comment inside). Lines
// end in "\n". Anything else — a dotted or quoted key, a number, a boolean, an inline
// table, an array of tables, a key or table given twice, a control character, a
// carriage return, invalid UTF-8 — is not decoded (false), and the decoder reads the
// file as before, so every error is its own. Strings without escapes are parts of text
// (one allocation per file instead of one per string, and the lexer's and parser's
// garbage, half of what a first load of a large project allocated).
// FuzzSimpleTOML holds it to the decoder.
func simpleTOML(text string) (map[string]any, bool) {
	p := simpleParser{s: text}
	top := make(map[string]any, 4)
	cur := top
	for {
		p.space()
		if p.i == len(p.s) {
			return top, true
		}
		switch p.s[p.i] {
		case '\n':
			p.i++
			continue
		case '#':
			if !p.comment() {
				return nil, false
			}
			continue
		case '[':
			p.i++
			p.space()
			name, ok := p.bareKey()
			if _, dup := top[name]; !ok || dup || !p.after(']') {
				return nil, false
			}
			cur = make(map[string]any, 2)
			top[name] = cur
		default:
			key, ok := p.bareKey()
			if _, dup := cur[key]; !ok || dup || !p.after('=') {
				return nil, false
			}
			p.space()
			v, ok := p.value()
			if !ok {
				return nil, false
			}
			cur[key] = v
		}
		if !p.lineEnd() {
			return nil, false
		}
	}
}

type simpleParser struct {
	s string
	i int
}

// space skips spaces and tabs.
func (p *simpleParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// after reads spaces, then c.
func (p *simpleParser) after(c byte) bool {
	p.space()
	if p.i == len(p.s) || p.s[p.i] != c {
		return false
	}
	p.i++
	return true
}

// lineEnd reads what may follow a key's value or a header: spaces, a comment, then a
// newline or the end.
func (p *simpleParser) lineEnd() bool {
	p.space()
	if p.i == len(p.s) {
		return true
	}
	switch p.s[p.i] {
	case '\n':
		p.i++
		return true
	case '#':
		return p.comment()
	}
	return false
}

// comment reads a comment up to its newline (left to read): no control character but
// tab, valid UTF-8.
func (p *simpleParser) comment() bool {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != '\n' {
		if c := p.s[p.i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
		p.i++
	}
	return utf8.ValidString(p.s[start:p.i])
}

// bareKey reads a bare key: ASCII letters, digits, '_' and '-'.
func (p *simpleParser) bareKey() (string, bool) {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], p.i > start
}

// value reads a string or an array of strings.
func (p *simpleParser) value() (any, bool) {
	if p.i == len(p.s) {
		return nil, false
	}
	if p.s[p.i] != '[' {
		return p.str()
	}
	p.i++
	arr := make([]any, 0, 4)
	for {
		p.blank()
		if p.i == len(p.s) {
			return nil, false
		}
		if p.s[p.i] == ']' {
			p.i++
			return arr, true
		}
		v, ok := p.str()
		if !ok {
			return nil, false
		}
		arr = append(arr, v)
		p.blank()
		if p.i == len(p.s) {
			return nil, false
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return arr, true
		default:
			return nil, false
		}
	}
}

// blank skips spaces, tabs and newlines (inside an array).
func (p *simpleParser) blank() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

// str reads a basic or literal string on one line (not a multi-line one).
func (p *simpleParser) str() (any, bool) {
	if p.i == len(p.s) {
		return nil, false
	}
	q := p.s[p.i]
	if q != '"' && q != '\'' {
		return nil, false
	}
	if p.i+2 < len(p.s) && p.s[p.i+1] == q && p.s[p.i+2] == q {
		return nil, false // multi-line
	}
	p.i++
	start := p.i
	var buf []byte // the value, once it has an escape
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			s := p.s[start:p.i]
			if buf != nil {
				s = string(append(buf, s...))
			}
			p.i++
			if !utf8.ValidString(s) {
				return nil, false
			}
			return s, true
		case c < 0x20 && c != '\t' || c == 0x7f:
			return nil, false
		case c == '\\' && q == '"':
			if p.i+1 == len(p.s) {
				return nil, false
			}
			var e byte
			switch p.s[p.i+1] {
			case 'b':
				e = '\b'
			case 't':
				e = '\t'
			case 'n':
				e = '\n'
			case 'f':
				e = '\f'
			case 'r':
				e = '\r'
			case '"':
				e = '"'
			case '\\':
				e = '\\'
			default:
				return nil, false
			}
			buf = append(append(buf, p.s[start:p.i]...), e)
			p.i += 2
			start = p.i
			continue
		}
		p.i++
	}
	return nil, false
}
