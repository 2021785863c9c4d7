package element

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// Option is one project option, declared as [options.NAME] in project.toml.
type Option struct {
	Name        string
	Type        string // bool, enum, flags or arch
	Description string
	Values      []string // enum, flags, arch: what it may take (bool: none)
	Default     string   // as a value of the option (flags: comma-separated, in Values' order)
	Variable    string   // the project variable it is exported as; "" for none
}

// optionFile is the TOML shape of [options.NAME].
type optionFile struct {
	Type        string   `toml:"type"`
	Description string   `toml:"description"`
	Values      []string `toml:"values"`
	Default     any      `toml:"default"`
	Variable    string   `toml:"variable"`
}

var optionKeys = []string{"type", "description", "values", "default", "variable"}

var optionTypes = []string{"bool", "enum", "flags", "arch"}

var optionNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// OptionSetting is an option's value given from outside the project: on the command
// line (--option), in the user configuration ([projects.NAME.options]), or by whatever
// else loads the project with values of its own. File and Line say where, for errors
// ("" for the command line). Written is the value as a junction's file writes it when
// Value is that with its variables expanded ("" otherwise), for errors.
type OptionSetting struct {
	Name, Value string
	File        string
	Line        int
	Written     string
}

func (s OptionSetting) String() string {
	if s.Written != "" {
		return fmt.Sprintf("%s=%s (expanded to %q)", s.Name, s.Written, s.Value)
	}
	return s.Name + "=" + s.Value
}

// error reports a bad setting: at its file and line, or as --option NAME=VALUE.
func (s OptionSetting) error(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if s.File == "" {
		return &ProjectError{Msg: fmt.Sprintf("--option %s: %s", s, msg)}
	}
	return &ProjectError{File: s.File, Line: s.Line, Msg: fmt.Sprintf("option %s: %s", s, msg)}
}

// allowed is every value o may take.
func (o *Option) allowed() []string {
	if o.Type == "bool" {
		return []string{"true", "false"}
	}
	return o.Values
}

// hostArch is the host's architecture as uname -m names it, as BuildStream's arch
// option does (x86_64, aarch64, i686, armv7l, ppc64le, …).
func hostArch() string { return goArchToUname(runtime.GOARCH) }

// goArchToUname maps Go's GOARCH to the machine name uname reports.
func goArchToUname(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	case "386":
		return "i686"
	case "arm":
		return "armv7l"
	}
	return goarch // ppc64le, s390x, riscv64, mips64 … are the same in both
}

// parseOptions checks project.toml's [options] and returns them by name.
func parseOptions(doc *tomlDoc, files map[string]optionFile) (map[string]*Option, error) {
	opts := make(map[string]*Option, len(files))
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f := files[name]
		path := "options." + name
		if !optionNameRE.MatchString(name) || slices.Contains(condKeywords, name) {
			return nil, &ProjectError{File: doc.display, Line: doc.lineOf(path), Text: doc.line(doc.lineOf(path)),
				Msg: fmt.Sprintf("option name %q is not valid: use lowercase letters, digits, '_' and '-', starting with a letter, and none of %s", name, strings.Join(condKeywords, ", "))}
		}
		o := &Option{Name: name, Type: f.Type, Description: f.Description, Values: f.Values, Variable: f.Variable}
		if f.Type == "" {
			return nil, &ProjectError{File: doc.display, Line: doc.lineOf(path), Msg: fmt.Sprintf("option %q has no type", name), Hint: "types: " + strings.Join(optionTypes, ", ")}
		}
		if !slices.Contains(optionTypes, f.Type) {
			return nil, doc.valueError(path+".type", "unknown option type %q%s; types: %s", f.Type, didYouMean(f.Type, optionTypes), strings.Join(optionTypes, ", "))
		}
		switch {
		case f.Type == "bool" && f.Values != nil:
			return nil, doc.valueError(path+".values", "a bool option takes no values: it is true or false")
		case f.Type != "bool" && len(f.Values) == 0:
			return nil, doc.valueError(path, "a %s option needs a list of values", f.Type)
		}
		for i, v := range f.Values {
			switch {
			case v == "" || strings.ContainsAny(v, ",\"'"):
				return nil, doc.valueError(path+".values", "value %d %q is not valid: it must be non-empty, without ',' or quotes", i+1, v)
			case slices.Contains(f.Values[:i], v):
				return nil, doc.valueError(path+".values", "%q is listed twice", v)
			}
		}
		def, err := optionDefault(doc, o, f.Default)
		if err != nil {
			return nil, err
		}
		o.Default = def
		if o.Variable != "" && !varNameRE.MatchString(o.Variable) {
			return nil, doc.valueError(path+".variable", "%q is not a valid variable name", o.Variable)
		}
		if slices.Contains(protectedVariables, o.Variable) {
			return nil, doc.valueError(path+".variable", "%%{%s} is set by gantry and cannot be an option's variable", o.Variable)
		}
		opts[name] = o
	}
	return opts, nil
}

// optionDefault is o's default as a value, from the file's default (nil when absent).
func optionDefault(doc *tomlDoc, o *Option, v any) (string, error) {
	path := "options." + o.Name + ".default"
	switch o.Type {
	case "arch":
		if v != nil {
			return "", doc.valueError(path, "an arch option takes no default: it is the host's architecture (%s) unless set with --option %s=VALUE", hostArch(), o.Name)
		}
		return "", nil // resolveOptions takes the host's
	case "bool":
		switch b := v.(type) {
		case nil:
			return "false", nil
		case bool:
			return fmt.Sprint(b), nil
		}
		return "", doc.valueError(path, "expected true or false, found %s", tomlTypeName(v))
	case "enum":
		s, ok := v.(string)
		if v == nil {
			return "", doc.valueError("options."+o.Name, "an enum option needs a default, one of %s", strings.Join(o.Values, ", "))
		}
		if !ok {
			return "", doc.valueError(path, "expected a string, one of %s, found %s", strings.Join(o.Values, ", "), tomlTypeName(v))
		}
		if !slices.Contains(o.Values, s) {
			return "", doc.valueError(path, "%q is not one of the option's values%s: %s", s, didYouMean(s, o.Values), strings.Join(o.Values, ", "))
		}
		return s, nil
	}
	// flags: a list of its values
	if v == nil {
		return "", nil
	}
	list, ok := v.([]any)
	if !ok {
		return "", doc.valueError(path, "expected a list of flags, found %s", tomlTypeName(v))
	}
	flags := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return "", doc.valueError(path, "expected a list of strings, found %s in it", tomlTypeName(x))
		}
		if !slices.Contains(o.Values, s) {
			return "", doc.valueError(path, "%q is not one of the option's values%s: %s", s, didYouMean(s, o.Values), strings.Join(o.Values, ", "))
		}
		flags = append(flags, s)
	}
	return canonicalFlags(o, flags), nil
}

// canonicalFlags is a set of flags as a value: each once, in the declared order, joined
// with commas, so that the same set is always the same value.
func canonicalFlags(o *Option, flags []string) string {
	var out []string
	for _, v := range o.Values {
		if slices.Contains(flags, v) {
			out = append(out, v)
		}
	}
	return strings.Join(out, ",")
}

// settingValue checks a setting's value for o and returns it as the option's value.
func settingValue(o *Option, s OptionSetting) (string, error) {
	switch o.Type {
	case "bool":
		switch s.Value {
		case "true", "True":
			return "true", nil
		case "false", "False":
			return "false", nil
		}
		return "", s.error("option %q is a bool: expected true or false", o.Name)
	case "flags":
		if s.Value == "" {
			return "", nil
		}
		flags := strings.Split(s.Value, ",")
		for _, f := range flags {
			f = strings.TrimSpace(f)
			if !slices.Contains(o.Values, f) {
				return "", s.error("%q is not a flag of option %q%s: expected a comma-separated list of %s", f, o.Name, didYouMean(f, o.Values), strings.Join(o.Values, ", "))
			}
		}
		for i := range flags {
			flags[i] = strings.TrimSpace(flags[i])
		}
		return canonicalFlags(o, flags), nil
	}
	if !slices.Contains(o.Values, s.Value) {
		return "", s.error("%q is not a value of option %q%s: expected one of %s", s.Value, o.Name, didYouMean(s.Value, o.Values), strings.Join(o.Values, ", "))
	}
	return s.Value, nil
}

// resolveOptions is every declared option's value: its default, overridden by the
// settings, weakest layer first (the user configuration, then the command line). A
// setting of an undeclared option is an error with a did-you-mean.
func resolveOptions(opts map[string]*Option, layers ...[]OptionSetting) (map[string]string, error) {
	values := make(map[string]string, len(opts))
	set := map[string]bool{}
	for name, o := range opts {
		values[name] = o.Default
	}
	for _, layer := range layers {
		for _, s := range layer {
			o, ok := opts[s.Name]
			if !ok {
				return nil, s.error("unknown option %q%s; %s", s.Name, didYouMean(s.Name, sortedKeys(opts)), declaredOptions(opts))
			}
			v, err := settingValue(o, s)
			if err != nil {
				return nil, err
			}
			values[s.Name], set[s.Name] = v, true
		}
	}
	for name, o := range opts {
		if o.Type == "arch" && !set[name] {
			host := hostArch()
			if !slices.Contains(o.Values, host) {
				return nil, &ProjectError{File: ProjectFile, Msg: fmt.Sprintf("option %q: the host's architecture %q is not one of its values (%s)", name, host, strings.Join(o.Values, ", ")),
					Hint: fmt.Sprintf("set it with --option %s=VALUE, or add %q to its values", name, host)}
			}
			values[name] = host
		}
	}
	return values, nil
}

// optionsDigest names a set of option values (or of aliases), for the parse cache: a
// file whose parse read options is reused only under the values it was parsed with.
func optionsDigest(values map[string]string) string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(values)) {
		fmt.Fprintf(h, "%d:%s%d:%s", len(name), name, len(values[name]), values[name])
	}
	return string(h.Sum(nil))
}

// OptionNames is the project's options, sorted.
func (p *Project) OptionNames() []string { return sortedKeys(p.Options) }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// blockCondition reads the condition of the [[if]] block at path (a table t of doc) and
// reports whether it holds under values. Errors point into the condition's text.
func blockCondition(t *table, opts map[string]*Option, values map[string]string) (bool, error) {
	d := t.doc
	key := t.keyPath("condition")
	if !t.has("condition") {
		line := d.lineOf(t.path)
		return false, &ProjectError{File: d.display, Line: line, Text: d.line(line), Msg: fmt.Sprintf("[[if]] block %s has no condition", t.path),
			Hint: `add a line like condition = 'arch == "aarch64" and debug'`}
	}
	s, err := t.str("condition")
	if err != nil {
		return false, err
	}
	c, err := parseCondition(s, opts)
	if err != nil {
		ce := err.(*conditionError)
		line := d.lineOf(key)
		col := 0
		if text := d.line(line); line > 0 && valueColumn(text) > 0 {
			col = valueColumn(text) + 1 + ce.Pos // past the opening quote
			if strings.HasPrefix(text[valueColumn(text)-1:], `"""`) || strings.HasPrefix(text[valueColumn(text)-1:], `'''`) {
				col = 0 // a multi-line string: the column is not on this line
			}
		}
		return false, &ProjectError{File: d.display, Line: line, Col: col, Text: d.line(line), Msg: fmt.Sprintf("in the condition of %s: %s", t.path, ce.Msg)}
	}
	return c.eval(values), nil
}

// projectBlockKeys are what a [[if]] block of project.toml may set.
var projectBlockKeys = []string{"condition", "variables", "environment"}

// applyProjectBlocks merges the project's [[if]] blocks whose condition holds into its
// variables and environment, key by key, the block winning.
func (p *Project) applyProjectBlocks(doc *tomlDoc, blocks []toml.Primitive) error {
	for i, prim := range blocks {
		t, err := doc.table(fmt.Sprintf("if[%d]", i), prim)
		if err != nil {
			return err
		}
		holds, err := blockCondition(t, p.Options, p.OptionValues)
		if err != nil {
			return err
		}
		vars, err := t.stringMap("variables")
		if err != nil {
			return err
		}
		env, err := t.stringMap("environment")
		if err != nil {
			return err
		}
		if err := t.done(projectBlockKeys); err != nil {
			return err
		}
		if err := checkVariableNames(doc, t.keyPath("variables"), vars); err != nil {
			return err
		}
		if err := checkEnvironment(doc, t.keyPath("environment"), env); err != nil {
			return err
		}
		if holds {
			p.Variables = merge(p.Variables, vars)
			p.Environment = merge(p.Environment, env)
		}
	}
	return nil
}

// stringMap reads the table at k as strings; nil when absent.
func (t *table) stringMap(k string) (map[string]string, error) {
	t.use(k)
	v, ok := t.m[k]
	if !ok {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, t.doc.valueError(t.keyPath(k), "expected a table, found %s", tomlTypeName(v))
	}
	out := make(map[string]string, len(m))
	for _, name := range sortedKeys(m) {
		x := m[name]
		s, ok := x.(string)
		if !ok {
			return nil, t.doc.valueError(t.keyPath(k)+"."+name, "expected a string, found %s", tomlTypeName(x))
		}
		out[name] = s
	}
	return out, nil
}

// exportOptionVariables sets each option's variable to its value. A variable that
// project.toml's [variables] also sets is an error: which should win is not clear.
func (p *Project) exportOptionVariables(doc *tomlDoc) error {
	for _, name := range sortedKeys(p.Options) {
		o := p.Options[name]
		if o.Variable == "" {
			continue
		}
		if _, ok := p.Variables[o.Variable]; ok {
			return doc.valueError("variables."+o.Variable, "%%{%s} is option %q's variable: remove it from [variables] (the option sets it)", o.Variable, name)
		}
		p.Variables = merge(p.Variables, map[string]string{o.Variable: p.OptionValues[name]})
	}
	return nil
}
