package queues

import (
	"fmt"
	"slices"

	"github.com/gantry-build/gantry/resources"
)

// heldTokens are the tokens one job holds, and their only owner: every token a
// job takes is taken through it (reserveTokens, take) and every token it gives
// back goes back through it (giveBack, releaseAll), so it is the only caller of
// Pool.Release. What it holds is exactly what it took and has not given back.
// Called only from the scheduler goroutine.
type heldTokens struct {
	pool *resources.Pool
	held resources.Request
}

// reserveTokens takes every token of req from pool, or none: ok is false when
// they are not all free, and then nothing is held.
func reserveTokens(pool *resources.Pool, req resources.Request) (h heldTokens, ok bool) {
	if !pool.Reserve(req) {
		return heldTokens{pool: pool}, false
	}
	return heldTokens{pool: pool, held: req}, true
}

// take takes one more shared token of r (a gated job's gate token) and reports
// whether it was free; if not, nothing changes.
func (h *heldTokens) take(r resources.Resource) bool {
	if !h.pool.Reserve(resources.Request{Shared: []resources.Resource{r}}) {
		return false
	}
	h.held.Shared = append(slices.Clone(h.held.Shared), r)
	return true
}

// holds reports whether a shared token of r is held.
func (h *heldTokens) holds(r resources.Resource) bool { return slices.Contains(h.held.Shared, r) }

// shared lists the shared tokens held; the caller must not change it.
func (h *heldTokens) shared() []resources.Resource { return h.held.Shared }

// giveBack returns the shared tokens rs before the job ends, keeping the rest.
// It panics, changing nothing, if one of rs is not held.
func (h *heldTokens) giveBack(rs ...resources.Resource) {
	left := slices.Clone(h.held.Shared)
	for _, r := range rs {
		i := slices.Index(left, r)
		if i < 0 {
			panic(fmt.Sprintf("queues: giving back %q, which the job does not hold (it holds %v)", r, h.held))
		}
		left = slices.Delete(left, i, i+1)
	}
	h.pool.Release(resources.Request{Shared: rs})
	h.held.Shared = left
}

// releaseAll returns every token still held: the job has ended, or will not
// start. Nothing is held afterwards, so a second call releases nothing.
func (h *heldTokens) releaseAll() {
	if h.pool == nil {
		return
	}
	h.pool.Release(h.held)
	h.held = resources.Request{}
}
