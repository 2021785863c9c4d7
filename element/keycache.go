package element

import (
	"crypto/sha256"
	"encoding/json"
)

// keyMemo is an element's cache key as last computed from one version of its file,
// kept with the parse of that version (cachedFile), and every other input the key was
// computed from. ComputeKey reuses the key, without resolving, encoding or hashing
// anything, only when each of those inputs is what it is now:
//
//   - the file: the memo lives in the file's parse cache entry, which a new identity of
//     the file replaces (and the racy rule drops);
//   - Context: the project's settings (keyContext), which reach the key through variables
//     and environment;
//   - Sources: the element's source keys, recomputed on every load (a local source's
//     content is hashed each time), which carry gantry.lock's refs and an open
//     workspace's content;
//   - Deps: the keys of its build and run dependencies, in declaration order, just
//     computed (a Merkle chain: a dependency whose key changed changes its dependants').
//
// Anything else that enters a key (kinds, KeyPaths, the key's encoding) is in the
// gantry build, which the cache file's stamp names.
type keyMemo struct {
	Context string   // keyContext of the project it was computed in (32 bytes)
	Sources []string // the element's source keys
	Deps    []string // e.BuildDeps' keys, then e.RunDeps'
	Key     string   // "" for no memo
}

// keyContext is the digest of the project's settings for keyMemo: all of project.toml
// as loaded, but for open workspaces (which reach only their own element's key, through
// its source keys), and the paths keys are resolved with.
func keyContext(p *Project) string {
	q := *p
	q.Workspaces = nil
	data, err := json.Marshal(struct {
		Project *Project
		Paths   Paths
	}{&q, KeyPaths})
	if err != nil {
		panic("element: encoding the key context: " + err.Error()) // only plain types inside
	}
	sum := sha256.Sum256(data)
	return string(sum[:])
}

// reuseKey sets e.Key from its memo when every input the memo was computed from is
// unchanged, and reports whether it did. e's dependencies' keys must be current.
func (g *Graph) reuseKey(e *Element) bool {
	m := e.keyMemo
	if m == nil || m.Context != g.keyContext || len(m.Deps) != len(e.BuildDeps)+len(e.RunDeps) ||
		len(m.Sources) != len(e.sourceKeys) {
		return false
	}
	for i, k := range e.sourceKeys {
		if m.Sources[i] != k {
			return false
		}
	}
	i := 0
	for _, list := range [][]*Element{e.BuildDeps, e.RunDeps} {
		for _, d := range list {
			if m.Deps[i] != d.Key {
				return false
			}
			i++
		}
	}
	e.Key = m.Key
	if g.parseCache != nil {
		g.parseCache.keys.Add(1)
	}
	return true
}

// rememberKey keeps e's key, just computed, with its file's parse, for reuseKey next time.
func (g *Graph) rememberKey(e *Element) {
	if g.parseCache == nil {
		return
	}
	m := &keyMemo{Context: g.keyContext, Sources: e.sourceKeys,
		Deps: make([]string, 0, len(e.BuildDeps)+len(e.RunDeps)), Key: e.Key}
	for _, list := range [][]*Element{e.BuildDeps, e.RunDeps} {
		for _, d := range list {
			m.Deps = append(m.Deps, d.Key)
		}
	}
	e.keyMemo = m
	g.parseCache.rememberKey(e.File, e.fileID, m)
}
