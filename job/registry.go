package job

import (
	"errors"
	"slices"
	"sync"
)

// Registry is the set of live jobs, so that a session can suspend, resume or
// stop all of them at once, e.g. on exit. The zero value is empty and ready.
// It is safe for concurrent use, so that a last-resort cleanup can run from
// any goroutine. Jobs that have exited may stay in it: signalling them does
// nothing.
type Registry struct {
	mu   sync.Mutex
	jobs []*Job // in the order added
}

// Add adds j. Adding a job twice has no further effect.
func (r *Registry) Add(j *Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.jobs, j) {
		r.jobs = append(r.jobs, j)
	}
}

// Remove removes j, typically once Wait has returned.
func (r *Registry) Remove(j *Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs = slices.DeleteFunc(r.jobs, func(x *Job) bool { return x == j })
}

// Len returns the number of jobs.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}

// Jobs returns the jobs in the order they were added.
func (r *Registry) Jobs() []*Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.jobs)
}

// SuspendAll suspends every job, returning the errors joined.
func (r *Registry) SuspendAll() error { return r.each((*Job).Suspend) }

// ResumeAll resumes every job, returning the errors joined.
func (r *Registry) ResumeAll() error { return r.each((*Job).Resume) }

// TerminateAll terminates every job (SIGTERM, SIGKILL after each job's
// grace period), returning the errors joined. It does not wait.
func (r *Registry) TerminateAll() error { return r.each((*Job).Terminate) }

// KillAll kills every job at once, returning the errors joined.
func (r *Registry) KillAll() error { return r.each((*Job).Kill) }

func (r *Registry) each(f func(*Job) error) error {
	var errs []error
	for _, j := range r.Jobs() {
		if err := f(j); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
