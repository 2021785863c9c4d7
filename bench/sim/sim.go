// Package sim runs the scheduler loop in simulated time: the real loop and the real
// build rules, jobs that last exactly what they are told. bench/makespan measures the
// build order with it, and its tests pin the order policy.
package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/resources"
)

// Options says how to run a plan in simulated time (Run).
type Options struct {
	// Queues are the queues the plan goes through: the session's own Fetch and
	// Build rules (Queues), with payloads that cost nothing. Only Build jobs take
	// time.
	Queues   []queues.Queue
	Builders int
	// Duration is how long an item's build job runs (its real cost, not its estimate).
	Duration func(it *queues.Item) time.Duration
	// Overhead is added to every build job: the per-job cost of the real runner.
	Overhead time.Duration
}

// Run runs the real scheduler loop on items (a plan from queues.Plan, with its
// priorities) through sim's queues, with jobs that take the simulated time sim says
// and cost nothing else, and returns the makespan in simulated time. The order
// jobs start in is the loop's own, so a makespan far from the lower bound
// max(critical path, work / builders) is the policy's doing, never overhead's. Every
// item must have its sources (it is a measuring tool: nothing is fetched).
//
// The loop runs on its own goroutine as in a session; Run drives it from the
// caller's, one job end at a time, earliest simulated end first (ties: first started).
func Run(items []*queues.Item, sim Options) (time.Duration, error) {
	r := &simRunner{duration: map[string]time.Duration{}, overhead: sim.Overhead}
	for _, it := range items {
		r.duration[it.Name()] = sim.Duration(it)
	}
	ends := make(chan string, len(items)+1)
	s := queues.New(queues.Config{
		Project: "simulation",
		Queues:  sim.Queues,
		Items:   items,
		Pool: resources.NewPool(map[resources.Resource]int{
			resources.Process: sim.Builders, resources.Download: 1, resources.Cache: 0,
		}),
		Runner: r,
		Publish: func(e queues.Event) {
			if end, ok := e.(queues.JobEnd); ok {
				ends <- end.JobID
			}
		},
	})
	summary := make(chan *queues.Summary, 1)
	go func() { summary <- s.Run() }()
	// A command is handled after the turn that followed every earlier message: once
	// Do returns, every job that turn could start has started.
	s.Do(queues.CmdResume)
	for {
		j := r.next()
		if j == nil {
			break
		}
		j.out <- job.Outcome{Result: job.Result{OK: true}, Elapsed: j.end - j.start}
		for id := <-ends; id != j.id; id = <-ends {
		}
		s.Do(queues.CmdResume)
	}
	sum := <-summary
	if len(sum.Failed) > 0 || len(sum.NotStarted) > 0 {
		return r.now, fmt.Errorf("simulating the plan: %d elements failed and %d did not start", len(sum.Failed), len(sum.NotStarted))
	}
	return r.now, nil
}

// simRunner starts jobs in simulated time. Start runs on the loop's goroutine, next
// on Run's.
type simRunner struct {
	duration map[string]time.Duration
	overhead time.Duration

	mu      sync.Mutex
	now     time.Duration
	seq     int
	running []*simJob
}

type simJob struct {
	r          *simRunner
	id         string
	seq        int
	start, end time.Duration
	work       time.Duration // what it takes once started (or opened, if gated)
	gated      bool          // waits at its gate: no end until Open
	out        chan job.Outcome
}

func (r *simRunner) Start(spec job.Spec, _ func(job.Message)) (queues.Running, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	j := &simJob{r: r, id: spec.ID, seq: r.seq, start: r.now, out: make(chan job.Outcome, 1), gated: spec.Gated}
	if spec.Action == string(queues.Build) {
		j.work = r.duration[spec.Element] + r.overhead
	}
	if !j.gated {
		j.end = r.now + j.work
		r.running = append(r.running, j)
	}
	return j, nil
}

// Open starts a gated job's clock: preparing costs nothing here, so all of its time
// and overhead come after its gate.
func (j *simJob) Open() error {
	r := j.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if j.gated {
		j.gated = false
		j.start, j.end = r.now, r.now+j.work
		r.running = append(r.running, j)
	}
	return nil
}

// next takes the running job that ends first and moves the clock to its end; nil
// when nothing runs.
func (r *simRunner) next() *simJob {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.running) == 0 {
		return nil
	}
	i := 0
	for k, j := range r.running {
		if j.end < r.running[i].end || (j.end == r.running[i].end && j.seq < r.running[i].seq) {
			i = k
		}
	}
	j := r.running[i]
	r.running = slices.Delete(r.running, i, i+1)
	r.now = j.end
	return j
}

func (j *simJob) Suspend() error    { return nil }
func (j *simJob) Resume() error     { return nil }
func (j *simJob) Terminate() error  { return nil }
func (j *simJob) Kill() error       { return nil }
func (j *simJob) Wait() job.Outcome { return <-j.out }
