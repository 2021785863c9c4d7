package queues

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gantry-build/gantry/job"
)

// Healing an artifact found damaged while it is pushed. The push job hashes
// every blob it reads for the upload; a blob that is missing or not its digest
// stops the upload before the remote stores it, and the job drops the artifact
// from the cache (compare-and-delete) and says so in its result, an
// DamagedDependency naming the element itself. In a session that
// builds, the loop takes the element back into the pipeline from the first
// queue after Track — so it is built again — and its push follows; once per
// session: damaged again, the push's failure stands. A session that builds nothing
// (the push command) cannot: the push fails, and the next build makes the
// artifact again and pushes it.

// healPush handles a failed push whose result names the element's own artifact
// as damaged, and reports whether it did; false leaves the failure to finish.
// An element pulled in this session is not healed here: the plan did not stage
// its dependencies. Loop goroutine only.
func (s *Scheduler) healPush(a *activeJob, res job.Result, end JobEnd) bool {
	it := a.item
	if a.qs.q.Action() != Push || len(res.Data) == 0 || s.quitting || it.healed() || it.Pulled || s.queueOf(Build) == nil {
		return false
	}
	var damaged DamagedDependency
	if json.Unmarshal(res.Data, &damaged) != nil || damaged.Element != it.Name() {
		return false
	}
	it.Built = false
	s.takeBack(it, damaged) // a dependant's stale report then waits (itemToHeal)
	s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Element: it.Name(),
		Text: fmt.Sprintf("the artifact of %s was damaged (%s): it was not uploaded; building it again, then pushing it", it.Name(), damaged.Problem)})
	end.Result, end.WillRetry = ResultFailure, true
	s.jobEnded(a, end)
	return true
}
