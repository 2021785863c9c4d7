package element

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
)

// keyMemo is an element's cache key as last computed from one version of its file,
// kept with the parse of that version (cachedFile), and the digest of every other input
// the key was computed from (keyInputs). ComputeKey reuses the key, without encoding or
// hashing the element's config, only when each of those inputs is what it is now:
//
//   - the file: the memo lives in the file's parse cache entry, which a new identity of
//     the file replaces (and the racy rule drops);
//   - the project's settings (keyContext), which reach the key through variables and
//     environment;
//   - the element's source keys, recomputed on every load (a local source's content is
//     hashed each time), which carry gantry.lock's refs and an open workspace's content;
//   - the run keys of its build and run dependencies (runDigests.key), just computed: a
//     Merkle chain, so a dependency whose key changed changes its dependants'. Its weak
//     key and run digests follow from the same inputs (the names and weak keys below
//     it are in those run keys' preimages), so they are kept with the key.
//
// Anything else that enters a key (kinds, keyPaths' use, the key's encoding) is in the
// gantry build, which the cache file's stamp names.
//
// Context, the project's settings alone (keyContext), also says whether the element's
// config would resolve as it did when the key was computed: resolution depends only on
// the file and those settings. Loading skips resolving an element whose memo has the
// current Context (resolvedConfig resolves it if it is asked for): its variables were
// checked and expanded without error then, and would be the same now.
type keyMemo struct {
	Inputs  string // keyInputs when the key was computed (32 bytes)
	Key     string // "" for no memo
	Context string // keyContext when the key was computed (32 bytes)
	// Weak and the run digests (runDigests) computed with Key; Weak, RunNames and
	// RunWeak "" when it was computed without weak keys (Project.NoWeakKeys).
	Weak, RunKey, RunNames, RunWeak string
}

// keyContext is the digest of the project's settings for keyInputs: all of project.toml
// as loaded, but for open workspaces (which reach only their own element's key, through
// its source keys), with the command's sandbox (Project.Hermetic, which keys say:
// TestKeyMemoKeepsTheSandbox), and the paths keys are resolved with.
func keyContext(p *Project) string {
	q := *p
	q.Workspaces = nil
	data, err := json.Marshal(struct {
		Project *Project
		Paths   Paths
	}{&q, keyPaths()})
	if err != nil {
		panic("element: encoding the key context: " + err.Error()) // only plain types inside
	}
	sum := sha256.Sum256(data)
	return string(sum[:])
}

// keyInputs is the digest of what e's key depends on beyond its file: the project's
// settings, e's source keys and its dependencies' run keys (build, then run, in
// declaration order), each string with its length. The dependencies' keys must be
// current.
func (g *Graph) keyInputs(e *Element) string {
	var buf [1024]byte // on the stack: most elements' inputs fit
	b := buf[:0]
	if n := 64 + 80*len(e.sourceKeys) + 80*(len(e.BuildDeps)+len(e.RunDeps)); n > len(buf) {
		b = make([]byte, 0, n) // made at once: a target depending on 30,000 elements
	}
	b = append(b, g.keyContextOf(e)...)
	b = binary.AppendUvarint(b, uint64(len(e.sourceKeys)))
	for _, k := range e.sourceKeys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	for _, list := range [][]*Element{e.BuildDeps, e.RunDeps} {
		b = binary.AppendUvarint(b, uint64(len(list)))
		for _, d := range list {
			b = binary.AppendUvarint(b, uint64(len(d.run.key)))
			b = append(b, d.run.key...)
		}
	}
	sum := sha256.Sum256(b)
	return string(sum[:])
}

// reuseKey sets e.Key from its memo when the inputs it was computed from are unchanged
// (inputs: keyInputs(e)) and, when weak keys are asked for (weak), the memo has them (a
// load without them, Project.NoWeakKeys, remembers a key with Weak ""), and reports
// whether it did.
func (g *Graph) reuseKey(e *Element, inputs string, weak bool) bool {
	if e.keyMemo == nil || e.keyMemo.Inputs != inputs || (weak && e.keyMemo.Weak == "") {
		return false
	}
	m := e.keyMemo
	e.Key, e.WeakKey, e.run = m.Key, m.Weak, runDigests{key: m.RunKey, names: m.RunNames, weak: m.RunWeak}
	g.parseCache.keys.Add(1)
	return true
}

// rememberKey keeps e's key, just computed from inputs, with its file's parse.
func (g *Graph) rememberKey(e *Element, inputs string) {
	e.keyMemo = &keyMemo{Inputs: inputs, Key: e.Key, Context: g.keyContextOf(e),
		Weak: e.WeakKey, RunKey: e.run.key, RunNames: e.run.names, RunWeak: e.run.weak}
	g.parseCache.rememberKey(e.cached, e.fileID, e.keyMemo)
}
