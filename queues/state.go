package queues

// state is where an item is in the session, as the loop sees it (ninja's Want).
// Its queue (Item.queue) is the queue it is in from the first add on: in every
// state but stateUnqueued and stateDone it names the queue that holds it, one
// that failed it, or stopped it.
//
// The loop moves an item along
//
//	unqueued → waiting ⇄ ready ⇄ parked (any of them back to waiting)
//	ready → running → passed → waiting (the next queue) … → done
//	waiting → passed (skipped), running → waiting (retry, heal, withdrawn at its gate)
//	running → failed → waiting (retried by the user), running → stopped
//
// and a heal takes an item that is done, or still waiting, back to waiting in
// an earlier queue. Called only from the scheduler goroutine.
type state uint8

const (
	stateUnqueued state = iota // planned; not entered into a queue yet (before Run)
	stateWaiting               // in its queue's wait list: asked every turn (ready.go)
	stateReady                 // in a ready heap of its queue: Ready, waiting for tokens
	stateParked                // kept aside until an item it waits on ends, or another builder's claim
	stateRunning               // a job of its queue runs for it
	statePassed                // its queue is done with it (skipped, or its job succeeded): promoted next
	stateStopped               // its job was terminated; it goes no further
	stateDone                  // out of the pipeline: through every queue
	stateFailed                // out of the pipeline: failed, or a failed build is cached
)

func (s state) String() string {
	switch s {
	case stateUnqueued:
		return "unqueued"
	case stateWaiting:
		return "waiting"
	case stateReady:
		return "ready"
	case stateParked:
		return "parked"
	case stateRunning:
		return "running"
	case statePassed:
		return "passed"
	case stateStopped:
		return "stopped"
	case stateDone:
		return "done"
	case stateFailed:
		return "failed"
	}
	return "unknown"
}

// queued reports whether the item is in a queue: entered, and not out of the
// pipeline.
func (s state) queued() bool { return s != stateUnqueued && !s.out() }

// out reports whether the item has left the pipeline: through every queue, or failed.
func (s state) out() bool { return s == stateDone || s == stateFailed }
