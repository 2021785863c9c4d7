package actions

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"golang.org/x/sys/unix"
)

// Group commits (cache.GroupCommitter). A successful build job of a session with
// GroupCommits stores its blobs and record and ends without a syncfs of its own: its
// result carries the ref to write (groupResult), and the session's runner places it
// through the session's GroupCommitter — one syncfs for every job that ended while
// the last one ran — before it hands the job's outcome to the scheduler. Until then
// the job is running as far as the scheduler knows (its element goes on to Push, and
// its CACHE token goes back, only when the ref is durable), but its worker is free:
// the runner says so with queues.MessageCommitting, so it no longer counts among the
// tails that bound the workers.
//
// A job's blobs are garbage to a cleanup until their ref is placed, and a job lets
// the cache lock go when it ends: the session takes the cache lock shared when a
// build job says its artifact is available (the job holds it then, so no cleanup
// can be running) and keeps it while any job's ref waits. The job waits for that
// before it lets its own lock go: its spec names a byte of the session's ticket
// file, which the session locks (fcntl, dropped if it dies) when it makes the
// payload and unlocks once it holds the cache lock for the job; the job takes the
// byte shared before it ends. Where the session could not take the lock, it takes
// it at the commit and checks that every blob is still there.

// GroupCommits places the refs of a session's build jobs, many for one syncfs.
type GroupCommits struct {
	c *cache.Cache
	g *cache.GroupCommitter

	mu   sync.Mutex
	held int         // jobs between available and their commit's end
	lock *cache.Lock // held shared while held > 0, when it could be taken
	// tickets is the ticket file, made at the first payload; next is the byte of
	// the next job's ticket, and locked the locked ticket of each element's job.
	tickets *os.File
	next    int64
	locked  map[string]int64
}

// commitTicket is what a build job waits on before it ends (see GroupCommits).
type commitTicket struct {
	Path string `json:"path"`
	Byte int64  `json:"byte"`
}

// ticket locks a new ticket for element's build job.
func (g *GroupCommits) ticket(element string) (*commitTicket, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tickets == nil {
		f, err := os.OpenFile(g.c.TempName("commits"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, fmt.Errorf("making the session's commit tickets: %w", err)
		}
		g.tickets, g.locked = f, map[string]int64{}
	}
	if n, ok := g.locked[element]; ok {
		g.unlockTicket(n) // a job that never started
	}
	n := g.next
	g.next++
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: n, Len: 1}
	if err := unix.FcntlFlock(g.tickets.Fd(), unix.F_SETLK, &lk); err != nil {
		return nil, fmt.Errorf("locking a commit ticket in %s: %w", g.tickets.Name(), err)
	}
	g.locked[element] = n
	return &commitTicket{Path: g.tickets.Name(), Byte: n}, nil
}

// letGo unlocks the ticket of element's job, if locked.
func (g *GroupCommits) letGo(element string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n, ok := g.locked[element]; ok {
		g.unlockTicket(n)
	}
}

func (g *GroupCommits) unlockTicket(n int64) {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: io.SeekStart, Start: n, Len: 1}
	_ = unix.FcntlFlock(g.tickets.Fd(), unix.F_SETLK, &lk) // cannot fail on a held lock
	for e, m := range g.locked {
		if m == n {
			delete(g.locked, e)
		}
	}
}

// Close removes the ticket file; the session's end.
func (g *GroupCommits) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tickets != nil {
		os.Remove(g.tickets.Name())
		g.tickets.Close()
		g.tickets = nil
	}
}

// waitTicket waits until the session has let t go: it then holds the cache lock
// for the job's blobs.
func waitTicket(t *commitTicket) error {
	f, err := os.Open(t.Path)
	if err != nil {
		return fmt.Errorf("waiting for the session to take over the commit: %w", err)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: t.Byte, Len: 1}
	for {
		err := unix.FcntlFlock(f.Fd(), unix.F_SETLKW, &lk)
		if err != unix.EINTR {
			if err != nil {
				return fmt.Errorf("waiting for the session to take over the commit: %w", err)
			}
			return nil
		}
	}
}

// NewGroupCommits returns the group commits of a session on c.
func NewGroupCommits(c *cache.Cache) *GroupCommits {
	return &GroupCommits{c: c, g: c.NewGroupCommitter()}
}

// groupResult is a group-committing build job's result data: the ref the session
// places, and what the job's result data would be without group commits.
type groupResult struct {
	Commit   *cache.PendingRef `json:"commit"`
	Recorded json.RawMessage   `json:"recorded,omitempty"`
}

// Runner wraps r: the build jobs it starts have their refs placed by g.
func (g *GroupCommits) Runner(r queues.Runner) queues.Runner { return &groupRunner{r, g} }

type groupRunner struct {
	queues.Runner
	g *GroupCommits
}

// Close closes the wrapped runner if it is an io.Closer, and removes the ticket file.
func (r *groupRunner) Close() error {
	r.g.Close()
	if c, ok := r.Runner.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (r *groupRunner) Start(spec job.Spec, onMessage func(job.Message)) (queues.Running, error) {
	if spec.Action != string(queues.Build) {
		return r.Runner.Start(spec, onMessage)
	}
	gr := &groupRunning{g: r.g, onMessage: onMessage, element: spec.Element}
	running, err := r.Runner.Start(spec, gr.message)
	if err != nil {
		return nil, err
	}
	gr.Running = running
	return gr, nil
}

// groupRunning is a build job whose ref the session places.
type groupRunning struct {
	queues.Running
	g         *GroupCommits
	onMessage func(job.Message)
	element   string
	// holds: it counts in g.held; covered: the session has held the cache lock since
	// (set on its worker's messages' goroutine, read after Wait).
	holds, covered bool
}

// message passes m on; at available, the session holds the cache lock for the ref.
func (r *groupRunning) message(m job.Message) {
	if m.Type == job.MessageAvailable && !r.holds {
		r.holds = true
		r.covered = r.g.hold()
		r.g.letGo(r.element) // the job can end: its blobs are the session's to keep
	}
	r.onMessage(m)
}

// Wait is the job's outcome once its ref, if the session places it, is durable.
func (r *groupRunning) Wait() job.Outcome {
	out := r.Running.Wait()
	r.g.letGo(r.element)
	if r.holds {
		defer r.g.release()
	}
	var res groupResult
	if !out.Result.OK || json.Unmarshal(out.Result.Data, &res) != nil || res.Commit == nil {
		return out
	}
	r.onMessage(job.Message{Type: queues.MessageCommitting})
	if err := r.g.commit(*res.Commit, r.covered); err != nil {
		out.Result = job.Result{Error: err.Error(), CacheBytes: out.Result.CacheBytes}
		return out
	}
	out.Result.Data = res.Recorded
	return out
}

// hold takes the cache lock shared for a job that is about to leave its ref to the
// session, unless the session holds it already. It reports whether the session
// holds it: it then does until the job's release.
func (g *GroupCommits) hold() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held++
	if g.lock == nil {
		g.lock, _ = g.c.TryLock(cache.Shared) // nil if it cannot: commit checks then
	}
	return g.lock != nil
}

// release ends a hold; the last one lets the lock go.
func (g *GroupCommits) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held--
	if g.held == 0 && g.lock != nil {
		g.lock.Unlock()
		g.lock = nil
	}
}

// commit places p's ref and returns once it is durable. Unless the session has
// held the cache lock since the job's available (covered), it takes it now and
// checks that p's blobs are all there still: a cleanup may have come between.
func (g *GroupCommits) commit(p cache.PendingRef, covered bool) error {
	if !covered {
		lock, err := g.c.Lock(context.Background(), cache.Shared, nil)
		if err != nil {
			return fmt.Errorf("committing artifact %s/%s: %w", p.Project, p.Element, err)
		}
		defer lock.Unlock()
		if err := g.c.Stored(p); err != nil {
			return err
		}
	}
	return g.g.Commit(p)
}

// groupCommitResult stores a's blobs and record and leaves its ref to the session:
// the job's result says which (groupResult).
func groupCommitResult(c *cache.Cache, a *cache.Artifact, t *commitTicket, added int64, recorded json.RawMessage) (job.Result, error) {
	p, err := c.StoreBlobs(a)
	if err != nil {
		return job.Result{}, err
	}
	if err := waitTicket(t); err != nil {
		return job.Result{}, err
	}
	data, err := json.Marshal(groupResult{Commit: &p, Recorded: recorded})
	if err != nil {
		return job.Result{}, fmt.Errorf("caching the artifact of %s: %w", a.Element, err)
	}
	return job.Result{OK: true, CacheBytes: added, Data: data}, nil
}
