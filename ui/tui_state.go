package ui

import (
	"slices"
	"strings"
	"time"

	"github.com/gantry-build/gantry/queues"
)

// sessionClock measures session time without the time every job was suspended.
// Invariant: suspendedAt is zero exactly when the session is not suspended.
type sessionClock struct {
	start       time.Time
	suspendedAt time.Time     // when the current pause began; zero while running
	paused      time.Duration // the pauses that have ended
}

// observe returns the clock after e: SessionStart starts it, Suspended and Resumed
// bracket a pause; other events leave it alone.
func (c sessionClock) observe(e queues.Event) sessionClock {
	switch e := e.(type) {
	case queues.SessionStart:
		return sessionClock{start: e.Time}
	case queues.Suspended:
		if c.suspendedAt.IsZero() {
			c.suspendedAt = e.Time
		}
	case queues.Resumed:
		if !c.suspendedAt.IsZero() {
			c.paused += nonNegative(e.Time.Sub(c.suspendedAt))
			c.suspendedAt = time.Time{}
		}
	}
	return c
}

func (c sessionClock) suspended() bool { return !c.suspendedAt.IsZero() }

// pausedBy is the suspended time from the start of the session until now.
func (c sessionClock) pausedBy(now time.Time) time.Duration {
	if c.suspended() {
		return c.paused + nonNegative(now.Sub(c.suspendedAt))
	}
	return c.paused
}

// elapsed is the session time at now, suspended time excluded.
func (c sessionClock) elapsed(now time.Time) time.Duration {
	if c.start.IsZero() {
		return 0
	}
	return nonNegative(now.Sub(c.start) - c.pausedBy(now))
}

func nonNegative(d time.Duration) time.Duration { return max(d, 0) }

// runningJob is one job of the live area.
type runningJob struct {
	id        string
	action    queues.Action
	element   string
	logPath   string
	attempt   int
	workspace string // it builds from this workspace
	started   time.Time
	pausedAt0 time.Duration // the session's paused time when the job started
	last      string        // the job's last status or log line
	progress  bool          // the job has reported progress
	done      int64
	total     int64 // 0 when unknown
}

// label names the job's element in the list of running jobs, marking a build from a
// workspace.
func (j *runningJob) label() string {
	if j.workspace != "" {
		return j.element + " (workspace)"
	}
	return j.element
}

// elapsed is the job's running time at now, suspended time excluded.
func (j runningJob) elapsed(c sessionClock, now time.Time) time.Duration {
	return nonNegative(now.Sub(j.started) - (c.pausedBy(now) - j.pausedAt0))
}

// sessionState is what the live area shows of the event stream.
//
// Invariant: apply never writes to memory an earlier sessionState value can see
// (jobs is cloned before it changes), so every model value stays as it was.
type sessionState struct {
	project  string
	queues   []queues.Action // pipeline order, from SessionStart
	counts   queues.Counts   // the latest counters
	clock    sessionClock
	jobs     []runningJob // running jobs in the order they started
	held     *queues.Held // the failure waiting for an answer; nil when none
	now      time.Time    // the latest time seen (ticks and events); never goes back
	finished bool         // SessionEnd has arrived

	cleanup *queues.CacheCleanup // the last cache cleanup; nil when none
}

// at returns the state with its notion of now moved forward to t.
func (s sessionState) at(t time.Time) sessionState {
	if t.After(s.now) {
		s.now = t
	}
	return s
}

// apply returns the state after e.
func (s sessionState) apply(e queues.Event) sessionState {
	s.clock = s.clock.observe(e)
	switch e := e.(type) {
	case queues.SessionStart:
		s.project, s.queues = e.Project, e.Queues
		s.counts = queues.Counts{Total: e.Elements}
	case queues.Counts:
		s.counts = e
	case queues.JobStart:
		s.jobs = append(slices.Clip(s.jobs), runningJob{id: e.JobID, action: e.Action, element: e.Element,
			logPath: e.LogPath, attempt: e.Attempt, workspace: e.Workspace, started: e.Time, pausedAt0: s.clock.pausedBy(e.Time)})
	case queues.JobMessage:
		s.jobs = s.updateJob(e.JobID, func(j *runningJob) {
			if e.Kind == "progress" {
				j.progress, j.done, j.total = true, e.Done, e.Total
			}
			if text := lastLine(e.Text); text != "" {
				j.last = text
			}
		})
	case queues.JobEnd:
		if i := s.jobIndex(e.JobID); i >= 0 {
			s.jobs = slices.Delete(slices.Clone(s.jobs), i, i+1)
		}
	case queues.CacheCleanup:
		s.cleanup = &e
	case queues.Held:
		s.held = &e
	case queues.SessionEnd:
		s.finished, s.held = true, nil
	}
	return s.at(queues.TimeOf(e))
}

// answersHeld reports whether c answers a held failure: the scheduler then asks about
// the next one, if any, or resumes the jobs it suspended for the question.
func answersHeld(c queues.Command) bool {
	switch c {
	case queues.CmdContinue, queues.CmdRetry, queues.CmdQuit, queues.CmdTerminate:
		return true
	}
	return false
}

func (s sessionState) jobIndex(id string) int {
	return slices.IndexFunc(s.jobs, func(j runningJob) bool { return j.id == id })
}

// updateJob returns a copy of jobs with the job id changed by f.
func (s sessionState) updateJob(id string, f func(*runningJob)) []runningJob {
	i := s.jobIndex(id)
	if i < 0 {
		return s.jobs
	}
	jobs := slices.Clone(s.jobs)
	f(&jobs[i])
	return jobs
}

// lastLine is the last non-blank line of text, without carriage returns.
func lastLine(text string) string {
	lines := strings.Split(strings.ReplaceAll(text, "\r", "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimRight(lines[i], " \t"); strings.TrimSpace(l) != "" {
			return strings.ReplaceAll(l, "\t", "    ")
		}
	}
	return ""
}
