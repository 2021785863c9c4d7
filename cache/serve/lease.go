package serve

import (
	"log/slog"
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
	m   *serverMetrics
	log *slog.Logger

	mu     sync.Mutex
	next   uint64
	leases map[string]*lease // by AC key hash
}

type lease struct {
	holder  string
	token   uint64
	expires time.Time
}

func newLeaseTable(ttl time.Duration, m *serverMetrics, log *slog.Logger) *leaseTable {
	return &leaseTable{ttl: ttl, m: m, log: log, leases: map[string]*lease{}}
}

// sweep forgets the leases expired at now, counting and logging each. Called
// with t.mu held.
func (t *leaseTable) sweep(now time.Time) {
	for key, l := range t.leases {
		if !now.Before(l.expires) {
			delete(t.leases, key)
			t.m.leasesExpired.Inc()
			t.log.Info("lease expired", "key", key, "holder", l.holder, "token", l.token)
		}
	}
}

// held returns how many leases are held now.
func (t *leaseTable) held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep(time.Now())
	return len(t.leases)
}

// acquire grants the lease on key to holder if it is free or expired, or
// renews it when holder presents the token it holds.
func (t *leaseTable) acquire(key, holder string, token uint64, now time.Time) remote.LeaseReply {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep(now)
	l := t.leases[key]
	switch {
	case l != nil && !(l.holder == holder && l.token == token):
		wait := min(l.expires.Sub(now), time.Second)
		t.m.leaseWaits.Inc()
		t.log.Debug("lease wait", "key", key, "client", holder, "holder", l.holder)
		return remote.LeaseReply{TTLms: t.ttl.Milliseconds(), WaitMs: max(wait.Milliseconds(), 50), Holder: l.holder}
	case l != nil: // renewal
		l.expires = now.Add(t.ttl)
		t.m.leaseRenewals.Inc()
		return remote.LeaseReply{Granted: true, Token: l.token, TTLms: t.ttl.Milliseconds()}
	}
	t.next++
	t.leases[key] = &lease{holder: holder, token: t.next, expires: now.Add(t.ttl)}
	t.m.leasesGranted.Inc()
	t.log.Info("lease granted", "key", key, "holder", holder, "token", t.next)
	return remote.LeaseReply{Granted: true, Token: t.next, TTLms: t.ttl.Milliseconds()}
}

// release ends holder's lease on key, once its entry is stored or its build failed.
func (t *leaseTable) release(key string, token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.leases[key]; l != nil && l.token == token {
		delete(t.leases, key)
		t.log.Info("lease released", "key", key, "holder", l.holder, "token", token)
	}
}

// fenced reports whether an AC update of key carrying token must be refused:
// a lease newer than token was granted. An update without a token (0: a
// client that does not use leases, Bazel) is never fenced.
func (t *leaseTable) fenced(key string, token uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.leases[key]
	if token != 0 && l != nil && token < l.token {
		t.m.fencingRefused.Inc()
		t.log.Warn("action cache update refused: fencing token older than the lease's", "key", key, "token", token, "lease_token", l.token, "holder", l.holder)
		return true
	}
	return false
}
