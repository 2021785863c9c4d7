package element

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// keyVersion changes whenever the key encoding changes, so old artifacts are not reused;
// or what a build runs with does: 2 gave every command the fixed environment of
// sandbox.FixedEnv (HOME, TZ, LC_ALL, SOURCE_DATE_EPOCH); 3 took an element's own
// runtime-only dependencies out of its key (BuildStream's semantics): a build
// dependency enters with what it stages, its own key and its runtime dependencies'
// (runKey).
const keyVersion = 3

// keyInput is everything that affects an element's build. encoding/json writes map keys
// sorted, so the encoding is canonical.
type keyInput struct {
	Version int    `json:"v"`
	Kind    string `json:"kind"`
	// Sandbox is "bwrap" when the element's commands run in the hermetic bwrap sandbox
	// (sandboxClass), empty otherwise: a host artifact never has the key of a hermetic
	// build, so a hermetic request never accepts one, locally or from a remote.
	Sandbox string    `json:"sandbox,omitempty"`
	Config  *Resolved `json:"config"`
	Sources []string  `json:"sources"`
	// BuildDeps: each build dependency's name -> the key of what a build stages of it
	// (runKey): its own key, with its runtime dependencies' when it has any. An element's
	// own runtime-only dependencies are not in its key: they reach its dependants' keys
	// through what those stage.
	BuildDeps map[string]string `json:"build-deps"`
}

// encodeConfig sets e.configJSON from e's resolved config. Loading does it for every
// element without a key memo in parallel, so that ComputeKey, which runs in dependency
// order, has less to do.
func (e *Element) encodeConfig(g *Graph) {
	data, err := json.Marshal(g.resolvedConfig(e))
	if err != nil {
		panic("element: encoding cache key input: " + err.Error()) // only plain types inside
	}
	e.configJSON = data
}

// resolvedConfig is e's config and environment expanded with keyPaths. Loading resolves
// every element but those whose key memo was computed under the project's current
// settings (keyMemo): those are resolved here, once, when asked for. Their resolution
// succeeded then and depends on nothing that changed, so an error here is a bug.
// Called for one element by one goroutine at a time (keys depth by depth, then the
// commands' own goroutine).
func (g *Graph) resolvedConfig(e *Element) *Resolved {
	if e.unresolved {
		r, err := e.Resolve(g.Project, keyPaths())
		if err != nil {
			panic(fmt.Sprintf("element: %s resolved when its key memo was made, and now: %v", e.Name, err))
		}
		e.resolved, e.unresolved = r, false
	}
	return e.resolved
}

// computeKeys sets Key on every element in dependency order. An element whose sources
// (or whose dependencies' sources) lack a ref gets no key. Elements of one depth (the
// longest chain of dependencies below them) depend only on shallower ones, so each depth
// is keyed in parallel.
func (g *Graph) computeKeys() {
	depth := make([]int, len(g.Order)) // by position
	var levels [][]*Element
	for _, e := range g.Order {
		d := 0
		for _, list := range [][]*Element{e.BuildDeps, e.RunDeps} {
			for _, dep := range list {
				d = max(d, depth[dep.position]+1)
			}
		}
		depth[e.position] = d
		if d == len(levels) {
			levels = append(levels, nil)
		}
		levels[d] = append(levels[d], e)
	}
	for _, level := range levels {
		eachParallel(len(level), runtime.GOMAXPROCS(0), func(i int) { g.ComputeKey(level[i]) })
	}
}

// ComputeKey sets e's cache key, its weak key (unless the project asks for none:
// Project.NoWeakKeys) and the digests of what a build stages
// of it (runDigests) from its configuration, its sources' keys and its dependencies'
// keys, which must be current; or reuses those last computed from the same inputs
// (keyMemo). It leaves them empty when a source of e lacks a ref or a dependency (build
// or runtime) has no key. Outside a non-strict session (ResolveNonStrict) StrictKey is
// Key.
func (g *Graph) ComputeKey(e *Element) {
	e.Key, e.WeakKey, e.run = "", "", runDigests{}
	defer func() {
		if !g.nonStrict {
			e.StrictKey = e.Key
		}
	}()
	if e.NoRef {
		return
	}
	for _, list := range [][]*Element{e.BuildDeps, e.RunDeps} {
		for _, d := range list {
			if d.Key == "" {
				return
			}
		}
	}
	var inputs string
	memo := g.parseCache != nil
	weak := g.weakKeys()
	if memo {
		if inputs = g.keyInputs(e); g.reuseKey(e, inputs, weak) {
			return
		}
	}
	if e.configJSON == nil {
		e.encodeConfig(g)
	}
	e.Key = g.strongKey(e)
	if weak {
		e.WeakKey = g.weakKey(e)
	}
	e.setRunDigests(weak)
	if memo {
		g.rememberKey(e, inputs)
	}
}

// runDigests are what a build that stages an element stages of it, for the keys of the
// elements that build on it: the element and, transitively, its runtime dependencies.
// An element without runtime dependencies stages only itself: key is its Key, names
// "", weak its WeakKey.
type runDigests struct {
	key   string // its key and its runtime dependencies' run keys (strong keys)
	names string // its runtime dependencies' names, and theirs (weak keys)
	weak  string // its weak key and its runtime dependencies' run weak keys (weak keys of strict-rebuild kinds)
}

// stagedKey, stagedNames and stagedWeak are what a dependency d contributes to the keys
// of an element that stages it.
func stagedKey(d *Element) string   { return d.run.key }
func stagedNames(d *Element) string { return d.run.names }
func stagedWeak(d *Element) string  { return d.run.weak }

// strongKey is e's key from its build dependencies' current run keys: what strict mode
// uses, and what a build in a non-strict session is stored under. e.configJSON is set.
func (g *Graph) strongKey(e *Element) string {
	data := appendKeyInput(make([]byte, 0, keyInputSize(e)), e.Kind.Name, g.sandboxClass(e), e.configJSON, e.sourceKeys, e.unqualify, e.BuildDeps, stagedKey)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// keyInputSize is about the size of e's key input (appendKeyInput), made at once: the
// input of a target depending on 30,000 elements grew 16 times.
func keyInputSize(e *Element) int {
	return 256 + len(e.configJSON) + 80*len(e.sourceKeys) + 100*len(e.BuildDeps)
}

// weakKey is e's key from its own inputs and only the names of what its build stages
// (BuildStream's weak key): a change below that changes no name leaves it. Kinds that
// only rearrange their dependencies' files (Kind.StrictRebuild) take their weak keys
// instead: their artifact is stale as soon as one of those would be rebuilt. It is the
// encoding of strongKey with other dependency values, hashed after "weak:".
func (g *Graph) weakKey(e *Element) string {
	value := stagedNames
	if e.Kind.StrictRebuild {
		value = stagedWeak
	}
	data := appendKeyInput(append(make([]byte, 0, keyInputSize(e)), "weak:"...), e.Kind.Name, g.sandboxClass(e), e.configJSON, e.sourceKeys, e.unqualify, e.BuildDeps, value)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// weakKeys says whether keys are computed with weak keys: unless the command reads
// none (Project.NoWeakKeys). The weak key and the two run digests only weak keys read
// are three of the five hashes of an element with runtime dependencies.
func (g *Graph) weakKeys() bool { return g.Project == nil || !g.Project.NoWeakKeys }

// setRunDigests sets e.run from e's keys and its runtime dependencies' run digests,
// which must be current; names and weak only when weak (weakKeys), "" otherwise.
func (e *Element) setRunDigests(weak bool) {
	if len(e.RunDeps) == 0 {
		e.run = runDigests{key: e.Key, weak: e.WeakKey}
		return
	}
	e.run = runDigests{key: runDigest(e, "key", e.Key, stagedKey)}
	if weak {
		e.run.names = runDigest(e, "names", "", stagedNames)
		e.run.weak = runDigest(e, "weak", e.WeakKey, stagedWeak)
	}
}

// runDigest hashes {"label":own,"run-deps":{name:value(d)}} over e's runtime
// dependencies, named in e's own project.
func runDigest(e *Element, label, own string, value func(*Element) string) string {
	b := make([]byte, 0, 128+80*len(e.RunDeps))
	b = append(b, `{"`...)
	b = append(b, label...)
	b = append(b, `":`...)
	b = appendJSONString(b, own)
	b = append(b, `,"run-deps":`...)
	b = appendDepValues(b, e.unqualify, e.RunDeps, value)
	sum := sha256.Sum256(append(b, '}'))
	return hex.EncodeToString(sum[:])
}

// hermeticSandbox is the sandbox class of a hermetic build (keyInput.Sandbox).
const hermeticSandbox = "bwrap"

// sandboxClass is what e's key says of the sandbox its commands run in: "bwrap" when
// the project is built hermetically (Project.Hermetic: --sandbox bwrap) and e's kind
// runs commands; "" otherwise: on the host, or under auto, which picks bwrap or the host
// only once the dependencies are staged, after the key is computed, so its artifacts
// are not promised hermetic. Kinds that run no commands (import, stack, compose) make
// the same artifact in any sandbox.
func (g *Graph) sandboxClass(e *Element) string {
	if g.Project != nil && g.Project.Hermetic && e.Kind.Commands {
		return hermeticSandbox
	}
	return ""
}

// KeyInput returns the canonical JSON the key of e is computed from (for debugging and
// `show --format %{key-input}`).
func (g *Graph) KeyInput(e *Element) []byte {
	deps := map[string]string{}
	for _, d := range e.BuildDeps {
		deps[e.unqualify(d.Name)] = stagedKey(d)
	}
	// Strings, numbers, lists and maps of them only: the encoding cannot fail.
	data, _ := json.MarshalIndent(keyInput{Version: keyVersion, Kind: e.Kind.Name, Sandbox: g.sandboxClass(e), Config: g.resolvedConfig(e),
		Sources: e.sourceKeys, BuildDeps: deps}, "", "  ")
	return data
}

// appendKeyInput appends the encoding of keyInput that encoding/json would write (fields
// in order, maps with sorted keys, nil slices as null), with the config already encoded:
// reflection over the struct and its maps, and the re-scan of the raw config, were
// most of ComputeKey's time. TestKeyInputEncoding holds it to json.Marshal's bytes.
// Dependencies are named as name gives them: in the depending element's own project
// (Element.unqualify), so that no key says which junction its project was reached by.
// Each build dependency d enters as value(d) (stagedKey for the key).
func appendKeyInput(b []byte, kind, sandbox string, config []byte, sources []string, name func(string) string, buildDeps []*Element, value func(*Element) string) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, keyVersion, 10)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, kind)
	if sandbox != "" {
		b = append(b, `,"sandbox":`...)
		b = appendJSONString(b, sandbox)
	}
	b = append(b, `,"config":`...)
	b = append(b, config...)
	b = append(b, `,"sources":`...)
	if sources == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, s := range sources {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, s)
		}
		b = append(b, ']')
	}
	b = append(b, `,"build-deps":`...)
	b = appendDepValues(b, name, buildDeps, value)
	return append(b, '}')
}

// appendDepValues appends deps as a JSON object of name(d.Name) to value(d), names
// sorted and each once, as encoding/json writes a map. name only removes a prefix that all of deps
// share (an element's dependencies are all in its own project, or deeper), so the order
// of the names is that of the qualified names.
func appendDepValues(b []byte, name func(string) string, deps []*Element, value func(*Element) string) []byte {
	sorted := deps
	if !slices.IsSortedFunc(deps, byName) {
		sorted = slices.SortedFunc(slices.Values(deps), byName)
	}
	b = append(b, '{')
	for i, d := range sorted {
		if i > 0 && sorted[i-1].Name == d.Name {
			continue
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, name(d.Name))
		b = append(b, ':')
		b = appendJSONString(b, value(d))
	}
	return append(b, '}')
}

// jsonPlain marks the bytes encoding/json copies into a string as they are: printable
// ASCII but for the characters it escapes (a table: keys are hashed from 100,000
// element names and keys at a time).
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = !strings.ContainsRune(`"\<>&`, rune(c))
	}
	return t
}()

func byName(a, b *Element) int { return cmp.Compare(a.Name, b.Name) }

// appendJSONString appends s as encoding/json writes it: printable ASCII other than
// the characters it escapes is copied; anything else is left to encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !jsonPlain[s[i]] {
			data, _ := json.Marshal(s) // a string always encodes
			return append(b, data...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
