package serve

import (
	"container/heap"
	"context"
	"sync"
)

// admission admits transfers by weighted fair queuing on bytes, per client
// (docs/serve.md, "Per-client fairness"). Every transfer asks for a slot with its
// expected cost in bytes: the declared size where the request states it (PUT
// Content-Length, a digest's size), else the client's learned cost, an
// exponential moving average (α = 0.3) of the bytes its transfers moved. The
// request gets the finish tag max(clock, client's last tag) + cost/weight
// (weight 1 for every client); free slots go to the smallest tag, so a client
// pushing one huge artifact advances its own tag far ahead and every small
// request of other clients overtakes it, while nobody waits forever: the clock
// follows the start tags admitted (start-time fair queuing). A client holds at most maxPerClient slots at once
// (the limit on concurrent streams); the server at most slots.
type admission struct {
	mu           sync.Mutex
	slots        int // free server-wide slots
	total        int // server-wide slots
	maxPerClient int
	clock        float64
	clients      map[string]*clientQueue
	waiting      waitHeap
	seq          uint64
}

type clientQueue struct {
	tag    float64 // finish tag of its last admitted or queued request
	active int
	ema    float64 // learned bytes per transfer
}

type waiter struct {
	start  float64 // virtual start: the clock or the client's previous tag
	tag    float64 // virtual finish: start + cost
	seq    uint64
	client string
	ready  chan struct{}
	index  int
}

type waitHeap []*waiter

func (h waitHeap) Len() int { return len(h) }
func (h waitHeap) Less(i, j int) bool {
	if h[i].tag != h[j].tag {
		return h[i].tag < h[j].tag
	}
	return h[i].seq < h[j].seq
}
func (h waitHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *waitHeap) Push(x any)   { w := x.(*waiter); w.index = len(*h); *h = append(*h, w) }
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	w.index = -1
	return w
}
func newAdmission(maxPerClient int) *admission {
	return &admission{slots: 4 * maxPerClient, total: 4 * maxPerClient, maxPerClient: maxPerClient, clients: map[string]*clientQueue{}}
}

const emaAlpha = 0.3

// acquire waits for a slot for client's transfer of about cost bytes (cost < 0:
// unknown, use the learned cost). The returned release takes the bytes
// actually moved.
func (a *admission) acquire(ctx context.Context, client string, cost int64) (release func(moved int64), err error) {
	a.mu.Lock()
	cq := a.clients[client]
	if cq == nil {
		cq = &clientQueue{ema: 64 << 10}
		a.clients[client] = cq
	}
	c := float64(cost)
	if cost < 0 {
		c = cq.ema
	}
	a.seq++
	start := max(a.clock, cq.tag)
	release = func(moved int64) {
		a.mu.Lock()
		cq.ema = emaAlpha*float64(moved) + (1-emaAlpha)*cq.ema
		cq.active--
		a.slots++
		a.dispatch()
		a.mu.Unlock()
	}
	if a.waiting.Len() == 0 && a.slots > 0 && cq.active < a.maxPerClient {
		// Nobody waits and a slot is free: dispatch would admit this
		// request at once; it is admitted without a waiter or a channel.
		cq.tag = start + c + 1
		cq.active++
		a.slots--
		a.clock = max(a.clock, start)
		a.mu.Unlock()
		return release, nil
	}
	w := &waiter{start: start, tag: start + c + 1, seq: a.seq, client: client, ready: make(chan struct{})}
	cq.tag = w.tag
	heap.Push(&a.waiting, w)
	a.dispatch()
	a.mu.Unlock()
	select {
	case <-w.ready:
		return release, nil
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		if w.index >= 0 {
			heap.Remove(&a.waiting, w.index)
			return nil, ctx.Err()
		}
		// admitted meanwhile: give the slot back
		cq.active--
		a.slots++
		a.dispatch()
		return nil, ctx.Err()
	}
}

// dispatch admits the waiters with the smallest tags while slots are free,
// skipping clients at their own limit. Called with a.mu held.
func (a *admission) dispatch() {
	var blocked []*waiter
	for a.slots > 0 && a.waiting.Len() > 0 {
		w := heap.Pop(&a.waiting).(*waiter)
		cq := a.clients[w.client]
		if cq.active >= a.maxPerClient {
			blocked = append(blocked, w)
			continue
		}
		cq.active++
		a.slots--
		a.clock = max(a.clock, w.start)
		close(w.ready)
	}
	for _, w := range blocked {
		heap.Push(&a.waiting, w)
	}
}

// depth returns how many transfers wait for a slot and how many are admitted.
func (a *admission) depth() (waiting, active int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waiting.Len(), a.total - a.slots
}
