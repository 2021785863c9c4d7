// Package queuestest makes what the tests of the scheduler and of the queues plan
// with: graphs written by hand, and remotes that have the elements a test names. It
// imports element only, never queues, so that queues' own tests can use it as well
// as those of the queues in actions.
package queuestest

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/element"
)

// Graph makes a graph by hand from lines "name: dep dep ..." (dependencies listed
// before their dependants). Dependencies are build dependencies; each element is a
// manual one, keyed by its name.
func Graph(t testing.TB, lines ...string) *element.Graph {
	t.Helper()
	manual, ok := element.LookupKind("manual")
	if !ok {
		t.Fatal("no manual kind")
	}
	g := &element.Graph{Elements: map[string]*element.Element{}}
	for _, line := range lines {
		name, deps, _ := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		e := &element.Element{Name: name, File: "elements/" + name, Kind: manual,
			Key: fmt.Sprintf("%x", sha256.Sum256([]byte(name)))}
		for _, d := range strings.Fields(deps) {
			de := g.Elements[d]
			if de == nil {
				t.Fatalf("%s: dependency %s is not defined before it", name, d)
			}
			e.Depends = append(e.Depends, d)
			e.BuildDeps = append(e.BuildDeps, de)
		}
		g.Elements[name] = e
		g.Order = append(g.Order, e)
	}
	return g
}

// OnRemote is a PlanOptions.OnRemote whose remotes have the named elements.
func OnRemote(names ...string) func([]*element.Element) []bool {
	return func(es []*element.Element) []bool {
		hits := make([]bool, len(es))
		for i, e := range es {
			hits[i] = slices.Contains(names, e.Name)
		}
		return hits
	}
}

// RandomGraph makes a random DAG of n elements, each depending on up to fanin earlier
// ones.
func RandomGraph(t testing.TB, n, fanin int, seed uint64) *element.Graph {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	lines := make([]string, n)
	for i := range n {
		var deps []int
		if i > 0 {
			for range rng.IntN(fanin + 1) {
				deps = append(deps, rng.IntN(i))
			}
		}
		slices.Sort(deps)
		line := fmt.Sprintf("e%04d.toml:", i)
		for _, d := range slices.Compact(deps) {
			line += fmt.Sprintf(" e%04d.toml", d)
		}
		lines[i] = line
	}
	return Graph(t, lines...)
}
