package serve

import (
	"sync"
	"time"

	"github.com/gantry-build/gantry/cache/remote"
)

// leaseTable grants build-once leases (docs/serve.md, "Build-once leases"): a lease on
// an artifact key is held by one client for a TTL, renewable, and carries a
// fencing token taken from one counter that only grows. An ActionCache update
// that carries a fencing token older than the key's current lease is refused,
// so a holder that stalled past its TTL cannot overwrite its successor's work.
type leaseTable struct {
	ttl time.Duration

	mu     sync.Mutex
	next   uint64
	leases map[string]*lease // by AC key hash
}

type lease struct {
	holder  string
	token   uint64
	expires time.Time
}

func newLeaseTable(ttl time.Duration) *leaseTable {
	return &leaseTable{ttl: ttl, leases: map[string]*lease{}}
}

// acquire grants the lease on key to holder if it is free or expired, or
// renews it when holder presents the token it holds.
func (t *leaseTable) acquire(key, holder string, token uint64, now time.Time) remote.LeaseReply {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.leases[key]
	switch {
	case l != nil && now.Before(l.expires) && !(l.holder == holder && l.token == token):
		wait := min(l.expires.Sub(now), time.Second)
		return remote.LeaseReply{TTLms: t.ttl.Milliseconds(), WaitMs: max(wait.Milliseconds(), 50), Holder: l.holder}
	case l != nil && now.Before(l.expires): // renewal
		l.expires = now.Add(t.ttl)
		return remote.LeaseReply{Granted: true, Token: l.token, TTLms: t.ttl.Milliseconds()}
	}
	t.next++
	t.leases[key] = &lease{holder: holder, token: t.next, expires: now.Add(t.ttl)}
	return remote.LeaseReply{Granted: true, Token: t.next, TTLms: t.ttl.Milliseconds()}
}

// release ends holder's lease on key, once its entry is stored or its build failed.
func (t *leaseTable) release(key string, token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.leases[key]; l != nil && l.token == token {
		delete(t.leases, key)
	}
}

// fenced reports whether an AC update of key carrying token must be refused:
// a lease newer than token was granted. An update without a token (0: a
// client that does not use leases, Bazel) is never fenced.
func (t *leaseTable) fenced(key string, token uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.leases[key]
	return token != 0 && l != nil && token < l.token
}
