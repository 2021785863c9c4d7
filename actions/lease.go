package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
)

// Build-once leases, the client side (docs/serve.md, "Build-once leases"). When a push
// remote is gantry's own server, the Pull queue's job for an element no remote had
// asks it for the element's lease, once the element's build dependencies are cached:
//   - the entry is there (another session pushed it since the plan): the job pulls it;
//   - granted: the job is skipped and the element is fetched and built here; the
//     session renews the lease from a goroutine (renew) until the push job ends, and
//     the push carries the lease's fencing token;
//   - held by another session: the job ends waiting (job.Result.WaitMs) and runs again
//     after the server's wait, holding no token meanwhile.
// A session that dies stops renewing: the lease expires and a waiter takes it over.
// Sessions sharing one cache do the same locally with build locks (build_claims.go).

// leaseProbeKey is asked about by ProbeLeases: no artifact has it.
const leaseProbeKey = "gantry-lease-probe"

const (
	// leaseProbeTimeout bounds ProbeLeases' question to one remote; a remote that
	// does not answer in time is not used for leases.
	leaseProbeTimeout = 30 * time.Second
	// leaseReleaseTimeout bounds giving a lease up when its renewals stop; a lease
	// not given up expires on the server after its TTL.
	leaseReleaseTimeout = 5 * time.Second
	// minRenewEvery is the shortest renewal period, whatever TTL the server grants.
	minRenewEvery = 10 * time.Millisecond
)

// ProbeLeases finds the first push remote that grants leases (over HTTP or gRPC), by
// giving up a lease nobody holds: gantry's server answers it, others answer 404 or
// 405 (HTTP) or UNIMPLEMENTED (gRPC). slots is how many builds the session runs at
// once (builders and remote-execution slots): it holds and asks for at most that
// many leases, so that what it leases it starts building at once and the rest is
// left for other sessions. Called before the session, when something is to be built.
func (rs *Remotes) ProbeLeases(slots int) {
	rs.slots = max(slots, 1)
	for _, spec := range rs.up(true) {
		leaser, ok := rs.store(spec).(remote.Leaser)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), leaseProbeTimeout)
		err := leaser.ReleaseLease(ctx, leaseProbeKey, 0)
		cancel()
		if err == nil {
			rs.lease = &spec
			return
		}
	}
}

// leaseSlotFree says whether the session may ask for one more lease: the leases it
// holds (each an element it builds or pushes) and the asks in flight leave a slot.
func (rs *Remotes) leaseSlotFree() bool {
	return len(rs.leases)+len(rs.asking) < rs.slots
}

// leasing says whether a pull of it asks for its lease (PullQueue.leasing):
// a lease remote is up and it was not found on a remote at planning.
func (rs *Remotes) leasing(it *queues.Item) bool {
	return rs.lease != nil && !rs.down[rs.lease.Display()] && !it.Remote && !it.Cached
}

// bookLease books what a pull job learnt about leases: a lease granted to this
// session is held (and renewed) until its push ends.
func (rs *Remotes) bookLease(it *queues.Item, pr pullResult) {
	if pr.NoLeases {
		rs.lease = nil
	}
	if pr.Lease == nil || rs.lease == nil {
		return
	}
	leaser, ok := rs.store(*rs.lease).(remote.Leaser)
	if !ok {
		return
	}
	l := &heldLease{key: it.Element.Key, token: pr.Lease.Token, stop: make(chan struct{})}
	rs.leases[l.key] = l
	rs.renewing.Add(1)
	go func() {
		defer rs.renewing.Done()
		l.renew(leaser, time.Duration(pr.Lease.TTLms)*time.Millisecond/3)
	}()
}

// LeaseJobEnded ends a pull's ask, and releases the lease of an element whose
// push ended, or that failed for good or was stopped (the build command's OnJobEnd,
// on the scheduler goroutine). A job that will be retried keeps the lease.
func (rs *Remotes) LeaseJobEnded(end queues.JobEnd) {
	if end.Action == queues.Pull {
		delete(rs.asking, end.Key)
	}
	switch {
	case end.Result == queues.ResultWaiting, end.WillRetry:
	case end.Action == queues.Push || end.Result == queues.ResultTerminated || end.Result == queues.ResultFailure:
		rs.release(end.Key)
	}
}

// release stops renewing the lease of key; its goroutine gives it up (after a push
// that stored the entry the server has ended it already: giving it up again does
// nothing). It does not wait for the network: close does.
func (rs *Remotes) release(key string) {
	if l := rs.leases[key]; l != nil {
		delete(rs.leases, key)
		close(l.stop)
	}
}

// heldLease is a lease this session holds. Only its renew goroutine uses the store.
type heldLease struct {
	key   string
	token uint64
	stop  chan struct{} // closed by release
}

// renew renews the lease every period until stop, then gives it up. A renewal the
// server refuses (the lease expired and was taken over) ends the renewals: the
// push's fencing token is then refused, and the successor's entry is kept.
func (l *heldLease) renew(leaser remote.Leaser, every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-l.stop; cancel() }() // cuts a renewal in flight
	t := time.NewTicker(max(every, minRenewEvery))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, rcancel := context.WithTimeout(context.Background(), leaseReleaseTimeout)
			leaser.ReleaseLease(rctx, l.key, l.token)
			rcancel()
			return
		case <-t.C:
			if reply, err := leaser.Lease(ctx, l.key, l.token); err == nil && !reply.Granted {
				t.Stop() // lost: nothing more to renew
			}
		}
	}
}

// askLease is the start of a pull job with a lease remote: it asks for the element's
// lease. pull true: the entry is there, or the lease could not be asked about; the
// job goes on to pull. Otherwise res is the job's result: skipped with the lease
// granted (the element is built here), or waiting for another session's build.
func askLease(ctx context.Context, ps *pullSpec, pr *pullResult, r *job.Reporter) (res job.Result, pull bool) {
	store, err := remote.Open(*ps.Lease)
	if err != nil {
		return res, true
	}
	defer store.Close()
	leaser, ok := store.(remote.Leaser)
	if !ok {
		return res, true
	}
	r.Status("asking " + store.Name() + " for the lease of " + ps.Element)
	reply, err := leaser.Lease(ctx, ps.Key, 0)
	switch {
	case errors.Is(err, remote.ErrNoLeases):
		pr.NoLeases = true
		r.Log(err.Error())
		return res, true
	case err != nil:
		r.Log(err.Error()) // the pull meets the same remote, and reports it
		return res, true
	case reply.Present:
		r.Log(fmt.Sprintf("%s has %s now", store.Name(), ps.Element))
		return res, true
	case reply.Granted:
		r.Log(fmt.Sprintf("%s granted the lease of %s (fencing token %d): building it", store.Name(), ps.Element, reply.Token))
		pr.Lease = &reply
		data, _ := json.Marshal(pr) // plain fields only: it always encodes
		return job.Result{OK: true, Skipped: true, Error: fmt.Sprintf("this session builds it (lease of %s)", store.Name()), Data: data}, false
	}
	holder := reply.Holder
	if holder == "" {
		holder = "another session"
	}
	why := fmt.Sprintf("waiting for another builder of %s (lease held by %s on %s)", ps.Element, holder, store.Name())
	r.Log(why)
	return job.Result{Error: why, WaitMs: leaseWait(reply.WaitMs)}, false
}

// leaseWait is how long a pull waits before asking again: the server's wait (gantry's
// server says the time left on the holder's lease, at most a second, so that a
// finished build is pulled and an expired lease taken over at once), at least
// minLeaseWait.
func leaseWait(serverMs int64) int64 { return max(serverMs, minLeaseWait.Milliseconds()) }

// minLeaseWait is the shortest wait of leaseWait.
const minLeaseWait = 50 * time.Millisecond
