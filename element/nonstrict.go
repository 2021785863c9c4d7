package element

import (
	"fmt"
	"slices"
)

// NonStrictCache is what a non-strict session asks the caches about an element.
type NonStrictCache interface {
	// Succeeded reports whether a successful artifact of e at key is cached.
	Succeeded(e *Element, key string) bool
	// ByWeakKey returns the key of the latest successful artifact of e built with its
	// weak key (e.WeakKey), if one is cached.
	ByWeakKey(e *Element) (key string, ok bool)
}

// ResolveNonStrict keys the graph for a non-strict session (BuildStream's semantics).
// In dependency order, each element with a key is keyed from its build dependencies'
// keys as resolved (so a build against a reused artifact is stored under a key of its
// own, never under the strict key); then, unless a successful artifact at that key is
// cached, an artifact found by its weak key is reused: Key becomes that artifact's key
// and Reused is set. An element whose own inputs (or the names of what it stages)
// changed has a new weak key, finds nothing and is built. StrictKey keeps the key strict
// mode gives; WeakKey is unchanged. Later ComputeKey calls (tracking) leave StrictKey.
// Resolving again (with more caches to ask: the remotes) starts from the strict keys.
func (g *Graph) ResolveNonStrict(c NonStrictCache) {
	g.nonStrict = true
	moved := make([]bool, len(g.Order)) // by position: its Key or its run key is not strict mode's
	isMoved := func(d *Element) bool { return moved[d.position] }
	for _, e := range g.Order {
		if e.StrictKey == "" {
			continue
		}
		e.Key, e.Reused = e.StrictKey, false // as strict mode keys it: resolving again starts over
		if slices.ContainsFunc(e.BuildDeps, isMoved) {
			if e.configJSON == nil { // its key came from the memo
				e.encodeConfig(g)
			}
			e.Key = g.strongKey(e)
		}
		if !c.Succeeded(e, e.Key) {
			if k, ok := c.ByWeakKey(e); ok && k != e.Key {
				e.Key, e.Reused = k, true
			}
		}
		moved[e.position] = e.Key != e.StrictKey || slices.ContainsFunc(e.RunDeps, isMoved)
		e.run.key = e.Key // made again each time: an earlier resolution may have moved it
		if len(e.RunDeps) > 0 {
			e.run.key = runDigest(e, "key", e.Key, stagedKey)
		}
	}
}

// ExplainReuse says why e, reused in a non-strict session (Reused), was not rebuilt:
// built against recorded (the staged dependencies' keys its artifact recorded, nil when
// unknown), it names the first staged dependency whose key is another now (or was not
// recorded).
func (g *Graph) ExplainReuse(e *Element, recorded map[string]string) Explanation {
	x := Explanation{Element: e.Name, Key: e.Key, Reason: "reused-non-strict"}
	for _, d := range slices.Concat(e.BuildDeps, g.StageDeps(e)) {
		if recorded == nil {
			break
		}
		if k, ok := recorded[e.unqualify(d.Name)]; !ok || k != d.Key {
			x.Chain = []string{d.Name}
			x.Text = fmt.Sprintf("%s: reused in non-strict mode although dependency %s changed (built against %s, now %s; a strict build builds it again)",
				e.Name, d.Name, shortKey(k), d.ShortKey())
			return x
		}
	}
	x.Text = e.Name + ": reused in non-strict mode: its weak key matched (a strict build builds it again)"
	return x
}

// shortKey is a key as the UI shows it, or "no artifact of it" for none.
func shortKey(k string) string {
	if k == "" {
		return "no artifact of it"
	}
	return k[:min(8, len(k))]
}
