// Package resources holds the kinds of resource a job can need and the token
// pool that gates how many jobs run at once (DESIGN.md §5).
//
// The pool is a plain non-blocking counter: Reserve answers at once whether a
// job may start, and the scheduler loop decides what to do when it may not.
// A Pool has no mutex: it is called only from the scheduler goroutine.
package resources

import (
	"fmt"
	"slices"
	"strings"
)

// Resource names a kind of token.
type Resource string

// The built-in resources. Project pools are made with PoolResource.
const (
	Process  Resource = "process"  // builders
	Remote   Resource = "remote"   // remote execution slots: actions in flight on the cluster (remote-jobs)
	Download Resource = "download" // fetchers, trackers, pullers
	Upload   Resource = "upload"   // pushers
	Cache    Resource = "cache"    // unlimited shared lock on the local cache; cleanup takes it exclusively
)

const poolPrefix = "pool:"

// PoolResource returns the resource for the project pool called name
// (a [pools] entry in project.toml).
func PoolResource(name string) Resource { return Resource(poolPrefix + name) }

// String returns the resource's name.
func (r Resource) String() string { return string(r) }

// IsPool reports whether r is a project pool made by PoolResource.
func (r Resource) IsPool() bool { return strings.HasPrefix(string(r), poolPrefix) }

// Request is what one job needs, all at once. A resource may appear in Shared
// or in Exclusive, not both, and at most once.
type Request struct {
	Shared    []Resource // one token each
	Exclusive []Resource // the whole resource: no other holder, shared or exclusive
}

// String describes the request for error and debug messages.
func (r Request) String() string {
	var parts []string
	for _, res := range r.Shared {
		parts = append(parts, string(res))
	}
	for _, res := range r.Exclusive {
		parts = append(parts, string(res)+" (exclusive)")
	}
	return strings.Join(parts, ", ")
}

// Pool counts the tokens held per resource.
//
// Invariants, for every known resource r:
//   - shared[r] >= 0, and shared[r] <= limits[r] when limits[r] > 0;
//   - exclusive[r] implies shared[r] == 0.
//
// A Pool is not safe for concurrent use: only the scheduler goroutine calls it.
type Pool struct {
	limits    map[Resource]int                 // 0 = unlimited
	shared    map[Resource]int                 // shared holders
	exclusive map[Resource]bool                // held exclusively
	interest  map[Resource]map[string]struct{} // owners waiting for exclusive access
}

// NewPool returns a pool with the given limits. A limit of 0 means unlimited,
// which makes the resource a shared lock (like Cache). Resources not in limits
// are unknown to the pool, and asking for them panics. A negative limit panics.
func NewPool(limits map[Resource]int) *Pool {
	p := &Pool{
		limits:    make(map[Resource]int, len(limits)),
		shared:    make(map[Resource]int, len(limits)),
		exclusive: make(map[Resource]bool, len(limits)),
		interest:  make(map[Resource]map[string]struct{}),
	}
	for r, n := range limits {
		if n < 0 {
			panic(fmt.Sprintf("resources: negative limit %d for %q", n, r))
		}
		p.limits[r] = n
	}
	return p
}

// Reserve takes every resource of r, or none of them, and reports whether it
// did. A shared resource needs a free token (always free when unlimited), no
// exclusive holder, and no registered exclusive interest. An exclusive resource
// needs no holder at all. Reserve panics if r names an unknown resource or
// names a resource twice.
func (p *Pool) Reserve(r Request) bool {
	p.check(r)
	for _, res := range r.Shared {
		if p.exclusive[res] || len(p.interest[res]) > 0 {
			return false
		}
		if lim := p.limits[res]; lim > 0 && p.shared[res] >= lim {
			return false
		}
	}
	for _, res := range r.Exclusive {
		if p.exclusive[res] || p.shared[res] > 0 {
			return false
		}
	}
	for _, res := range r.Shared {
		p.shared[res]++
	}
	for _, res := range r.Exclusive {
		p.exclusive[res] = true
	}
	return true
}

// Release gives back what a successful Reserve of the same request took.
// It panics, changing nothing, if any part of r is not held.
func (p *Pool) Release(r Request) {
	p.check(r)
	for _, res := range r.Shared {
		if p.shared[res] == 0 {
			panic(fmt.Sprintf("resources: releasing %q (shared), which is not held", res))
		}
	}
	for _, res := range r.Exclusive {
		if !p.exclusive[res] {
			panic(fmt.Sprintf("resources: releasing %q (exclusive), which is not held", res))
		}
	}
	for _, res := range r.Shared {
		p.shared[res]--
	}
	for _, res := range r.Exclusive {
		p.exclusive[res] = false
	}
}

// RegisterExclusiveInterest records that owner is waiting to take rs
// exclusively. While any interest in a resource is registered, no new shared
// holder gets it; existing holders keep their tokens, and once they release
// them the exclusive Reserve succeeds, so an exclusive request cannot starve.
// Registering the same owner twice is the same as once.
func (p *Pool) RegisterExclusiveInterest(rs []Resource, owner string) {
	for _, res := range rs {
		p.known(res)
		if p.interest[res] == nil {
			p.interest[res] = make(map[string]struct{})
		}
		p.interest[res][owner] = struct{}{}
	}
}

// UnregisterExclusiveInterest removes owner's interest in rs, typically when
// its exclusive job completes. Removing an interest that is not registered
// does nothing.
func (p *Pool) UnregisterExclusiveInterest(rs []Resource, owner string) {
	for _, res := range rs {
		p.known(res)
		delete(p.interest[res], owner)
		if len(p.interest[res]) == 0 {
			delete(p.interest, res)
		}
	}
}

// InUse returns how many jobs hold res: the shared holders, or 1 when it is
// held exclusively.
func (p *Pool) InUse(res Resource) int {
	p.known(res)
	if p.exclusive[res] {
		return 1
	}
	return p.shared[res]
}

// Limit returns the limit of res; 0 means unlimited.
func (p *Pool) Limit(res Resource) int {
	p.known(res)
	return p.limits[res]
}

// Interested returns the owners with registered exclusive interest in res,
// sorted, for explaining why a job is waiting.
func (p *Pool) Interested(res Resource) []string {
	p.known(res)
	owners := make([]string, 0, len(p.interest[res]))
	for o := range p.interest[res] {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	return owners
}

func (p *Pool) known(res Resource) {
	if _, ok := p.limits[res]; !ok {
		panic(fmt.Sprintf("resources: unknown resource %q", res))
	}
}

func (p *Pool) check(r Request) {
	seen := make(map[Resource]bool, len(r.Shared)+len(r.Exclusive))
	for _, res := range slices.Concat(r.Shared, r.Exclusive) {
		p.known(res)
		if seen[res] {
			panic(fmt.Sprintf("resources: %q appears twice in request [%s]", res, r))
		}
		seen[res] = true
	}
}
