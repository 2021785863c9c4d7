package element

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// tomlDoc is one decoded TOML file, kept so that later checks can report errors with
// the file, line and text of the offending key.
type tomlDoc struct {
	display string   // the path shown to the user
	text    string   // the file's text
	lines   []string // text's lines, for error context; split on first use (see textLines)
	md      toml.MetaData
	// simple is the file's values when simpleTOML decoded it (md is then empty).
	simple map[string]any
	index  map[string]int // key path ("sources[1].path") -> 1-based line; built on first use
	// moved maps a key path to where the value it has was written: a key a [[if]]
	// block set ("config.build-commands" -> "if[0].config.build-commands"), a source
	// it added ("sources[2]" -> "if[0].sources[0]", and so each of its keys).
	moved map[string]string
	// includes are the files an element file included, with their identities.
	includes []includedFile
	// from maps a key path an included file set to that file's document (include.go).
	from map[string]*tomlDoc
}

// decodeTOML reads path and decodes it into v. Errors are *ProjectError with position.
func decodeTOML(path, display string, v any) (*tomlDoc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ProjectError{File: display, Msg: fmt.Sprintf("cannot read file: %v", errors.Unwrap(err))}
	}
	return decodeTOMLBytes(data, display, v)
}

func decodeTOMLBytes(data []byte, display string, v any) (*tomlDoc, error) {
	text := string(data)
	doc := &tomlDoc{display: display, text: text}
	if err := checkDepth(data, doc); err != nil {
		return nil, err
	}
	md, err := toml.Decode(text, v)
	doc.md = md
	if err != nil {
		return nil, doc.convert(err)
	}
	return doc, nil
}

var plainTypeErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

var typeMismatch = regexp.MustCompile(`incompatible types: TOML value has type (\S+); destination has type (\S+)`)

var typeNames = map[string]string{
	"slice": "a list", "array": "a list", "[]interface {}": "a list", "string": "a string",
	"map": "a table", "struct": "a table", "map[string]interface {}": "a table",
	"int": "an integer", "int64": "an integer", "bool": "a boolean", "float64": "a number",
}

func typeName(t string) string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return t
}

// convert turns a BurntSushi error into a ProjectError showing file:line:col and the line.
func (d *tomlDoc) convert(err error) error {
	var pe toml.ParseError
	parsed := true // a ParseError: its byte offset places it
	if p := new(toml.ParseError); errors.As(err, p) {
		pe = *p
	} else if pp := new(*toml.ParseError); errors.As(err, pp) {
		pe = **pp
	} else if m := plainTypeErr.FindStringSubmatch(err.Error()); m != nil {
		// Type mismatches come as plain errors: "toml: line N (last key "k"): msg".
		pe.Line, _ = strconv.Atoi(m[1])
		pe.Position.Line = pe.Line
		pe.LastKey, pe.Message = m[2], m[3]
		pe.Position.Col = valueColumn(d.line(pe.Line))
		parsed = false
	} else {
		return &ProjectError{File: d.display, Msg: err.Error()}
	}
	msg := pe.Message
	if m := typeMismatch.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("wrong type for key %q: expected %s, found %s", pe.LastKey, typeName(m[2]), typeName(m[1]))
	} else if pe.LastKey != "" && !strings.Contains(msg, pe.LastKey) {
		msg = fmt.Sprintf("%s (at key %q)", msg, pe.LastKey)
	}
	line, col := pe.Position.Line, pe.Position.Col
	if line == 0 && pe.Line > 0 {
		line = pe.Line
	}
	if parsed {
		// The line and column come from the byte offset: BurntSushi's column is one
		// line off at a line's start, and its line one ahead at a newline, so that
		// neither would agree with the line shown.
		if l, c := lineColumnOf(d.textLines(), pe.Position.Start); l > 0 && (pe.Position.Start > 0 || line <= 1) {
			line, col = l, c
		}
	}
	return &ProjectError{File: d.display, Line: line, Col: col, Msg: "invalid TOML: " + msg, Text: d.line(line)}
}

// lineColumnOf is the 1-based line and byte column of offset in lines (a newline is
// the column after its line's last character); 0, 0 past the end.
func lineColumnOf(lines []string, offset int) (line, col int) {
	start := 0
	for i, l := range lines {
		if offset <= start+len(l) {
			return i + 1, offset - start + 1
		}
		start += len(l) + 1
	}
	return 0, 0
}

func (d *tomlDoc) line(n int) string {
	if n <= 0 || n > len(d.textLines()) {
		return ""
	}
	return d.lines[n-1]
}

// textLines is the file's lines, split when an error first needs them: most files
// loaded have none.
func (d *tomlDoc) textLines() []string {
	if d.lines == nil {
		d.lines = strings.Split(d.text, "\n")
	}
	return d.lines
}

// unknownKeys reports the first key that the decoder did not consume, with a did-you-mean
// from candidates(parent path).
func (d *tomlDoc) unknownKeys(candidates func(parent []string) []string, skip ...string) error {
	var und []toml.Key
	for _, k := range d.md.Undecoded() {
		if len(k) > 1 && slices.Contains(skip, k[0]) {
			continue
		}
		und = append(und, k)
	}
	if len(und) == 0 {
		return nil
	}
	sort.Slice(und, func(i, j int) bool { return len(und[i]) < len(und[j]) })
	k := und[0]
	return d.keyError(strings.Join(k, "."), k[len(k)-1], candidates(k[:len(k)-1]))
}

// keyError reports an unknown key at path ("sources[1].pth"); name is its last element.
func (d *tomlDoc) keyError(path, name string, allowed []string) error {
	line := d.lineOf(path)
	where := ""
	if i := strings.LastIndex(path, "."); i >= 0 {
		where = " in [" + path[:i] + "]"
	}
	hint := ""
	if len(allowed) > 0 {
		hint = "known keys: " + strings.Join(allowed, ", ")
	}
	return &ProjectError{File: d.display, Line: line, Msg: fmt.Sprintf("unknown key %q%s%s", name, where, didYouMean(name, allowed)), Text: d.line(line), Hint: hint}
}

// valueError reports a bad value at path.
func (d *tomlDoc) valueError(path, format string, args ...any) error {
	line := d.lineOf(path)
	return &ProjectError{File: d.display, Line: line, Msg: fmt.Sprintf("key %q: ", path) + fmt.Sprintf(format, args...), Text: d.line(line)}
}

var keyLine = regexp.MustCompile(`^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=`)
var headerLine = regexp.MustCompile(`^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?`)

// lineOf finds the line of a key path. Arrays of tables are indexed: "sources[1].url".
// It is a light scanner used only for error messages; 0 means not found.
func (d *tomlDoc) lineOf(path string) int {
	if at, ok := d.moved[path]; ok {
		path = at
	} else if i := strings.IndexByte(path, '.'); i > 0 && d.moved[path[:i]] != "" {
		path = d.moved[path[:i]] + path[i:] // a key of a source a block added
	}
	if d.index == nil {
		d.index = map[string]int{}
		counts := map[string]int{} // array of tables (qualified) -> tables seen so far
		// qualify indexes a header's parts that name an array of tables by its
		// latest table: [if.config] after the second [[if]] is "if[1].config".
		qualify := func(name string) string {
			parts := strings.Split(name, ".")
			q := parts[0]
			for i := 1; i < len(parts); i++ {
				if n := counts[q]; n > 0 {
					q = fmt.Sprintf("%s[%d]", q, n-1)
				}
				q += "." + parts[i]
			}
			return q
		}
		prefix := ""
		for i, l := range d.textLines() {
			if m := headerLine.FindStringSubmatch(l); m != nil && !strings.Contains(strings.SplitN(l, "]", 2)[0], "=") {
				name := qualify(joinKey(m[2]))
				if m[1] == "[[" {
					n := counts[name]
					counts[name]++
					name = fmt.Sprintf("%s[%d]", name, n)
				}
				prefix = name
				if _, ok := d.index[prefix]; !ok {
					d.index[prefix] = i + 1
				}
				continue
			}
			if m := keyLine.FindStringSubmatch(l); m != nil {
				full := joinKey(m[1])
				if prefix != "" {
					full = prefix + "." + full
				}
				if _, ok := d.index[full]; !ok {
					d.index[full] = i + 1
				}
			}
		}
	}
	if n, ok := d.index[path]; ok {
		return n
	}
	// An unindexed path ("sources.url" from the decoder): try the first array element.
	if i := strings.Index(path, "."); i > 0 {
		if n, ok := d.index[path[:i]+"[0]"+path[i:]]; ok {
			return n
		}
	}
	// A table written only as dotted keys (config.x = 1): its first key's line.
	first := 0
	for k, n := range d.index {
		if strings.HasPrefix(k, path+".") && (first == 0 || n < first) {
			first = n
		}
	}
	// A key of an inline table (build-commands = { append = [...] }): the table's line.
	// Not a table's line for a key it does not hold: a project variable an element's
	// [variables] lacks is not at that table.
	if i := strings.LastIndex(path, "."); first == 0 && i > 0 {
		if n := d.lineOf(path[:i]); n > 0 && inlineHolds(d.line(n), path[i+1:]) {
			return n
		}
	}
	return first
}

// inlineHolds says whether the line text writes an inline table with the key k.
func inlineHolds(text, k string) bool {
	_, inner, ok := strings.Cut(text, "{")
	return ok && regexp.MustCompile(`(^|[\s,{"'])`+regexp.QuoteMeta(k)+`["']?\s*=`).MatchString(inner)
}

// joinKey normalises a dotted TOML key: whitespace and quotes removed.
func joinKey(k string) string {
	parts := strings.Split(k, ".")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if uq, err := strconv.Unquote(p); err == nil {
			p = uq
		} else {
			p = strings.Trim(p, "'")
		}
		parts[i] = p
	}
	return strings.Join(parts, ".")
}

// table is a decoded TOML table of kind-specific keys (sources, config), checked by hand so
// that errors can name the key and its line.
type table struct {
	doc  *tomlDoc
	path string // "sources[0]", "config"
	m    map[string]any
	used []string // the keys asked for: a table has a handful
}

// table reads v, a toml.Primitive or a table decoded as plain values, as the table at
// path.
func (d *tomlDoc) table(path string, v any) (*table, error) {
	t := &table{doc: d, path: path, used: make([]string, 0, 8)}
	switch v := v.(type) {
	case map[string]any:
		t.m = v
	case toml.Primitive:
		t.m = map[string]any{}
		if err := d.md.PrimitiveDecode(v, &t.m); err != nil {
			return nil, d.convert(err)
		}
	}
	return t, nil
}

func (t *table) keyPath(k string) string {
	if t.path == "" { // the file's top level
		return k
	}
	return t.path + "." + k
}

func (t *table) has(k string) bool { _, ok := t.m[k]; return ok }

func (t *table) str(k string) (string, error) {
	t.use(k)
	v, ok := t.m[k]
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", t.doc.valueError(t.keyPath(k), "expected a string, found %s", tomlTypeName(v))
	}
	return s, nil
}

func (t *table) boolean(k string) (bool, error) {
	t.use(k)
	v, ok := t.m[k]
	if !ok {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, t.doc.valueError(t.keyPath(k), "expected a boolean, found %s", tomlTypeName(v))
	}
	return b, nil
}

func (t *table) integer(k string, def int) (int, error) {
	t.use(k)
	v, ok := t.m[k]
	if !ok {
		return def, nil
	}
	n, ok := v.(int64)
	if !ok {
		return 0, t.doc.valueError(t.keyPath(k), "expected an integer, found %s", tomlTypeName(v))
	}
	return int(n), nil
}

// strings returns a list of strings; set is false when the key is absent.
func (t *table) strings(k string) (list []string, set bool, err error) {
	t.use(k)
	v, ok := t.m[k]
	if !ok {
		return nil, false, nil
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, true, t.doc.valueError(t.keyPath(k), "expected a list of strings, found %s", tomlTypeName(v))
	}
	list = make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, true, t.doc.valueError(t.keyPath(k), "item %d: expected a string, found %s", i+1, tomlTypeName(e))
		}
		list = append(list, s)
	}
	return list, true, nil
}

func (t *table) use(k string) {
	if !slices.Contains(t.used, k) {
		t.used = append(t.used, k)
	}
}

// done reports the first key, in name order, that no accessor asked for.
func (t *table) done(allowed []string) error {
	var unused []string
	for k := range t.m {
		if !slices.Contains(t.used, k) {
			unused = append(unused, k)
		}
	}
	if len(unused) == 0 {
		return nil
	}
	k := slices.Min(unused)
	return t.doc.keyError(t.keyPath(k), k, allowed)
}

func tomlTypeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "a list"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// valueColumn is the 1-based column where the value of a "key = value" line starts, or 0.
func valueColumn(line string) int {
	eq := strings.IndexByte(line, '=')
	if eq < 0 {
		return 0
	}
	rest := line[eq+1:]
	return eq + 1 + len(rest) - len(strings.TrimLeft(rest, " \t")) + 1
}

// tomlTypeNames are MetaData.Type's names, for messages.
var tomlTypeNames = map[string]string{"String": "a string", "Integer": "an integer", "Float": "a number",
	"Bool": "a boolean", "Array": "a list", "ArrayHash": "a list of tables", "Datetime": "a date",
	"DatetimeLocal": "a date", "DateLocal": "a date", "TimeLocal": "a time"}

// checkTables reports the first of keys that is present but not a table: the decoder
// leaves a table-typed field empty when the file gives a string, which would otherwise
// silently drop `variables = "x"`.
func (d *tomlDoc) checkTables(keys ...string) error {
	for _, k := range keys {
		if !d.isDefined(k) {
			continue // Type would make a string of the key to say so
		}
		t := d.keyType(k)
		if t == "" || t == "Hash" {
			continue
		}
		name, ok := tomlTypeNames[t]
		if !ok {
			name = t
		}
		return d.valueError(k, "expected a table, found %s", name)
	}
	return nil
}

// isDefined is MetaData.IsDefined, of the values simpleTOML decoded if it did.
func (d *tomlDoc) isDefined(key ...string) bool {
	if d.simple == nil {
		return d.md.IsDefined(key...)
	}
	var v any = d.simple
	for _, k := range key {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = m[k]; !ok {
			return false
		}
	}
	return true
}

// keyType is MetaData.Type of a top-level key, of the values simpleTOML decoded if it
// did (strings, arrays and tables only).
func (d *tomlDoc) keyType(k string) string {
	if d.simple == nil {
		return d.md.Type(k)
	}
	switch d.simple[k].(type) {
	case map[string]any:
		return "Hash"
	case []any:
		return "Array"
	case string:
		return "String"
	}
	return ""
}
