package actions

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
)

// Build-once on one cache (docs/build-once.md): the build command claims each
// build with the artifact's build lock in the cache (cache.BuildLock), the local
// form of the server's build-once leases (lease.go). The session's own process
// holds it, from just before the build job starts until the loop has booked the
// job's end: the job is a child that dies with it (Pdeathsig), so a session
// killed with -9 frees its locks at once and leaves nothing committing behind
// them, and a job killed alone ends its claim through the loop at once. A
// suspended session keeps its locks: the sessions waiting for them say so.

// buildClaims claims builds for a session of project (Build.Claim).
type buildClaims struct {
	c           *cache.Cache
	project     string
	retryFailed bool
	warned      atomic.Bool // the locks failed once: said once
}

// claim tries the artifact's build lock: taken, the build starts unless another
// process committed the artifact meanwhile; held by another process, the element
// waits for it.
func (b *buildClaims) claim(it *queues.Item) queues.Claim {
	e, again := it.Element, b.retryFailed || it.Retried
	project, name := e.ArtifactName(b.project)
	l, err := b.c.BuildLock(project, name, e.Key)
	if err != nil {
		return b.unlocked(err)
	}
	ok, err := l.TryLock()
	switch {
	case err != nil:
		l.Close()
		return b.unlocked(err)
	case !ok:
		return queues.Claim{Outcome: queues.Busy,
			Text: fmt.Sprintf("waiting for another builder of %s (its build lock is held by another gantry process on the cache %s; it is reused once built)", e.Name, b.c.Root),
			Wait: func(stop <-chan struct{}) queues.Claim { return b.wait(l, e, stop) }}
	}
	return b.found(l, e, again)
}

// wait blocks until the other process lets the lock go (it committed, gave up or
// died) or stop is closed, on its own goroutine: the lock's wait is the kernel's.
func (b *buildClaims) wait(l *cache.BuildLock, e *element.Element, stop <-chan struct{}) queues.Claim {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := l.Lock(ctx); err != nil {
		l.Close()
		if ctx.Err() != nil {
			return queues.Claim{Outcome: queues.Busy} // the session ended
		}
		return b.unlocked(err)
	}
	return b.found(l, e, false)
}

// found, with the lock held, looks for what another process committed: its
// artifact is reused, and so is its cached failure unless again says that this
// session builds a cached failure again (--retry-failed, or the user's retry of
// its own failed build) and it did not wait for another builder: the failure
// found is then the one to build again. Otherwise the lock is this session's
// until its build job has ended.
func (b *buildClaims) found(l *cache.BuildLock, e *element.Element, again bool) queues.Claim {
	project, name := e.ArtifactName(b.project)
	a, err := b.c.Lookup(project, name, e.Key)
	switch {
	case err != nil:
		// Absent, or a ref that cannot be read: the build commits a new one.
	case a.Success:
		l.Close()
		return queues.Claim{Outcome: queues.Built}
	case !again:
		l.Close()
		return queues.Claim{Outcome: queues.BuiltFailed,
			Text: fmt.Sprintf("the build of %s failed in another gantry process on this cache, and its failure is cached: `gantry artifact log %s` shows its log, --retry-failed builds it again", e.Name, e.Name)}
	}
	return queues.Claim{Outcome: queues.Claimed, Release: l.Close}
}

// unlocked is the claim of a build whose lock could not be taken (a filesystem
// without locks): it is built anyway, as without build-once locks, with a
// warning the first time.
func (b *buildClaims) unlocked(err error) queues.Claim {
	cl := queues.Claim{Outcome: queues.Claimed}
	if !b.warned.Swap(true) {
		cl.Text = fmt.Sprintf("%v: building without build-once locks, so another gantry process on this cache may build the same elements at the same time", err)
	}
	return cl
}
