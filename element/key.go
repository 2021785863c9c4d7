package element

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// computeKeys sets Key on every element in dependency order. An element whose sources
// (or whose dependencies' sources) lack a ref gets no key.
func (g *Graph) computeKeys() {
	for _, e := range g.Order {
		g.ComputeKey(e)
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
	in := keyInput{Version: keyVersion, Kind: e.Kind.Name, Config: e.resolved, Sources: e.sourceKeys,
		BuildDeps: map[string]string{}, RunDeps: map[string]string{}}
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
