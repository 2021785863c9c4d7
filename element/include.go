package element

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gantry-build/gantry/internal/fileid"
	"github.com/gantry-build/gantry/source"
)

// includeKeys are what an included file may set.
var includeKeys = []string{"include", "variables", "environment", "config", "depends", "build-depends", "runtime-depends"}

var dependKeys = []string{"depends", "build-depends", "runtime-depends"}

// includedFile is a file an element file included (directly or through another include),
// by its path under the root of the project it was read from, with its identity when it
// was read: the parse cache reuses the element's parse only while every one is
// unchanged. Via is the junction path it was included through, from the element's own
// project ("" for a file of that project), and Root the root of the project Via held
// then ("" for the element's own): the parse is reused only while Via holds the same.
type includedFile struct {
	Name      string
	ID        fileid.ID
	Via, Root string
}

// includeSource is a project included files are read from: the including element's (or
// project.toml's) own (via "") or one of the projects its includes name through
// junctions (JUNCTION:PATH).
type includeSource struct {
	via  string // the junction path from the including file's own project: "", "base.toml:"
	root string // its absolute root
	show string // its root as errors name it ("" for the top project's)
	name string // its project name
}

// includeResolver gives the project a junction path (via, "base.toml:") written from
// the including element's own project holds; step says what needs it, for a cycle
// ("elements/app.toml includes base.toml:flags.toml"). Its errors are returned as they
// are but an includeError, which the includer puts at the include's line.
type includeResolver func(via, step string) (*includeSource, error)

// includeError is why a JUNCTION:PATH include's junction path names no project: put at
// the line of the include that named it.
type includeError struct{ msg, hint string }

func (e *includeError) Error() string { return e.msg }

// layering says whether an element file's plain table must be layered (layer) before it
// is read: it includes files, or composes a dependency list or a config list with
// { prepend, append }.
func layering(m map[string]any) bool {
	if _, ok := m["include"]; ok {
		return true
	}
	for _, k := range dependKeys {
		if _, ok := m[k].(map[string]any); ok {
			return true
		}
	}
	if c, ok := m["config"].(map[string]any); ok {
		for _, v := range c {
			if _, ok := v.(map[string]any); ok {
				return true
			}
		}
	}
	return false
}

// includer reads the files an element file or project.toml includes, from its own
// project (src) and through junctions (resolve), and checks what they (and
// project.toml's [kinds.NAME]) say for kind.
type includer struct {
	src     includeSource   // the including file's own project
	resolve includeResolver // nil where JUNCTION:PATH includes cannot be read
	roots   map[string]*os.Root
	kind    *Kind
	files   []includedFile
	prefix  string              // key paths' prefix in errors: "kinds.manual." for a kind's defaults
	from    map[string]*tomlDoc // key path -> the file that set it last
}

// layer is an element file's table m (doc) over what it includes, weakest first: the
// project's defaults for its kind (defaults, checked by checkKindDefaults), each
// included file (over what it includes) in the order written, then the file itself.
// Tables merge key by key, the later layer winning; a list is replaced whole unless the
// later layer writes it { prepend = [...], append = [...] }, which composes it with the
// list before (a config list with no list before composes with the kind's default).
func (in *includer) layer(doc *tomlDoc, m, defaults map[string]any) (map[string]any, error) {
	if err := checkTopKeys(doc, m, elementKeys); err != nil {
		return nil, err
	}
	// The defaults' compositions compose with the kind's preset: never an error.
	base, err := mergeLayer(nil, defaults, doc, in.kind)
	if err != nil {
		return nil, err
	}
	out, err := in.file(doc, &in.src, m, base, []string{doc.display})
	in.close()
	for path, d := range in.from {
		if d != doc {
			if doc.from == nil {
				doc.from = map[string]*tomlDoc{}
			}
			doc.from[path] = d
		}
	}
	return out, err
}

// record notes that doc's table m set its keys, for errors found after layering.
func (in *includer) record(doc *tomlDoc, m map[string]any) {
	if in.from == nil {
		in.from = map[string]*tomlDoc{}
	}
	for k, v := range m {
		if t, ok := v.(map[string]any); ok && (k == "variables" || k == "environment" || k == "config") {
			for kk := range t {
				in.from[k+"."+kk] = doc
			}
			continue
		}
		in.from[k] = doc
	}
}

// checkTopKeys reports the first key of m, in name order, not among allowed.
func checkTopKeys(doc *tomlDoc, m map[string]any, allowed []string) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, k) {
			return doc.keyError(k, k, allowed)
		}
	}
	return nil
}

// close closes the roots included files were read through.
func (in *includer) close() {
	for _, r := range in.roots {
		r.Close()
	}
	in.roots = nil
}

// file layers one file's table m (of the project src), over what it includes, on base:
// what the layers before it made (the kind's project defaults, the files included
// before it). stack is the chain of files that included it, for cycles.
func (in *includer) file(doc *tomlDoc, src *includeSource, m, base map[string]any, stack []string) (map[string]any, error) {
	if err := in.check(doc, m); err != nil {
		return nil, err
	}
	if v, ok := m["include"]; ok {
		names, ok := plainStrings(v)
		if !ok {
			return nil, doc.valueError("include", "expected a list of paths, found %s", tomlTypeName(v))
		}
		for _, name := range names {
			var err error
			if base, err = in.read(doc, src, name, stack, base); err != nil {
				return nil, err
			}
		}
	}
	own := maps.Clone(m)
	delete(own, "include")
	in.record(doc, own)
	return mergeLayer(base, own, doc, in.kind)
}

// read reads the file name that doc (of the project src) includes and layers it (over
// what it includes) on base: a list it composes composes with what the layers before
// it made.
func (in *includer) read(doc *tomlDoc, src *includeSource, name string, stack []string, base map[string]any) (map[string]any, error) {
	incDoc, from, m, err := in.open(doc, src, name, stack, includeKeys)
	if err != nil {
		return nil, err
	}
	return in.file(incDoc, from, m, base, append(slices.Clone(stack), incDoc.display))
}

// open reads and decodes the file name that doc (of the project src) includes, whose
// top-level keys must be among allowed; stack is the chain of files including it, for
// cycles. It returns the project the file was read from: src, or for JUNCTION:PATH the
// project the junction path (of src's project) holds.
func (in *includer) open(doc *tomlDoc, src *includeSource, name string, stack, allowed []string) (*tomlDoc, *includeSource, map[string]any, error) {
	from, rel, junctions := src, name, ""
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		junctions, rel = name[:i+1], name[i+1:]
		var err error
		if from, err = in.through(doc, src, name, junctions); err != nil {
			return nil, nil, nil, err
		}
	}
	clean := path.Clean(rel)
	if path.IsAbs(rel) || clean == ".." || strings.HasPrefix(clean, "../") {
		return nil, nil, nil, doc.valueErrorHint("include", includeHint(junctions),
			"%q is outside the project", name)
	}
	display := path.Join(from.show, clean)
	if i := slices.Index(stack, display); i >= 0 {
		return nil, nil, nil, doc.valueError("include", "include cycle: %s", strings.Join(append(slices.Clone(stack[i:]), display), " -> "))
	}
	r, err := in.rootOf(from.root)
	if err != nil {
		return nil, nil, nil, &ProjectError{File: doc.display, Msg: fmt.Sprintf("cannot open the project to read its includes: %v", errors.Unwrap(err))}
	}
	fi, statErr := r.Stat(filepath.FromSlash(clean))
	data, err := r.ReadFile(filepath.FromSlash(clean))
	switch {
	case errors.Is(err, fs.ErrNotExist) && junctions != "":
		return nil, nil, nil, doc.valueErrorHint("include", includeHint(junctions),
			"included file %q does not exist in project %s (no file %s)%s", name, from.name, display, didYouMean(name, prefixed(junctions, siblings(r, clean))))
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, nil, doc.valueErrorHint("include", includeHint(junctions),
			"included file %q does not exist%s", name, didYouMean(clean, siblings(r, clean)))
	case source.IsEscape(err):
		return nil, nil, nil, doc.valueErrorHint("include", includeHint(junctions),
			"%q is outside the project: it goes through a symbolic link that leads out", name)
	case err != nil:
		return nil, nil, nil, doc.valueError("include", "cannot read included file %q: %v", name, errors.Unwrap(err))
	}
	id := fileid.ID{}
	if statErr == nil {
		id, _ = fileid.FromInfo(fi)
	}
	inc := includedFile{Name: clean, ID: id, Via: from.via}
	if from.via != "" {
		inc.Root = from.root
	}
	in.files = append(in.files, inc)
	var plain any
	incDoc, err := decodeTOMLBytes(data, display, &plain)
	if err != nil {
		return nil, nil, nil, err
	}
	m, _ := plain.(map[string]any)
	if err := checkTopKeys(incDoc, m, allowed); err != nil {
		return nil, nil, nil, err
	}
	return incDoc, from, m, nil
}

// through is the project that the junction path junctions ("base.toml:"), written in a
// file of src's project (doc, including name), holds.
func (in *includer) through(doc *tomlDoc, src *includeSource, name, junctions string) (*includeSource, error) {
	for part := range strings.SplitSeq(strings.TrimSuffix(junctions, ":"), ":") {
		if err := checkElementPart(part); err != nil {
			return nil, doc.valueErrorHint("include", includeHint(junctions), "%q: %v", name, err)
		}
	}
	if in.resolve == nil {
		return nil, doc.valueError("include", "%q: a JUNCTION:PATH include cannot be read here", name)
	}
	from, err := in.resolve(src.via+junctions, doc.display+" includes "+name)
	var ie *includeError
	if errors.As(err, &ie) {
		hint := ie.hint
		if hint == "" {
			hint = includeHint(junctions)
		}
		return nil, doc.valueErrorHint("include", hint, "%q: %s", name, ie.msg)
	}
	return from, err
}

// includeHint is the hint for an include error: where paths are read from.
func includeHint(junctions string) string {
	if junctions != "" {
		return "in JUNCTION:PATH, PATH is relative to the root of the project the junction holds"
	}
	return "include paths are relative to the project root"
}

// rootOf is the project root dir opened, once per includer.
func (in *includer) rootOf(dir string) (*os.Root, error) {
	if r, ok := in.roots[dir]; ok {
		return r, nil
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	if in.roots == nil {
		in.roots = map[string]*os.Root{}
	}
	in.roots[dir] = r
	return r, nil
}

// prefixed is names each with prefix before it.
func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

// siblings are the .toml files in the directory of the project path name (under r), as
// paths from the project root, for a did-you-mean.
func siblings(r *os.Root, name string) []string {
	dir := path.Dir(name)
	f, err := r.Open(filepath.FromSlash(dir))
	if err != nil {
		return nil
	}
	defer f.Close()
	entries, _ := f.ReadDir(-1)
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".toml") && !e.IsDir() {
			out = append(out, path.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out
}

// check checks the types of what one file (element or included) says that layering
// reads, in that file: variables and environment, dependency lists (or their
// compositions) and config keys and lists.
func (in *includer) check(doc *tomlDoc, m map[string]any) error {
	top := &table{doc: doc, path: strings.TrimSuffix(in.prefix, "."), m: m}
	for _, k := range []string{"variables", "environment"} {
		vars, err := top.stringMap(k)
		if err != nil {
			return err
		}
		check := checkVariableNames
		if k == "environment" {
			check = checkEnvironment
		}
		if err := check(doc, in.prefix+k, vars); err != nil {
			return err
		}
	}
	for _, k := range dependKeys {
		v, ok := m[k]
		if !ok {
			continue
		}
		list, err := listOrComposition(doc, in.prefix+k, v)
		if err != nil {
			return err
		}
		for _, d := range list {
			if err := checkElementName(d); err != nil {
				return doc.valueError(in.prefix+k, "%v", err)
			}
		}
	}
	v, ok := m["config"]
	if !ok {
		return nil
	}
	c, ok := v.(map[string]any)
	if !ok {
		return doc.valueError(in.prefix+"config", "expected a table, found %s", tomlTypeName(v))
	}
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if !slices.Contains(in.kind.ConfigKeys, k) {
			if len(in.kind.ConfigKeys) == 0 {
				return &ProjectError{File: doc.display, Line: doc.lineOf(in.prefix + "config." + k), Msg: fmt.Sprintf("kind %q takes no [config]", in.kind.Name)}
			}
			return doc.keyError(in.prefix+"config."+k, k, in.kind.ConfigKeys)
		}
		if _, isList := c[k].([]any); isList || in.kind.Commands {
			if _, err := listOrComposition(doc, in.prefix+"config."+k, c[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// listOrComposition checks a list of strings or a { prepend, append } table of them,
// and returns every string it holds.
func listOrComposition(doc *tomlDoc, path string, v any) ([]string, error) {
	if c, ok := v.(map[string]any); ok {
		pre, post, err := composition(doc, path, c)
		return append(pre, post...), err
	}
	list, ok := plainStrings(v)
	if !ok {
		return nil, doc.valueError(path, "expected a list of strings or { prepend = [...], append = [...] }, found %s", tomlTypeName(v))
	}
	return list, nil
}

// mergeLayer is over (a file's table, doc) layered on base: variables, environment
// and config key by key, over winning; a list replaced, or composed with base's when
// over writes it { prepend, append } (composeList); any other key replaced.
func mergeLayer(base, over map[string]any, doc *tomlDoc, kind *Kind) (map[string]any, error) {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range over {
		switch k {
		case "variables", "environment":
			t, _ := out[k].(map[string]any)
			t = maps.Clone(t)
			if t == nil {
				t = map[string]any{}
			}
			maps.Copy(t, v.(map[string]any))
			out[k] = t
		case "config":
			base, _ := out[k].(map[string]any)
			var err error
			if out[k], err = mergeConfig(doc, "config", base, v.(map[string]any), kind); err != nil {
				return nil, err
			}
		case "depends", "build-depends", "runtime-depends":
			if c, ok := v.(map[string]any); ok {
				var err error
				if v, err = composeList(doc, k, c, out[k], nil); err != nil {
					return nil, err
				}
			}
			out[k] = v
		default:
			out[k] = v
		}
	}
	return out, nil
}

// mergeConfig is the config table over (written at path in doc) layered on base, key
// by key, over winning: a list over writes { prepend, append } composes with base's,
// else with the kind's default (composeList). A kind's table keys (Kind.TableKeys: a
// junction's [config.options], [config.overrides]) merge a level deeper: an [[if]]
// block that sets one option keeps the others.
func mergeConfig(doc *tomlDoc, path string, base, over map[string]any, kind *Kind) (map[string]any, error) {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]any{}
	}
	for _, k := range slices.Sorted(maps.Keys(over)) {
		v := over[k]
		if slices.Contains(kind.TableKeys, k) {
			if c, ok := v.(map[string]any); ok {
				if b, ok := out[k].(map[string]any); ok {
					m := maps.Clone(b)
					maps.Copy(m, c)
					v = m
				}
			}
		} else if c, ok := v.(map[string]any); ok {
			var err error
			if v, err = composeList(doc, path+"."+k, c, out[k], kind.DefaultCommands[k]); err != nil {
				return nil, err
			}
		}
		out[k] = v
	}
	return out, nil
}

// valueErrorHint is valueError with a hint.
func (d *tomlDoc) valueErrorHint(path, hint, format string, args ...any) error {
	err := d.valueError(path, format, args...).(*ProjectError)
	err.Hint = hint
	return err
}

// kindDefaultKeys are what project.toml's [kinds.NAME] may set.
var kindDefaultKeys = []string{"variables", "environment", "config"}

// checkKindDefaults checks project.toml's [kinds.NAME] tables: a known kind each,
// holding variables, environment and config as an element file of the kind would.
func checkKindDefaults(doc *tomlDoc, kinds map[string]map[string]any) error {
	for _, name := range slices.Sorted(maps.Keys(kinds)) {
		kind, ok := LookupKind(name)
		if !ok || name == junctionKind {
			return doc.keyError("kinds."+name, name, slices.DeleteFunc(kindNames(), func(k string) bool { return k == junctionKind }))
		}
		m := kinds[name]
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if !slices.Contains(kindDefaultKeys, k) {
				return doc.keyError("kinds."+name+"."+k, k, kindDefaultKeys)
			}
		}
		in := &includer{kind: kind, prefix: "kinds." + name + "."}
		if err := in.check(doc, m); err != nil {
			return err
		}
	}
	return nil
}

// kindDigest is a digest of a kind's project defaults for the parse cache: an element
// file of the kind is parsed over them.
func kindDigest(defaults map[string]any) string {
	data, err := json.Marshal(defaults) // sorted keys
	if err != nil {
		panic("element: encoding the kind defaults: " + err.Error()) // only plain values inside
	}
	sum := sha256.Sum256(data)
	return string(sum[:])
}

// projectIncludeKeys are what a file project.toml includes may set.
var projectIncludeKeys = []string{"include", "variables", "environment", "kinds"}

// includeIntoProject layers what project.toml (doc) includes under p's variables,
// environment and kind defaults, as element files' includes are layered: each
// included file over what it includes, in the order written, project.toml winning.
func includeIntoProject(doc *tomlDoc, p *Project, resolve includeResolver) error {
	if len(p.Include) == 0 {
		return nil
	}
	in := &includer{src: includeSource{root: p.Root, name: p.Name}, resolve: resolve}
	defer in.close()
	var vars, env map[string]string
	kinds := map[string]map[string]any{}
	var walk func(doc *tomlDoc, src *includeSource, names, stack []string) error
	walk = func(doc *tomlDoc, src *includeSource, names, stack []string) error {
		for _, name := range names {
			if resolve == nil && strings.Contains(name, ":") {
				p.junctionIncludes = true // read in the second pass (loadProjectIn)
				continue
			}
			incDoc, from, m, err := in.open(doc, src, name, stack, projectIncludeKeys)
			if err != nil {
				return err
			}
			inner := append(slices.Clone(stack), incDoc.display)
			if v, ok := m["include"]; ok {
				names, ok := plainStrings(v)
				if !ok {
					return incDoc.valueError("include", "expected a list of paths, found %s", tomlTypeName(v))
				}
				if err := walk(incDoc, from, names, inner); err != nil {
					return err
				}
			}
			if err := in.check(incDoc, m); err != nil { // variables and environment
				return err
			}
			inc := map[string]map[string]any{}
			if v, ok := m["kinds"]; ok {
				t, ok := v.(map[string]any)
				if !ok {
					return incDoc.valueError("kinds", "expected a table, found %s", tomlTypeName(v))
				}
				for name, d := range t {
					if inc[name], ok = d.(map[string]any); !ok {
						return incDoc.valueError("kinds."+name, "expected a table, found %s", tomlTypeName(d))
					}
				}
				if err := checkKindDefaults(incDoc, inc); err != nil {
					return err
				}
			}
			if err := layerKinds(kinds, inc, incDoc); err != nil {
				return err
			}
			incVars, _ := plainStringMap(m["variables"]) // checked
			incEnv, _ := plainStringMap(m["environment"])
			vars, env = merge(vars, incVars), merge(env, incEnv)
		}
		return nil
	}
	if err := walk(doc, &in.src, p.Include, []string{ProjectFile}); err != nil {
		return err
	}
	if err := layerKinds(kinds, p.Kinds, doc); err != nil {
		return err
	}
	if len(kinds) > 0 {
		p.Kinds = kinds
	}
	p.Variables = merge(vars, p.Variables)
	p.Environment = merge(env, p.Environment)
	return nil
}

// layerKinds layers the kind defaults over on base, kind by kind (mergeLayer).
func layerKinds(base, over map[string]map[string]any, doc *tomlDoc) error {
	for _, name := range slices.Sorted(maps.Keys(over)) {
		kind, _ := LookupKind(name) // checked
		var err error
		if base[name], err = mergeLayer(base[name], over[name], doc, kind); err != nil {
			return err
		}
	}
	return nil
}

// locate is where the value at path was written, for an error found after loading:
// the included file that set it, unless a [[if]] block of d's file set it after, else
// d's file; line 0 when not found.
func (d *tomlDoc) locate(path string) (file string, line int, text string) {
	if o, ok := d.from[path]; ok && d.moved[path] == "" { // a [[if]] block wins
		d = o
	}
	line = d.lineOf(path)
	return d.display, line, d.line(line)
}
