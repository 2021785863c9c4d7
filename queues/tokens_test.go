package queues

import (
	"maps"
	"testing"

	"github.com/gantry-build/gantry/resources"
)

func tokenPool() *resources.Pool {
	return resources.NewPool(map[resources.Resource]int{resources.Process: 2, resources.Download: 1, resources.Cache: 0})
}

// inUse is what the pool has handed out of each resource.
func inUse(p *resources.Pool) map[resources.Resource]int {
	return map[resources.Resource]int{
		resources.Process: p.InUse(resources.Process), resources.Download: p.InUse(resources.Download), resources.Cache: p.InUse(resources.Cache),
	}
}

// TestHeldTokensReleaseAllFreesWhatWasHeld: what a job took, in one reserve and
// one more token at its gate, less what it gave back early, is exactly what
// releaseAll frees; a second releaseAll frees nothing.
func TestHeldTokensReleaseAllFreesWhatWasHeld(t *testing.T) {
	p := tokenPool()
	other, ok := reserveTokens(p, resources.Request{Shared: []resources.Resource{resources.Process}})
	if !ok {
		t.Fatal("a free builder was refused")
	}
	h, ok := reserveTokens(p, resources.Request{Shared: []resources.Resource{resources.Download, resources.Cache}})
	if !ok {
		t.Fatal("free tokens were refused")
	}
	if !h.take(resources.Process) {
		t.Fatal("the second builder was refused")
	}
	if h.take(resources.Process) {
		t.Fatal("a third builder was granted over the limit of two")
	}
	if !h.holds(resources.Process) || !h.holds(resources.Cache) {
		t.Fatalf("holds %v, want process, download and cache", h.shared())
	}
	h.giveBack(resources.Download)
	if h.holds(resources.Download) || p.InUse(resources.Download) != 0 {
		t.Fatalf("download still held after giving it back: %v, pool %v", h.shared(), inUse(p))
	}
	h.releaseAll()
	want := map[resources.Resource]int{resources.Process: 1, resources.Download: 0, resources.Cache: 0}
	if got := inUse(p); !maps.Equal(got, want) {
		t.Fatalf("after releaseAll the pool has %v in use, want only the other job's builder %v", got, want)
	}
	h.releaseAll()
	if got := inUse(p); !maps.Equal(got, want) {
		t.Fatalf("a second releaseAll changed the pool: %v, want %v", got, want)
	}
	other.releaseAll()
	if got := inUse(p); !maps.Equal(got, map[resources.Resource]int{resources.Process: 0, resources.Download: 0, resources.Cache: 0}) {
		t.Fatalf("tokens left in use: %v", got)
	}
}

// TestHeldTokensRefusedHoldNothing: a reserve that is refused takes nothing,
// and releasing what it holds frees nothing.
func TestHeldTokensRefusedHoldNothing(t *testing.T) {
	p := tokenPool()
	first, _ := reserveTokens(p, resources.Request{Shared: []resources.Resource{resources.Download}})
	h, ok := reserveTokens(p, resources.Request{Shared: []resources.Resource{resources.Process, resources.Download}})
	if ok {
		t.Fatal("a second download token was granted over the limit of one")
	}
	h.releaseAll()
	if got := inUse(p); got[resources.Process] != 0 || got[resources.Download] != 1 {
		t.Fatalf("pool has %v in use, want only the first job's download", got)
	}
	first.releaseAll()
}

// TestHeldTokensGiveBackImbalancePanics: giving back a token the job does not
// hold panics and changes nothing, neither the job's tokens nor the pool.
func TestHeldTokensGiveBackImbalancePanics(t *testing.T) {
	p := tokenPool()
	h, _ := reserveTokens(p, resources.Request{Shared: []resources.Resource{resources.Process, resources.Cache}})
	for _, give := range [][]resources.Resource{
		{resources.Download},                   // never held
		{resources.Process, resources.Process}, // held once, given back twice
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("giving back %v did not panic", give)
				}
			}()
			h.giveBack(give...)
		}()
		if !h.holds(resources.Process) || !h.holds(resources.Cache) || p.InUse(resources.Process) != 1 {
			t.Fatalf("a refused giveBack(%v) changed things: holds %v, pool %v", give, h.shared(), inUse(p))
		}
	}
	h.releaseAll()
	if p.InUse(resources.Process) != 0 {
		t.Fatalf("pool has %v in use after releaseAll", inUse(p))
	}
}
