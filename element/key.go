package element

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"runtime"
)

// keyVersion changes whenever the key encoding changes, so old artifacts are not reused.
const keyVersion = 1

// keyInput is everything that affects an element's build. encoding/json writes map keys
// sorted, so the encoding is canonical.
type keyInput struct {
	Version   int               `json:"v"`
	Kind      string            `json:"kind"`
	Config    *Resolved         `json:"config"`
	Sources   []string          `json:"sources"`
	BuildDeps map[string]string `json:"build-deps"`
	RunDeps   map[string]string `json:"run-deps"`
}

// keyInputEncoded is keyInput with the config already encoded (Element.configJSON):
// the same bytes, as encoding/json writes a RawMessage compacted and HTML-escaped, which
// the encoded config already is.
type keyInputEncoded struct {
	Version   int               `json:"v"`
	Kind      string            `json:"kind"`
	Config    json.RawMessage   `json:"config"`
	Sources   []string          `json:"sources"`
	BuildDeps map[string]string `json:"build-deps"`
	RunDeps   map[string]string `json:"run-deps"`
}

// encodeConfig sets e.configJSON from e.resolved. Loading does it for every element in
// parallel, so that ComputeKey, which runs in dependency order, has less to do.
func (e *Element) encodeConfig() {
	data, err := json.Marshal(e.resolved)
	if err != nil {
		panic("element: encoding cache key input: " + err.Error()) // only plain types inside
	}
	e.configJSON = data
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
// dependencies' keys, which must be current. It leaves Key empty when a source of e
// lacks a ref or a dependency has no key.
func (g *Graph) ComputeKey(e *Element) {
	e.Key = ""
	if e.NoRef {
		return
	}
	if e.configJSON == nil {
		e.encodeConfig()
	}
	in := keyInputEncoded{Version: keyVersion, Kind: e.Kind.Name, Config: e.configJSON, Sources: e.sourceKeys,
		BuildDeps: make(map[string]string, len(e.BuildDeps)), RunDeps: make(map[string]string, len(e.RunDeps))}
	for _, d := range e.BuildDeps {
		if d.Key == "" {
			return
		}
		in.BuildDeps[d.Name] = d.Key
	}
	for _, d := range e.RunDeps {
		if d.Key == "" {
			return
		}
		in.RunDeps[d.Name] = d.Key
	}
	data, err := json.Marshal(in)
	if err != nil {
		panic("element: encoding cache key input: " + err.Error()) // only plain types inside
	}
	sum := sha256.Sum256(data)
	e.Key = hex.EncodeToString(sum[:])
}

// KeyInput returns the canonical JSON the key of e is computed from (for debugging and
// `show --format %{key-input}`).
func (g *Graph) KeyInput(e *Element) []byte {
	deps := func(list []*Element) map[string]string {
		m := map[string]string{}
		for _, d := range list {
			m[d.Name] = d.Key
		}
		return m
	}
	data, _ := json.MarshalIndent(keyInput{Version: keyVersion, Kind: e.Kind.Name, Config: e.resolved,
		Sources: e.sourceKeys, BuildDeps: deps(e.BuildDeps), RunDeps: deps(e.RunDeps)}, "", "  ")
	return data
}
