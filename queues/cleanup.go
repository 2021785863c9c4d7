package queues

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gantry-build/gantry/internal/units"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// Cleanup is the action of the cache cleanup job: it takes CACHE exclusively
// (DESIGN.md §5) and is not a queue: the scheduler runs it when the session's
// jobs take the local cache over its quota.
const Cleanup Action = "cleanup"

// cleanupElement is what a cleanup job's events name as their element.
const cleanupElement = "cache"

// CleanupConfig turns on quota keeping in a session.
type CleanupConfig struct {
	Quota    int64 // bytes; the cleanup brings the cache down to LowWater of it
	LowWater int64 // bytes
	Used     int64 // the cache's size when the session starts
	// Deliver says whether an item is something the session delivers (a target
	// or a runtime dependency of one): never removed.
	Deliver func(it *Item) bool
	// Payload is the cleanup job's input, given the artifacts it must keep.
	Payload func(keep []ArtifactKey) (json.RawMessage, error)
}

// ArtifactKey names an artifact: of Project, the element's own ("" for the session's
// project; a junction's sub-project's otherwise).
type ArtifactKey struct {
	Project string `json:"project,omitempty"`
	Element string `json:"element"`
	Key     string `json:"key"`
}

// CleanupResult is what a cleanup job reports in its Result.Data.
type CleanupResult struct {
	Before    int64         `json:"before"`
	After     int64         `json:"after"`
	Freed     int64         `json:"freed"`
	Artifacts int           `json:"artifacts"`
	Short     bool          `json:"short"` // still over the low-water mark: what is left is kept
	Duration  time.Duration `json:"duration-ns"`
	// Live and LiveBytes: artifacts kept because running gantry sessions (other
	// processes on the cache) need them.
	Live      int   `json:"live,omitempty"`
	LiveBytes int64 `json:"live-bytes,omitempty"`
}

// CacheCleanup: a cleanup job ended; what it freed and how long it took.
type CacheCleanup struct {
	Base
	CleanupResult
	Quota int64
	Error string // the cleanup failed (the session goes on)
}

// cleanupState is the scheduler's book of quota keeping. Loop goroutine only.
type cleanupState struct {
	used      int64 // estimated size of the cache now
	threshold int64 // a cleanup starts when used goes above it
	pending   bool  // a cleanup is wanted and waits for CACHE
	running   bool
	warned    bool // the "cache too small for this session" warning was given
	disabled  bool // a cleanup failed: not tried again this session
}

// cleanupOwner names the cleanup's exclusive interest in the pool.
const cleanupOwner = "cache cleanup"

func (s *Scheduler) initCleanup() {
	c := s.cfg.Cleanup
	if c == nil || c.Quota <= 0 {
		return
	}
	s.clean.used, s.clean.threshold = c.Used, c.Quota
	s.clean.pending = c.Used > c.Quota
}

// noteCacheBytes books what a job added to the cache and asks for a cleanup
// when the quota is passed.
func (s *Scheduler) noteCacheBytes(res job.Result) {
	c := s.cfg.Cleanup
	if c == nil || c.Quota <= 0 || res.CacheBytes <= 0 {
		return
	}
	s.clean.used += res.CacheBytes
	if s.clean.used > s.clean.threshold && !s.clean.running && !s.clean.disabled {
		s.clean.pending = true
	}
}

// harvestCleanup starts the pending cleanup when CACHE can be taken
// exclusively. While it cannot, the pool holds the cleanup's exclusive
// interest: running builds keep their tokens and finish, no new one starts,
// and the cleanup cannot starve.
func (s *Scheduler) harvestCleanup() {
	if !s.clean.pending || s.clean.running {
		return
	}
	exclusive := []resources.Resource{resources.Cache}
	tokens, ok := reserveTokens(s.cfg.Pool, resources.Request{Exclusive: exclusive})
	if !ok {
		s.cfg.Pool.RegisterExclusiveInterest(exclusive, cleanupOwner)
		return
	}
	s.cfg.Pool.UnregisterExclusiveInterest(exclusive, cleanupOwner)
	s.clean.pending = false
	a := &activeJob{id: s.nextJobID(Cleanup), tokens: tokens}
	a.logPath = filepath.Join(s.cfg.LogDir, s.cfg.Project, fmt.Sprintf("cleanup-%d.log", s.seq))
	// What it keeps is what the session needs now: published too, so that
	// the cleanup, which reads what every live session needs, reads this
	// session's as it is, not as it was at the start.
	keep := s.keep()
	s.publishNeeds(keep)
	payload, err := s.cfg.Cleanup.Payload(keep)
	if err == nil {
		err = s.startJob(a, Cleanup, cleanupElement, job.Input{Payload: payload})
	}
	if err != nil {
		tokens.releaseAll()
		s.cleanupFailed(fmt.Sprintf("cannot start the cache cleanup: %v", err))
		return
	}
	s.clean.running = true
	s.cfg.Publish(JobStart{Base: Base{a.started}, JobID: a.id, Action: Cleanup, Element: cleanupElement, LogPath: a.logPath, Attempt: 1})
}

// keep lists the artifacts the cleanup must not remove: what the session
// delivers, what is still in the pipeline (waiting to be built, pushed), and
// what an element still to be built stages.
func (s *Scheduler) keep() []ArtifactKey {
	var keep []ArtifactKey
	seen := map[*Item]bool{}
	add := func(it *Item) {
		if !seen[it] && it.Element.Key != "" {
			seen[it] = true
			project, name := it.Element.ArtifactName("")
			keep = append(keep, ArtifactKey{Project: project, Element: name, Key: it.Element.Key})
		}
	}
	for _, it := range s.cfg.Items {
		unfinished := it.state.queued() && !it.Failed && !it.stopped()
		if unfinished || s.cfg.Cleanup != nil && s.cfg.Cleanup.Deliver(it) {
			add(it)
		}
		if unfinished && !it.Cached {
			for _, d := range it.Stage {
				add(d)
			}
		}
	}
	return keep
}

// hasWork reports whether the session starts with something to build, pull or
// push: a null build publishes no needs (Config.Needs).
func (s *Scheduler) hasWork() bool {
	if s.queueOf(Push) != nil {
		return true
	}
	for _, it := range s.cfg.Items {
		if !it.Cached && !it.Failed {
			return true
		}
	}
	return false
}

// publishNeeds tells Config.Needs what the session needs now (s.keep()).
// Failing, it warns: a cleanup in another process may then take what the
// session needs, which it heals.
func (s *Scheduler) publishNeeds(keep []ArtifactKey) {
	if s.cfg.Needs == nil {
		return
	}
	if err := s.cfg.Needs(keep); err != nil {
		s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Text: err.Error() + "; a cache cleanup in another process may remove what this session needs"})
	}
}

// describe names a job's action and element; the cleanup job has no item.
func (a *activeJob) describe() (Action, string) {
	if a.item == nil {
		return Cleanup, cleanupElement
	}
	return a.qs.q.Action(), a.item.Name()
}

// jobNotice publishes what a job wants every display to show (waiting for the
// cache lock of another process; a warning).
func (s *Scheduler) jobNotice(element string, m job.Message) {
	s.cfg.Publish(Notice{Base: Base{m.Time}, Level: cmp.Or(m.Level, "info"), Element: element, Text: m.Text})
}

// cleanupMessage forwards a cleanup job's status lines and notices.
func (s *Scheduler) cleanupMessage(a *activeJob, m job.Message) {
	switch m.Type {
	case job.MessageNotice:
		s.jobNotice(cleanupElement, m)
	case job.MessageStatus, job.MessageLog, job.MessageProgress:
		s.cfg.Publish(JobMessage{Base: Base{m.Time}, JobID: a.id, Action: Cleanup, Element: cleanupElement,
			Kind: string(m.Type), Text: m.Text, Done: m.Done, Total: m.Total})
	}
}

// finishCleanup books a cleanup job's end (its tokens are already released).
// A cleanup that fails or is stopped never fails the session: a good build
// does not fail because of the quota.
func (s *Scheduler) finishCleanup(a *activeJob, out job.Outcome) {
	s.clean.running = false
	now := time.Now()
	end := JobEnd{Base: Base{now}, JobID: a.id, Action: Cleanup, Element: cleanupElement, Duration: out.Elapsed,
		LogPath: a.logPath, Error: out.Result.Error}
	var res CleanupResult
	switch {
	case out.Terminated:
		end.Result = ResultTerminated
		s.cfg.Publish(end)
		return
	case out.Result.OK:
		if err := json.Unmarshal(out.Result.Data, &res); err != nil {
			out.Result.OK, out.Result.Error = false, fmt.Sprintf("reading the cleanup's result: %v", err)
		}
	}
	if !out.Result.OK {
		end.Result = ResultFailure
		s.cfg.Publish(end)
		s.cleanupFailed(fmt.Sprintf("the cache cleanup failed: %s (see %s); the build goes on over the quota", out.Result.Error, a.logPath))
		return
	}
	end.Result = ResultSuccess
	s.cfg.Publish(end)
	c := s.cfg.Cleanup
	s.cfg.Publish(CacheCleanup{Base: Base{now}, CleanupResult: res, Quota: c.Quota})
	s.clean.used = res.After
	// The next cleanup waits until the cache grows by what this one was meant
	// to free, so that a cache full of kept artifacts does not clean after
	// every build.
	s.clean.threshold = max(c.Quota, res.After+c.Quota-c.LowWater)
	if res.After > c.Quota && !s.clean.warned {
		s.clean.warned = true
		s.cfg.Publish(Notice{Base: Base{now}, Level: "warning", Text: fmt.Sprintf(
			"the cache quota (%s) is too small for this session: %s is left after cleanup, all of it kept for the running build (or not artifacts: sources, logs); the build goes on over the quota — raise [cache] quota or --cache-quota",
			units.Bytes(c.Quota), units.Bytes(res.After))})
	}
}

func (s *Scheduler) cleanupFailed(msg string) {
	s.clean.disabled, s.clean.pending = true, false
	s.cfg.Pool.UnregisterExclusiveInterest([]resources.Resource{resources.Cache}, cleanupOwner)
	s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Text: msg})
}
