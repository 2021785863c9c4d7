package element

import (
	"fmt"
	"slices"
	"strings"
)

// A condition is a boolean expression over the project's options, written in a [[if]]
// block: `arch == "aarch64" and debug`, `"tests" in features`, `not (a or b)`.
//
//	or   := and { "or" and }
//	and  := not { "and" not }
//	not  := "not" not | atom
//	atom := "(" or ")" | NAME | NAME ("==" | "!=") VALUE | VALUE "in" NAME
//	VALUE := "..." | '...' | true | false
//
// A bare NAME is a bool option; == and != compare a bool, enum or arch option with a
// value it can take; `in` asks whether a flags option holds a value. Every name and
// value is checked against the declarations when the condition is parsed, so a typo
// is an error at load time, never a condition that is silently false.
type condition interface {
	eval(values map[string]string) bool
}

type condAnd struct{ a, b condition }
type condOr struct{ a, b condition }
type condNot struct{ a condition }
type condBool struct{ name string } // a bool option
type condEq struct {
	name, value string
	negate      bool
}                                        // == or !=
type condIn struct{ name, value string } // a flag of a flags option

func (c condAnd) eval(v map[string]string) bool  { return c.a.eval(v) && c.b.eval(v) }
func (c condOr) eval(v map[string]string) bool   { return c.a.eval(v) || c.b.eval(v) }
func (c condNot) eval(v map[string]string) bool  { return !c.a.eval(v) }
func (c condBool) eval(v map[string]string) bool { return v[c.name] == "true" }
func (c condEq) eval(v map[string]string) bool   { return (v[c.name] == c.value) != c.negate }
func (c condIn) eval(v map[string]string) bool {
	return slices.Contains(strings.Split(v[c.name], ","), c.value)
}

// conditionError is a mistake in a condition at byte offset Pos of its text.
type conditionError struct {
	Pos int
	Msg string
}

func (e *conditionError) Error() string { return fmt.Sprintf("column %d: %s", e.Pos+1, e.Msg) }

// token kinds of a condition's text.
const (
	tokEnd = iota
	tokName
	tokString
	tokOp // == != ( )
)

type condToken struct {
	kind int
	text string // a name, an operator, or a string's value
	pos  int
}

func (t condToken) String() string {
	switch t.kind {
	case tokEnd:
		return "the end of the condition"
	case tokString:
		return fmt.Sprintf("the string %q", t.text)
	}
	return fmt.Sprintf("%q", t.text)
}

func lexCondition(s string) ([]condToken, error) {
	var toks []condToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')':
			toks = append(toks, condToken{tokOp, string(c), i})
			i++
		case c == '=' || c == '!':
			if i+1 >= len(s) || s[i+1] != '=' {
				return nil, &conditionError{i, fmt.Sprintf("unexpected %q: expected == or !=", string(c))}
			}
			toks = append(toks, condToken{tokOp, s[i : i+2], i})
			i += 2
		case c == '"' || c == '\'':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				return nil, &conditionError{i, "unterminated string: expected a closing " + string(c)}
			}
			toks = append(toks, condToken{tokString, s[i+1 : i+1+end], i})
			i += end + 2
		case isNameByte(c):
			j := i
			for j < len(s) && isNameByte(s[j]) {
				j++
			}
			toks = append(toks, condToken{tokName, s[i:j], i})
			i = j
		default:
			return nil, &conditionError{i, fmt.Sprintf("unexpected %q: expected an option name, a quoted value, ==, !=, in, and, or, not or parentheses", string(c))}
		}
	}
	return append(toks, condToken{tokEnd, "", len(s)}), nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

var condKeywords = []string{"and", "or", "not", "in", "true", "false"}

// condParser parses one condition against the project's option declarations.
type condParser struct {
	toks []condToken
	i    int
	opts map[string]*Option
}

// parseCondition parses s, checking every option name and value against opts.
func parseCondition(s string, opts map[string]*Option) (condition, error) {
	if strings.TrimSpace(s) == "" {
		return nil, &conditionError{0, "empty condition: expected an expression over options, like debug or arch == \"aarch64\""}
	}
	toks, err := lexCondition(s)
	if err != nil {
		return nil, err
	}
	p := &condParser{toks: toks, opts: opts}
	c, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEnd {
		return nil, &conditionError{t.pos, fmt.Sprintf("unexpected %s: expected and, or, or the end of the condition", t)}
	}
	return c, nil
}

func (p *condParser) peek() condToken { return p.toks[p.i] }
func (p *condParser) next() condToken { t := p.toks[p.i]; p.i++; return t }

func (p *condParser) isWord(w string) bool {
	t := p.peek()
	return t.kind == tokName && t.text == w
}

func (p *condParser) or() (condition, error) {
	return p.chain("or", p.and, func(a, b condition) condition { return condOr{a, b} })
}

func (p *condParser) and() (condition, error) {
	return p.chain("and", p.not, func(a, b condition) condition { return condAnd{a, b} })
}

// chain parses operands joined by the word, grouped from the left.
func (p *condParser) chain(word string, operand func() (condition, error), join func(a, b condition) condition) (condition, error) {
	c, err := operand()
	for err == nil && p.isWord(word) {
		p.next()
		var r condition
		if r, err = operand(); err == nil {
			c = join(c, r)
		}
	}
	return c, err
}

func (p *condParser) not() (condition, error) {
	if p.isWord("not") {
		p.next()
		c, err := p.not()
		if err != nil {
			return nil, err
		}
		return condNot{c}, nil
	}
	return p.atom()
}

func (p *condParser) atom() (condition, error) {
	t := p.next()
	switch {
	case t.kind == tokOp && t.text == "(":
		c, err := p.or()
		if err != nil {
			return nil, err
		}
		if e := p.next(); e.kind != tokOp || e.text != ")" {
			return nil, &conditionError{e.pos, fmt.Sprintf("unexpected %s: expected ) to close the ( at column %d", e, t.pos+1)}
		}
		return c, nil
	case isValue(t):
		// VALUE in NAME
		if !p.isWord("in") {
			return nil, &conditionError{p.peek().pos, fmt.Sprintf("unexpected %s after a value: expected in and a flags option", p.peek())}
		}
		p.next()
		n := p.next()
		o, err := p.option(n)
		if err != nil {
			return nil, err
		}
		if o.Type != "flags" {
			return nil, &conditionError{n.pos, fmt.Sprintf("option %q is of type %s: in needs a flags option (use == or != to compare)", o.Name, o.Type)}
		}
		if err := o.checkValue(t.text, t.pos); err != nil {
			return nil, err
		}
		return condIn{o.Name, t.text}, nil
	case t.kind == tokName && !slices.Contains(condKeywords, t.text):
		o, err := p.option(t)
		if err != nil {
			return nil, err
		}
		op := p.peek()
		if op.kind != tokOp || op.text != "==" && op.text != "!=" {
			if o.Type != "bool" {
				return nil, &conditionError{op.pos, fmt.Sprintf("option %q is of type %s: expected == or != and a value after it", o.Name, o.Type)}
			}
			return condBool{o.Name}, nil
		}
		p.next()
		v := p.next()
		if !isValue(v) {
			return nil, &conditionError{v.pos, fmt.Sprintf("unexpected %s: expected a quoted value after %s", v, op.text)}
		}
		if o.Type == "flags" {
			return nil, &conditionError{t.pos, fmt.Sprintf("option %q is a flags option: ask whether it holds a flag with \"FLAG\" in %s", o.Name, o.Name)}
		}
		if err := o.checkValue(v.text, v.pos); err != nil {
			return nil, err
		}
		return condEq{o.Name, v.text, op.text == "!="}, nil
	}
	return nil, &conditionError{t.pos, fmt.Sprintf("unexpected %s: expected an option name, a quoted value, not or (", t)}
}

// isValue reports whether t is a value: a quoted string, true or false.
func isValue(t condToken) bool {
	return t.kind == tokString || t.kind == tokName && (t.text == "true" || t.text == "false")
}

// option is the declared option a name token names.
func (p *condParser) option(t condToken) (*Option, error) {
	if t.kind != tokName || slices.Contains(condKeywords, t.text) {
		return nil, &conditionError{t.pos, fmt.Sprintf("unexpected %s: expected an option name", t)}
	}
	o, ok := p.opts[t.text]
	if !ok {
		return nil, &conditionError{t.pos, fmt.Sprintf("unknown option %q%s; %s", t.text, didYouMean(t.text, sortedKeys(p.opts)), declaredOptions(p.opts))}
	}
	return o, nil
}

// checkValue reports a value o cannot take, at pos of the condition.
func (o *Option) checkValue(v string, pos int) error {
	if slices.Contains(o.allowed(), v) {
		return nil
	}
	return &conditionError{pos, fmt.Sprintf("option %q cannot be %q%s: expected one of %s", o.Name, v, didYouMean(v, o.allowed()), strings.Join(o.allowed(), ", "))}
}

// declaredOptions names the declared options for an error's end.
func declaredOptions(opts map[string]*Option) string {
	if len(opts) == 0 {
		return "project.toml declares no [options]"
	}
	return "options: " + strings.Join(sortedKeys(opts), ", ")
}
