package actions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/backoff"
	"github.com/gantry-build/gantry/queues"
)

// Remotes is a session's remotes and which of them are down. The plan's lookups use
// it before the scheduler runs; afterwards only the queues' callbacks do, on the
// scheduler goroutine.
type Remotes struct {
	project string
	specs   []remote.Spec
	down    map[string]bool // by spec.Display()
	// downWarned is, by spec.Display(), the warning that marked it down.
	downWarned map[string]string
	warn       func(string) // a warning before the session starts
	mu         sync.Mutex   // guards down and stores during the plan's parallel lookups
	stores     map[string]remote.Store
	retries    int
	backoff    func() func(attempt int) time.Duration // asked at each lookup for its retries' waits; a nil answer: from 1s, doubling
	from       map[*queues.Item]string                // the remote each item was pulled from
	// lease is the push remote that grants build-once leases (ProbeLeases); nil: none.
	lease    *remote.Spec
	leases   map[string]*heldLease // the leases this session holds, by cache key
	asking   map[string]bool       // the keys whose pull job is asking for the lease now
	slots    int                   // builder and remote-execution slots: leases held and asked for at once, at most
	renewing sync.WaitGroup        // their renew goroutines
	// wrong is, by cache key, the push remotes that served wrong bytes for its
	// artifact and the blobs they were wrong about (none: its entry): a push
	// repairs them (pullSpec.Repair).
	wrong map[string]map[string][]cache.Digest
	// wrongPulls are the elements pulled intact from a remote after another served
	// wrong bytes for them: the pull command fails.
	wrongPulls []string
}

// NewRemotes is the remotes of a session of project: specs in order, network jobs
// retried retries times, each lookup asking backoff for the waits between its tries,
// warn told of a remote found down before the session starts.
func NewRemotes(project string, specs []remote.Spec, retries int, backoff func() func(attempt int) time.Duration, warn func(string)) (*Remotes, error) {
	idle, err := NetIdleTimeout()
	if err != nil {
		return nil, err
	}
	specs = withIdleTimeout(specs, idle)
	return &Remotes{project: project, specs: specs, down: map[string]bool{}, downWarned: map[string]string{}, warn: warn, stores: map[string]remote.Store{}, retries: retries, backoff: backoff,
		from: map[*queues.Item]string{}, leases: map[string]*heldLease{}, asking: map[string]bool{}, wrong: map[string]map[string][]cache.Digest{}}, nil
}

// HasPush says whether a remote is pushed to.
func (rs *Remotes) HasPush() bool {
	for _, r := range rs.specs {
		if r.Push {
			return true
		}
	}
	return false
}

// up lists the remotes not marked down, push remotes only with push.
func (rs *Remotes) up(push bool) []remote.Spec {
	var out []remote.Spec
	for _, r := range rs.specs {
		if !rs.down[r.Display()] && (r.Push || !push) {
			out = append(out, r)
		}
	}
	return out
}

// WrongPulls are the elements pulled intact from a remote after another served wrong
// bytes for them: the pull command fails.
func (rs *Remotes) WrongPulls() []string { return rs.wrongPulls }

// Close gives up the leases the session holds, waits for their renew goroutines and
// closes the stores.
func (rs *Remotes) Close() {
	for key := range rs.leases {
		rs.release(key)
	}
	rs.renewing.Wait()
	for _, st := range rs.stores {
		st.Close()
	}
}

// Lookup says which of es some remote has (queues.PlanOptions.OnRemote): bounded
// parallel entry reads, remotes in order. A remote that stays unavailable after the
// network retries, or refuses the credentials, is marked down with one warning.
func (rs *Remotes) Lookup(es []*element.Element) []bool {
	hits := make([]bool, len(es))
	if len(es) == 0 {
		return hits
	}
	wait := rs.retryWaits()
	var g errgroup.Group
	g.SetLimit(16)
	for i, e := range es {
		g.Go(func() error {
			hits[i] = rs.firstRemote(wait, func(store remote.Store) error {
				_, err := store.GetEntry(context.Background(), e.Key)
				return err
			})
			return nil
		})
	}
	g.Wait()
	return hits
}

// retryWaits is what one lookup waits between the tries of an unavailable remote.
func (rs *Remotes) retryWaits() func(attempt int) time.Duration {
	if wait := rs.backoff(); wait != nil {
		return wait
	}
	return func(attempt int) time.Duration { return backoff.Exponential(backoff.Base, attempt) }
}

// firstRemote asks the remotes not down, in order, until ask succeeds on one, and
// reports whether it did; wait (retryWaits) says how long to wait before a retry. A remote
// that lacks what is asked (or serves it damaged) is passed over; one that stays
// unavailable after the network retries, or refuses the credentials, is marked down
// with one warning.
func (rs *Remotes) firstRemote(wait func(attempt int) time.Duration, ask func(remote.Store) error) bool {
	for _, spec := range rs.specs {
		store := rs.store(spec)
		if store == nil {
			continue
		}
		for attempt := 1; ; attempt++ {
			err := ask(store)
			switch {
			case err == nil:
				return true
			case errors.Is(err, cache.ErrNotFound) || remote.IsKind(err, remote.Corrupt):
			case remote.IsKind(err, remote.Unavailable) && attempt <= rs.retries:
				time.Sleep(wait(attempt))
				continue
			default:
				rs.markDown(spec, err)
			}
			break
		}
	}
	return false
}

// store opens spec's store once; nil when it is down or cannot be opened.
func (rs *Remotes) store(spec remote.Spec) remote.Store {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	name := spec.Display()
	if rs.down[name] {
		return nil
	}
	if st := rs.stores[name]; st != nil {
		return st
	}
	st, err := remote.Open(spec)
	if err != nil {
		rs.down[name] = true
		rs.downWarned[name] = fmt.Sprintf("%v: not used in this session", err)
		rs.warn(rs.downWarned[name])
		return nil
	}
	rs.stores[name] = st
	return st
}

// markDown marks a remote down once, with a warning (before the session) saying why.
func (rs *Remotes) markDown(spec remote.Spec, err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.down[spec.Display()] {
		return
	}
	rs.down[spec.Display()] = true
	rs.downWarned[spec.Display()] = downWarning(err.Error())
	rs.warn(rs.downWarned[spec.Display()])
}

// PushDownWarnings maps each warning that marked a push remote down to the remote
// (its URL without userinfo): a build session reports those remotes apart (the JSON
// notice's remote-down). Not for use while the plan's lookups run.
func (rs *Remotes) PushDownWarnings() map[string]string {
	out := map[string]string{}
	for _, r := range rs.specs {
		if w, ok := rs.downWarned[r.Display()]; ok && r.Push {
			out[w] = r.Display()
		}
	}
	return out
}

func downWarning(why string) string {
	return why + "; the remote is not used for the rest of this session: elements are fetched and built instead, and nothing is pushed to it"
}

// withIdleTimeout returns specs with the idle timeout of GANTRY_NET_IDLE_TIMEOUT (idle;
// 0 keeps the default). The pull and push jobs get it in their specs.
func withIdleTimeout(specs []remote.Spec, idle time.Duration) []remote.Spec {
	if idle <= 0 {
		return specs
	}
	out := slices.Clone(specs)
	for i := range out {
		out[i].IdleTimeout = idle
	}
	return out
}

// remoteJobs is what the Pull and Push queues share: the session's remotes, the
// local cache their jobs fill or read, and the remotes' network retries.
type remoteJobs struct {
	rs *Remotes
	c  *cache.Cache
}

func (q remoteJobs) Retries() int { return q.rs.retries }
