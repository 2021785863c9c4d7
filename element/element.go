package element

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/gantry-build/gantry/internal/fileid"
	"github.com/gantry-build/gantry/source"
)

// elementFile is the TOML shape of an element file.
type elementFile struct {
	Kind           string            `toml:"kind"`
	Description    string            `toml:"description"`
	Depends        []string          `toml:"depends"`
	BuildDepends   []string          `toml:"build-depends"`
	RuntimeDepends []string          `toml:"runtime-depends"`
	Pool           string            `toml:"pool"`
	Variables      map[string]string `toml:"variables"`
	Environment    map[string]string `toml:"environment"`
	Sources        []toml.Primitive  `toml:"sources"`
	Config         toml.Primitive    `toml:"config"`
	If             []toml.Primitive  `toml:"if"`
	Include        []string          `toml:"include"`
	Public         toml.Primitive    `toml:"public"`
	// RemoteExecution is read by hand (parseElementRemoteExecution).
	RemoteExecution map[string]any `toml:"remote-execution"`
}

var elementKeys = []string{"include", "kind", "description", "depends", "build-depends", "runtime-depends", "pool", "variables", "environment", "sources", "config", "if", "public", "remote-execution"}

// Config is an element's kind-specific configuration, unexpanded.
type Config struct {
	Commands map[string][]string // manual-like kinds: step -> commands
	Source   string              // import: directory of the staged sources to import
	Target   string              // import: where in the artifact to put them
	Include  []string            // compose, filter: split domains to keep (empty = all)
	Exclude  []string            // compose, filter: split domains to drop
	// Integrate (compose): run the staged elements' integration commands; nil = true.
	Integrate *bool
	// Orphans (compose, filter): keep files no domain claims; nil = the kind's default.
	Orphans *bool
	Options []OptionSetting // junction: the option settings of the project it holds
	// Overrides (junction): names in the project it holds -> the parent's names for them.
	Overrides []Override
}

// Element is one loaded element. After Load its fields are never modified except the
// graph links and the keys, which the graph sets (and a non-strict session's
// ResolveNonStrict resets: Key, Reused).
type Element struct {
	Name           string // path under element-path: "base/gcc.toml"; in a sub-project, after its junction path: "sdk.toml:base/gcc.toml"
	File           string // path shown to users: "elements/base/gcc.toml"
	Kind           *Kind
	Description    string
	Depends        []string
	BuildDepends   []string
	RuntimeDepends []string
	Pool           string
	Sources        []source.Spec
	Config         Config
	// RemoteExecution is the element's [remote-execution]: its platform properties and
	// action timeout under remote execution. Where it builds, not what: in no key.
	RemoteExecution ElementRemoteExecution

	public Public            // [public] as written (public.go)
	vars   map[string]string // project variables + kind defaults + element variables (raw)
	env    map[string]string // project environment + element environment (raw)
	// doc is the parsed file while it loads (nil once loaded, or when the parse cache
	// had it): error positions after that come from document(), which reads root/rel.
	doc       *tomlDoc
	root, rel string
	scope     *optionScope  // the options its file was read with, for document()
	origin    includeOrigin // where its includes were read from, for document()
	// project is the project the element belongs to (a junction's sub-project, or the
	// graph's), local its name there (Name without the junction path).
	project *Project
	local   string

	// Set by the graph.
	BuildDeps []*Element // depends ∪ build-depends, in declaration order
	RunDeps   []*Element // depends ∪ runtime-depends, in declaration order
	Key       string     // full cache key; "" when some source (here or below) has no ref
	// StrictKey is the key strict mode gives it; Key differs from it only in a non-strict
	// session (ResolveNonStrict): an artifact found by WeakKey, or a build against those.
	StrictKey string
	// WeakKey is the key of its own inputs with only the names of what its build stages
	// (weakKey): what a non-strict session looks its artifacts up by.
	WeakKey string
	// Reused: Key is an artifact a non-strict session found by WeakKey, built against
	// other dependencies than the current ones.
	Reused    bool
	NoRef     bool   // some source of this element itself has no ref
	Workspace string // the directory of its open workspace, which it builds from; "" for none

	position   int               // index in Graph.Order
	resolved   *Resolved         // config and environment expanded with keyPaths
	unresolved bool              // resolved left to resolvedConfig (keyMemo)
	configJSON []byte            // resolved as the key encodes it (encodeConfig)
	fileID     fileid.ID         // the file's identity when it was read (zero when unknown)
	keyMemo    *keyMemo          // the key last computed from this version of the file, if any
	cached     *cachedFile       // its file's parse cache entry (nil for none), where its key is remembered
	named      map[string]string // graph name -> the name its file gives, for dependencies a junction's override resolved
	depNames   map[string]string // the reverse: the name its file gives -> graph name
	sourceKeys []string          // unique key per source; "" for a source without a ref
	run        runDigests        // what a build that stages it stages of it, for its dependants' keys
}

func (e *Element) String() string { return e.Name }

// ShortKey is the first 8 hex characters of the key, or "????????" without one.
func (e *Element) ShortKey() string {
	if e.Key == "" {
		return "????????"
	}
	return e.Key[:8]
}

// parsedFile is what an element file says, checked on its own: everything loadElement
// needs that depends on nothing but the file's bytes, so that it can be remembered
// (ParseCache) for as long as the file is unchanged.
type parsedFile struct {
	Kind            string
	Description     string
	Depends         []string
	BuildDepends    []string
	RuntimeDepends  []string
	Pool            string
	Variables       map[string]string
	Environment     map[string]string
	Sources         []source.Spec // as written: Pinned set, no ref from gantry.lock
	Config          Config        // Commands: only the steps the file sets
	Public          Public
	RemoteExecution ElementRemoteExecution
}

// elementDir is where element files are read from: the element directory opened as a
// root (prefix ""), so that a file is one fstatat away, or, when it cannot be opened,
// the project root with the element path as prefix (whose errors then name the cause).
// dir is root's directory, open for reading files and the parse cache's stat without
// os.Root's walk (nil when it could not be opened: both then go through root).
type elementDir struct {
	root   *os.Root
	prefix string
	dir    *os.File
	show   string // the project root as errors show it ("" for the top project's)
	// origin is where its files' includes are read from (a zero origin: the
	// project's root, and no JUNCTION:PATH include).
	origin includeOrigin
}

// includeOrigin is where an element file's includes are read from: its own project
// (src), and the projects junctions hold (resolve; nil for none).
type includeOrigin struct {
	src     includeSource
	resolve includeResolver
}

// errNoFile is loadElement's answer for an element file that does not exist; the
// graph says which element named it.
var errNoFile = errors.New("no such element file")

// loadElement loads one element file: from pc when it remembers the file unchanged,
// else parsed (and then remembered). lock supplies refs for sources without one.
func loadElement(p *Project, dir elementDir, lock *Lock, name string, pc *ParseCache) (*Element, error) {
	rel := filepath.Join(p.ElementPath, filepath.FromSlash(name))
	display := filepath.ToSlash(filepath.Join(dir.show, rel))
	inDir := filepath.Join(dir.prefix, filepath.FromSlash(name))
	scope := p.optionScope()
	cacheName := parseCacheName(dir, p.Root, rel, display)
	c, ok, err := pc.lookup(dir, p.Root, inDir, cacheName, *scope)
	if err != nil {
		return nil, err
	}
	var pf *parsedFile
	var memo *keyMemo
	var doc *tomlDoc
	var id fileid.ID
	if ok {
		pf, id = c.Parsed, c.ID
		if c.Key.Key != "" {
			memo = &c.Key
		}
	} else {
		var data []byte
		var err error
		if data, id, err = readElementFile(dir, inDir, display); err != nil {
			return nil, err
		}
		var conditional bool
		if pf, doc, conditional, err = parseElement(data, display, *scope, dir.origin); err != nil {
			return nil, err
		}
		c = pc.remember(cacheName, id, pf, conditional, *scope, doc.includes)
	}
	e := &Element{Name: name, local: name, project: p, File: display, Description: pf.Description, Pool: pf.Pool,
		Depends: pf.Depends, BuildDepends: pf.BuildDepends, RuntimeDepends: pf.RuntimeDepends,
		root: p.Root, rel: rel, doc: doc, scope: scope, origin: dir.origin, fileID: id, keyMemo: memo, cached: c, public: pf.Public,
		RemoteExecution: pf.RemoteExecution}
	e.Kind, _ = LookupKind(pf.Kind) // parseElement checked it
	if e.Pool != "" {
		if _, ok := p.Pools[e.Pool]; !ok {
			return nil, e.document().valueError("pool", "pool %q is not declared in project.toml [pools]", e.Pool)
		}
	}
	e.vars = merge(e.Kind.Variables, p.Variables, pf.Variables)
	e.env = merge(p.Environment, pf.Environment)
	lockRefs := lock.Refs(name)
	e.Sources = slices.Clone(pf.Sources)
	for i := range e.Sources {
		if s := &e.Sources[i]; s.Ref == "" && i < len(lockRefs) {
			s.Ref = lockRefs[i]
		}
	}
	if err := p.resolveSources(e); err != nil {
		return nil, err
	}
	e.Config = pf.Config
	e.Config.Commands = merge2(e.Kind.DefaultCommands, pf.Config.Commands)
	return e, nil
}

// readElementFile reads the element file at path under dir, with its identity as it
// was before the read (zero when unknown). display names it in errors.
func readElementFile(dir elementDir, path, display string) ([]byte, fileid.ID, error) {
	if dir.dir != nil {
		if data, id, ok := fileid.ReadAt(dir.dir, path); ok {
			return data, id, nil
		}
	}
	// A symbolic link, an error to name, or no openat2: through the root.
	id, _ := identify(dir, path)
	data, err := dir.root.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, id, errNoFile
	}
	if err != nil {
		pe := &ProjectError{File: display, Msg: fmt.Sprintf("cannot read file: %v", err)}
		if source.IsEscape(err) {
			pe.Hint = "element files must be inside the project: a symbolic link may not lead out of it"
		}
		return nil, id, pe
	}
	return data, id, nil
}

// parseElement decodes and checks an element file's bytes. Errors name the file and line.
//
// The document is decoded as plain values first (no reflection per key, a fifth of the
// decoder's time) and read into elementFile by hand (plainElementFile) when every key is
// known and every value of the type elementFile gives it; otherwise it is decoded into
// elementFile again, whose decoder names a value of the wrong type and marks what it
// consumed for unknownKeys.
//
// The file's [[if]] blocks are read against scope (applyBlocks), and the file is
// layered over the project's defaults for its kind and what it includes (includer);
// conditional says whether it had blocks, and so whether its parse depends on the
// option values (the parse cache keys every parse by its kind's defaults).
func parseElement(data []byte, display string, scope optionScope, origin includeOrigin) (pf *parsedFile, doc *tomlDoc, conditional bool, err error) {
	pf, doc, err = parseElementFile(data, display, scope, origin)
	return pf, doc, doc != nil && doc.isDefined("if"), err
}

func parseElementFile(data []byte, display string, scope optionScope, origin includeOrigin) (*parsedFile, *tomlDoc, error) {
	// A file in simpleTOML's subset whose top-level keys are all known is read from its
	// values without the decoder; any error it has is reported as the decoder's path
	// reports it, by reading it again that way.
	text := string(data)
	if simple, ok := simpleTOML(text); ok && simpleKnownKeys(simple) {
		doc := &tomlDoc{display: display, text: text, simple: simple}
		if pf, doc, err := parseElementDoc(data, doc, simple, scope, origin); err == nil {
			return pf, doc, nil
		}
	}
	return parseElementDecoded(data, display, scope, origin)
}

// parseElementDecoded is parseElementFile through the decoder.
func parseElementDecoded(data []byte, display string, scope optionScope, origin includeOrigin) (*parsedFile, *tomlDoc, error) {
	var plain any
	doc, err := decodeTOMLBytes(data, display, &plain)
	if err != nil {
		return nil, nil, err
	}
	return parseElementDoc(data, doc, plain, scope, origin)
}

// simpleKnownKeys says of a file simpleTOML decoded whether every key is one
// onlyKnownKeys accepts: a known top-level key, or one in a table under it (simpleTOML
// decodes no deeper table). Files that include others or have [[if]] blocks are left to
// the decoder.
func simpleKnownKeys(m map[string]any) bool {
	for k := range m {
		if k == "include" || k == "if" || !slices.Contains(elementKeys, k) {
			return false
		}
	}
	return true
}

// parseElementDoc is parseElementFile once data is decoded: doc, and plain, its values.
func parseElementDoc(data []byte, doc *tomlDoc, plain any, scope optionScope, origin includeOrigin) (*parsedFile, *tomlDoc, error) {
	display := doc.display
	var err error
	var f elementFile
	var tables []any // each source, a toml.Primitive or a plain table
	var blocks []any // each [[if]] block, the same
	var config, public any
	known := doc.simple != nil || onlyKnownKeys(doc.md)
	var includes []includedFile
	if m, ok := plain.(map[string]any); ok {
		name, _ := m["kind"].(string)
		defaults := scope.kinds[name]
		if k, ok := LookupKind(name); ok && (defaults != nil || layering(m)) {
			// Kind defaults, included files and compositions: layer checks every key
			// of the file and of what it includes, leaving plain tables of the types
			// plainElementFile reads.
			in := &includer{src: origin.src, resolve: origin.resolve, kind: k}
			if in.src.root == "" {
				in.src.root = scope.root
			}
			if plain, err = in.layer(doc, m, defaults); err != nil {
				return nil, nil, err
			}
			known, includes = true, in.files
		}
	}
	if !known || !plainElementFile(plain, &f, &tables, &config, &blocks, &public) {
		f = elementFile{}
		if doc, err = decodeTOMLBytes(data, display, &f); err != nil {
			return nil, nil, err
		}
		tables = make([]any, len(f.Sources))
		for i, p := range f.Sources {
			tables[i] = p
		}
		blocks = make([]any, len(f.If))
		for i, p := range f.If {
			blocks[i] = p
		}
		config = f.Config
		if doc.isDefined("public") {
			public = f.Public
		}
	}
	sources := make([]sourceAt, len(tables))
	for i, t := range tables {
		sources[i] = sourceAt{fmt.Sprintf("sources[%d]", i), t}
	}
	topLevel := func(parent []string) []string {
		if len(parent) == 0 {
			return elementKeys
		}
		return nil
	}
	// Top-level typos first ("kinds" should not be reported as a missing "kind"); the
	// kind-specific tables are checked key by key below.
	if !known {
		if err := doc.unknownKeys(topLevel, "sources", "config", "if", "public", "remote-execution"); err != nil {
			return nil, nil, err
		}
	}
	if err := doc.checkTables("variables", "environment", "config", "public", "remote-execution"); err != nil {
		return nil, nil, err
	}
	if f.Kind == "" {
		return nil, nil, &ProjectError{File: display, Msg: "missing required key \"kind\"", Hint: "kinds: " + strings.Join(kindNames(), ", ")}
	}
	kind, ok := LookupKind(f.Kind)
	if !ok {
		return nil, nil, doc.valueError("kind", "unknown kind %q%s; kinds: %s", f.Kind, didYouMean(f.Kind, kindNames()), strings.Join(kindNames(), ", "))
	}
	configSet, err := applyBlocks(doc, blocks, scope, kind, &f, &sources, &config)
	if err != nil {
		return nil, nil, err
	}
	pf := &parsedFile{Kind: f.Kind, Description: f.Description, Pool: f.Pool,
		Variables: f.Variables, Environment: f.Environment}
	if err := checkDepends(doc, &f); err != nil {
		return nil, nil, err
	}
	pf.Depends, pf.BuildDepends, pf.RuntimeDepends = f.Depends, f.BuildDepends, f.RuntimeDepends
	if err := checkVariableNames(doc, "variables", f.Variables); err != nil {
		return nil, nil, err
	}
	if err := checkEnvironment(doc, "environment", f.Environment); err != nil {
		return nil, nil, err
	}
	if pf.Sources, err = parseSources(doc, sources); err != nil {
		return nil, nil, err
	}
	if kind.Name == "filter" {
		if err := checkFilter(doc, &f, len(pf.Sources)); err != nil {
			return nil, nil, err
		}
	}
	if pf.Config, err = parseConfig(doc, kind, config, configSet || doc.isDefined("config") || config != nil); err != nil {
		return nil, nil, err
	}
	if pf.Public, err = parsePublic(doc, public); err != nil {
		return nil, nil, err
	}
	if pf.RemoteExecution, err = parseElementRemoteExecution(doc, f.RemoteExecution); err != nil {
		return nil, nil, err
	}
	// Checked last: the kind-specific tables above mark their keys as decoded. The
	// [[if]] blocks' keys were checked by applyBlocks.
	if !known {
		if err := doc.unknownKeys(topLevel, "if", "public", "remote-execution"); err != nil {
			return nil, nil, err
		}
	}
	doc.includes = includes
	return pf, doc, nil
}

// plainElementFile fills f, sources, config and public from an element file decoded as plain
// values (doc), as decoding it into elementFile would, and reports whether every value
// has the type elementFile gives it. The sources and config are their plain tables.
func plainElementFile(doc any, f *elementFile, sources *[]any, config *any, blocks *[]any, public *any) bool {
	m, ok := doc.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range m {
		switch k {
		case "kind":
			f.Kind, ok = v.(string)
		case "description":
			f.Description, ok = v.(string)
		case "pool":
			f.Pool, ok = v.(string)
		case "depends":
			f.Depends, ok = plainStrings(v)
		case "build-depends":
			f.BuildDepends, ok = plainStrings(v)
		case "runtime-depends":
			f.RuntimeDepends, ok = plainStrings(v)
		case "variables":
			f.Variables, ok = plainStringMap(v)
		case "environment":
			f.Environment, ok = plainStringMap(v)
		case "sources":
			*sources, ok = plainTables(v)
		case "config":
			*config, ok = v.(map[string]any)
		case "if":
			*blocks, ok = plainTables(v)
		case "public":
			*public, ok = v.(map[string]any)
		case "remote-execution":
			f.RemoteExecution, ok = v.(map[string]any)
		case "include":
			_, ok = plainStrings(v)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	return true
}

// plainStrings is a plain array of strings as a []string, as the decoder makes it
// (empty, not nil, for []).
func plainStrings(v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, len(arr))
	for i, x := range arr {
		if out[i], ok = x.(string); !ok {
			return nil, false
		}
	}
	return out, true
}

// plainStringMap is a plain table of strings as a map[string]string.
func plainStringMap(v any) (map[string]string, bool) {
	t, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	out := make(map[string]string, len(t))
	for k, x := range t {
		if out[k], ok = x.(string); !ok {
			return nil, false
		}
	}
	return out, true
}

// plainTables is a plain array of tables (written [[sources]] or inline) as tables.
func plainTables(v any) ([]any, bool) {
	var out []any
	switch arr := v.(type) {
	case []map[string]any:
		out = make([]any, len(arr))
		for i, t := range arr {
			out[i] = t
		}
	case []any:
		for _, t := range arr {
			if _, ok := t.(map[string]any); !ok {
				return nil, false
			}
		}
		out = arr
	default:
		return nil, false
	}
	return out, true
}

// onlyKnownKeys reports whether every key of an element file is a known top-level key
// or one right under it, which decoding it into elementFile and checking it consumes
// (an entry of variables, environment, config or a source; a key under kind,
// description, pool or a dependency list is a type error first). Then no key can be
// unknown, and asking MetaData which keys were not decoded (a string made of each key,
// twice per file) can be skipped.
func onlyKnownKeys(md toml.MetaData) bool {
	for _, k := range md.Keys() {
		if len(k) > 2 || !slices.Contains(elementKeys, k[0]) {
			return false
		}
	}
	return true
}

// document is e's file for error positions: the one parsed by this load, or the file
// read and parsed again with the same options (a cached load keeps no document; errors
// after loading are rare), so that a key a [[if]] block set points at the block.
func (e *Element) document() *tomlDoc {
	if e.doc != nil {
		return e.doc
	}
	var data []byte
	if r, err := os.OpenRoot(e.root); err == nil {
		data, _ = r.ReadFile(e.rel) // best effort: only positions are lost
		r.Close()
	}
	if e.scope != nil {
		if _, doc, _, err := parseElement(data, e.File, *e.scope, e.origin); err == nil {
			return doc
		}
	}
	return &tomlDoc{display: e.File, text: string(data)}
}

// merge layers maps of strings (later wins).
func merge(layers ...map[string]string) map[string]string {
	return mergeLayers(layers)
}

// merge2 layers maps of command lists (later wins).
func merge2(layers ...map[string][]string) map[string][]string {
	return mergeLayers(layers)
}

// mergeLayers is every layer's entries, later layers winning: the one layer that has
// any when no other does (shared, not copied: layers and the merged maps are never
// modified once loaded), else a new map made at the size of all of them (growing it was
// a visible share of loading 100,000 elements; copying a single layer, a sixth of the
// heap such a graph keeps).
func mergeLayers[V any](layers []map[string]V) map[string]V {
	var last map[string]V
	n, nonEmpty := 0, 0
	for _, l := range layers {
		if len(l) > 0 {
			n, nonEmpty, last = n+len(l), nonEmpty+1, l
		}
	}
	if nonEmpty <= 1 {
		return last // nil when every layer is empty
	}
	out := make(map[string]V, n)
	for _, l := range layers {
		for k, v := range l {
			out[k] = v
		}
	}
	return out
}

// checkDepends validates the three dependency lists: names well formed, none listed twice.
func checkDepends(doc *tomlDoc, f *elementFile) error {
	seen := map[string]string{}
	for _, list := range []struct {
		key   string
		names []string
	}{{"depends", f.Depends}, {"build-depends", f.BuildDepends}, {"runtime-depends", f.RuntimeDepends}} {
		for _, d := range list.names {
			if err := checkElementName(d); err != nil {
				return doc.valueError(list.key, "%v", err)
			}
			if prev, ok := seen[d]; ok {
				return doc.valueError(list.key, "%s is listed twice (also in %s)", d, prev)
			}
			seen[d] = list.key
		}
	}
	return nil
}

// parseSources reads the sources, each a toml.Primitive or a plain table.
func parseSources(doc *tomlDoc, tables []sourceAt) ([]source.Spec, error) {
	var out []source.Spec
	for i, at := range tables {
		path := at.path
		t, err := doc.table(path, at.v)
		if err != nil {
			return nil, err
		}
		kind, err := t.str("kind")
		if err != nil {
			return nil, err
		}
		if kind == "" {
			return nil, &ProjectError{File: doc.display, Line: doc.lineOf(path), Msg: fmt.Sprintf("source %d has no kind", i+1), Hint: "kinds: " + strings.Join(source.Kinds(), ", ")}
		}
		if !source.IsKnown(kind) {
			return nil, doc.valueError(path+".kind", "unknown source kind %q%s; kinds: %s", kind, didYouMean(kind, source.Kinds()), strings.Join(source.Kinds(), ", "))
		}
		s := source.Spec{Kind: source.Kind(kind)}
		allowed := source.AllowedKeys(s.Kind)
		for _, k := range allowed {
			if !t.has(k) {
				continue
			}
			var err error
			switch k {
			case "url":
				s.URL, err = t.str(k)
			case "path":
				s.Path, err = t.str(k)
			case "ref":
				s.Ref, err = t.str(k)
			case "track":
				s.Track, err = t.str(k)
			case "directory":
				s.Directory, err = t.str(k)
			case "base-dir":
				s.BaseDir, err = t.str(k)
			case "filename":
				s.Filename, err = t.str(k)
			case "executable":
				s.Executable, err = t.boolean(k)
			case "submodules":
				s.Submodules, err = t.boolean(k)
			case "checkout-dot-git":
				s.DotGit, err = t.boolean(k)
			case "strip-level":
				s.StripLevel, err = t.integer(k, 1)
			}
			if err != nil {
				return nil, err
			}
		}
		if err := t.done(allowed); err != nil {
			return nil, err
		}
		// Defaults that an explicit value (even "") overrides.
		if s.Kind == source.Tar && !t.has("base-dir") {
			s.BaseDir = "*" // strip a single top-level directory, as BuildStream does
		}
		if s.Kind == source.Patch && !t.has("strip-level") {
			s.StripLevel = 1
		}
		if err := checkSource(doc, path, i, &s); err != nil {
			return nil, err
		}
		s.Pinned = s.Ref != ""
		out = append(out, s)
	}
	return out, nil
}

func checkSource(doc *tomlDoc, path string, i int, s *source.Spec) error {
	switch s.Kind {
	case source.Local, source.Patch:
		if s.Path == "" {
			return &ProjectError{File: doc.display, Line: doc.lineOf(path), Msg: fmt.Sprintf("%s source %d needs a path", s.Kind, i+1)}
		}
		if filepath.IsAbs(s.Path) || strings.HasPrefix(filepath.Clean(s.Path), "..") {
			return doc.valueError(path+".path", "%q must be a path inside the project", s.Path)
		}

	default:
		if s.URL == "" {
			return &ProjectError{File: doc.display, Line: doc.lineOf(path), Msg: fmt.Sprintf("%s source %d needs a url", s.Kind, i+1)}
		}

	}
	if s.Directory != "" && (filepath.IsAbs(s.Directory) || strings.HasPrefix(filepath.Clean(s.Directory), "..")) {
		return doc.valueError(path+".directory", "%q must be a relative path inside the build root", s.Directory)
	}
	return nil
}

// parseConfig decodes [config] for kind; Commands holds only the steps the file sets.
func parseConfig(doc *tomlDoc, kind *Kind, v any, defined bool) (Config, error) {
	var c Config
	if !defined {
		return c, nil
	}
	t, err := doc.table("config", v)
	if err != nil {
		return c, err
	}
	switch {
	case kind.Commands:
		c.Commands = map[string][]string{}
		for _, step := range commandSteps {
			list, set, err := t.strings(step)
			if err != nil {
				return c, err
			}
			if set {
				c.Commands[step] = list
			}
		}
		c.Commands = sharedCommands(c.Commands)
	case kind.Name == "import":
		if c.Source, err = t.str("source"); err != nil {
			return c, err
		}
		if c.Target, err = t.str("target"); err != nil {
			return c, err
		}
	case kind.Name == junctionKind:
		if c.Options, err = junctionOptions(t); err != nil {
			return c, err
		}
		if c.Overrides, err = junctionOverrides(t); err != nil {
			return c, err
		}
	case kind.Name == "compose" || kind.Name == "filter":
		if err := parseSelection(t, kind, &c); err != nil {
			return c, err
		}
	}
	if err := t.done(kind.ConfigKeys); err != nil {
		if len(kind.ConfigKeys) == 0 {
			return c, &ProjectError{File: doc.display, Line: doc.lineOf("config"), Msg: fmt.Sprintf("kind %q takes no [config]", kind.Name)}
		}
		return c, err
	}
	return c, nil
}

// Variables returns the element's variables expanded with the given paths. An element
// of a sub-project is expanded in its own project (p is then not used), with its name
// there: its key does not depend on the junction it is reached through.
func (e *Element) Variables(p *Project, paths Paths) *Variables {
	name := e.Name
	if e.project != nil {
		p, name = e.project, e.local
	}
	fixed := map[string]string{
		"build-root": paths.BuildRoot, "install-root": paths.InstallRoot, "sysroot": paths.Sysroot,
		"max-jobs": paths.MaxJobs, "element-name": name, "project-name": p.Name,
	}
	return NewVariables(fixed, e.vars)
}

// Resolved is an element's configuration and environment with every variable expanded.
type Resolved struct {
	Commands map[string][]string `json:"commands,omitempty"`
	Source   string              `json:"source,omitempty"`
	Target   string              `json:"target,omitempty"`
	Include  []string            `json:"include,omitempty"`
	Exclude  []string            `json:"exclude,omitempty"`
	// Integrate and Orphans are set only when they differ from the kind's default.
	Integrate *bool             `json:"integrate,omitempty"`
	Orphans   *bool             `json:"include-orphans,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	// Public is the public data the element's own key holds (ResolvedPublic).
	Public *ResolvedPublic `json:"public,omitempty"`
}

// Resolve expands the element's config and environment. Errors name the element and key.
func (e *Element) Resolve(p *Project, paths Paths) (*Resolved, error) {
	return e.resolve(p, e.Variables(p, paths))
}

func (e *Element) resolve(p *Project, vars *Variables) (*Resolved, error) {
	r := &Resolved{Env: map[string]string{}}
	expand := func(key, s string) (string, error) {
		out, err := vars.Expand(s)
		if err != nil {
			file, line, text := e.document().locate(key)
			return "", &ProjectError{File: file, Line: line, Msg: fmt.Sprintf("in %s: %v", key, err), Text: text}
		}
		return out, nil
	}
	var err error
	for step, cmds := range e.Config.Commands {
		if len(cmds) == 0 {
			continue
		}
		if r.Commands == nil {
			r.Commands = map[string][]string{}
		}
		out := make([]string, len(cmds))
		for i, c := range cmds {
			if out[i], err = expand("config."+step, c); err != nil {
				return nil, err
			}
		}
		r.Commands[step] = out
	}
	if r.Source, err = expand("config.source", e.Config.Source); err != nil {
		return nil, err
	}
	if r.Target, err = expand("config.target", e.Config.Target); err != nil {
		return nil, err
	}
	for _, c := range []struct{ key, val, root string }{{"config.source", r.Source, "build"}, {"config.target", r.Target, "install"}} {
		if leavesRoot(c.val) {
			doc := e.document()
			line := doc.lineOf(c.key)
			return nil, &ProjectError{File: e.File, Line: line, Text: doc.line(line),
				Msg: fmt.Sprintf("%s %q contains '..': it must name a directory inside the %s root (a leading / is the root itself)", c.key, c.val, c.root)}
		}
	}
	r.Include, r.Exclude = e.Config.Include, e.Config.Exclude
	r.Integrate, r.Orphans = e.Config.Integrate, e.Config.Orphans
	if r.Public, err = e.resolvePublic(p, vars); err != nil {
		return nil, err
	}
	for k, v := range e.env {
		if r.Env[k], err = expand("environment."+k, v); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// leavesRoot reports whether p, a path taken relative to a root (build or install), has a
// ".." component, which could climb out of it.
func leavesRoot(p string) bool {
	return slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "..")
}

// CheckVariables expands every variable of the element, so that an undefined or cyclic
// variable is reported at load time even when no command uses it.
func (e *Element) CheckVariables(p *Project) error {
	return e.checkVariables(e.Variables(p, keyPaths()))
}

func (e *Element) checkVariables(vars *Variables) error {
	for _, name := range slices.Sorted(maps.Keys(e.vars)) {
		if _, err := vars.lookup(name, nil); err != nil {
			key := "variables." + name
			file, line, text := e.document().locate(key)
			if line == 0 {
				return &ProjectError{File: ProjectFile, Line: 0, Msg: fmt.Sprintf("variable %q (used by %s): %v", name, e.Name, err)}
			}
			return &ProjectError{File: file, Line: line, Msg: fmt.Sprintf("variable %q: %v", name, err), Text: text}
		}
	}
	return nil
}
