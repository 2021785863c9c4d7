// Package actions holds every job kind gantry runs, one file each (track, fetch, pull,
// push, build, cleanup, lease): its payload type, its queue — the type the scheduler
// runs (a queues.Queue: Status, Resources, Payload, Done), which makes the payload and
// books the job's end in the session's process — and the handler that does the work
// in the job's child process. Beside them are the session's parts the queues share
// (remotes.go: the remotes and which are down; live.go: the session's entry in its
// cache) and what the commands ask of the cache about a graph (cachequery.go: the
// elements' states; explain.go: why an element needs building), the staging of a
// workspace's sources (workspace.go) and of an element's shell, laid out as its build
// lays out its tree (shell.go, build_tree.go).
//
// Imports point down: actions uses queues, element, source, cache, sandbox and job;
// none of them imports actions.
package actions

import (
	"encoding/json"

	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
)

// Handlers are the child sides of the job kinds, by action, for job.RunChild.
func Handlers() map[string]job.Handler {
	return map[string]job.Handler{
		string(queues.Build):   buildJob,
		string(queues.Fetch):   fetchJob,
		string(queues.Track):   trackJob,
		string(queues.Pull):    pullJob,
		string(queues.Push):    pushJob,
		string(queues.Cleanup): cleanupJob,
	}
}

// BuildQueues are the queues of a build session, in their order: track first when the
// session tracks (nil: it does not), the Pull queue when it has remotes (pulling what
// the plan found on one), fetch, build, and the Push queue when a remote is pushed to.
func BuildQueues(track *Tracker, rs *Remotes, fetch *FetchQueue, build *Build) []queues.Queue {
	var qs []queues.Queue
	if track != nil {
		qs = append(qs, track)
	}
	if len(rs.specs) > 0 {
		qs = append(qs, rs.PullQueue(build.Cache, true))
	}
	qs = append(qs, fetch, build)
	if rs.HasPush() {
		qs = append(qs, rs.PushQueue(build.Cache, false))
	}
	return qs
}

// decodeResult decodes a job's result data (job.Result.Data) into v. A job that
// failed before it had anything to report sends none: v is left as it is.
func decodeResult(data json.RawMessage, v any) error {
	if len(data) == 0 {
		return nil
	}
	return json.Unmarshal(data, v)
}
