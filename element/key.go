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
// sandbox.FixedEnv (HOME, TZ, LC_ALL, SOURCE_DATE_EPOCH).
const keyVersion = 2

// keyInput is everything that affects an element's build. encoding/json writes map keys
// sorted, so the encoding is canonical.
type keyInput struct {
	Version int    `json:"v"`
	Kind    string `json:"kind"`
	// Sandbox is "bwrap" when the element's commands run in the hermetic bwrap sandbox
	// (sandboxClass), empty otherwise: a host artifact never has the key of a hermetic
	// build, so a hermetic request never accepts one, locally or from a remote.
	Sandbox   string            `json:"sandbox,omitempty"`
	Config    *Resolved         `json:"config"`
	Sources   []string          `json:"sources"`
	BuildDeps map[string]string `json:"build-deps"`
	RunDeps   map[string]string `json:"run-deps"`
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

// ComputeKey sets e's cache key from its configuration, its sources' keys and its
// dependencies' keys, which must be current; or reuses the key last computed from the
// same inputs (keyMemo). It leaves Key empty when a source of e
// lacks a ref or a dependency has no key.
func (g *Graph) ComputeKey(e *Element) {
	e.Key = ""
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
	if memo {
		if inputs = g.keyInputs(e); g.reuseKey(e, inputs) {
			return
		}
	}
	if e.configJSON == nil {
		e.encodeConfig(g)
	}
	data := appendKeyInput(make([]byte, 0, 256+len(e.configJSON)), e.Kind.Name, g.sandboxClass(e), e.configJSON, e.sourceKeys, e.unqualify, e.BuildDeps, e.RunDeps)
	sum := sha256.Sum256(data)
	e.Key = hex.EncodeToString(sum[:])
	if memo {
		g.rememberKey(e, inputs)
	}
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
	// Strings, numbers, lists and maps of them only: the encoding cannot fail.
	data, _ := json.MarshalIndent(keyInput{Version: keyVersion, Kind: e.Kind.Name, Sandbox: g.sandboxClass(e), Config: g.resolvedConfig(e),
		Sources: e.sourceKeys, BuildDeps: e.depKeys(e.BuildDeps), RunDeps: e.depKeys(e.RunDeps)}, "", "  ")
	return data
}

// appendKeyInput appends the encoding of keyInput that encoding/json would write (fields
// in order, maps with sorted keys, nil slices as null), with the config already encoded:
// reflection over the struct and its maps, and the re-scan of the raw config, were
// most of ComputeKey's time. TestKeyInputEncoding holds it to json.Marshal's bytes.
// Dependencies are named as name gives them: in the depending element's own project
// (Element.unqualify), so that no key says which junction its project was reached by.
func appendKeyInput(b []byte, kind, sandbox string, config []byte, sources []string, name func(string) string, buildDeps, runDeps []*Element) []byte {
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
	b = appendDepKeys(b, name, buildDeps)
	b = append(b, `,"run-deps":`...)
	b = appendDepKeys(b, name, runDeps)
	return append(b, '}')
}

// appendDepKeys appends deps as a JSON object of name(d.Name) to key, names sorted and
// each once, as encoding/json writes a map. name only removes a prefix that all of deps
// share (an element's dependencies are all in its own project, or deeper), so the order
// of the names is that of the qualified names.
func appendDepKeys(b []byte, name func(string) string, deps []*Element) []byte {
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
		b = appendJSONString(b, d.Key)
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
