package serve

import (
	"context"
	"testing"
	"time"
)

// admitted waits for an acquire to finish.
func admitted(t *testing.T, what string, ch <-chan func(int64)) func(int64) {
	t.Helper()
	select {
	case rel := <-ch:
		return rel
	case <-time.After(5 * time.Second):
		t.Fatalf("%s was not admitted", what)
		return nil
	}
}

func acquireAsync(a *admission, client string, cost int64) <-chan func(int64) {
	ch := make(chan func(int64), 1)
	go func() {
		rel, err := a.acquire(context.Background(), client, cost)
		if err == nil {
			ch <- rel
		}
	}()
	return ch
}

// TestAdmissionSmallOvertakesHuge: with every slot busy, a huge transfer queued
// first waits behind small transfers of another client queued after it: the
// fair queue orders by bytes, not by arrival.
func TestAdmissionSmallOvertakesHuge(t *testing.T) {
	a := newAdmission(1)
	a.slots = 1
	hold := admitted(t, "the first transfer", acquireAsync(a, "holder", 10))
	huge := acquireAsync(a, "pusher", 1<<30)
	waitQueued(t, a, 1)
	small := acquireAsync(a, "runner", 4096)
	waitQueued(t, a, 2)
	hold(10)
	rel := admitted(t, "the small transfer", small)
	select {
	case <-huge:
		t.Fatal("the huge transfer was admitted before the small one that queued after it")
	default:
	}
	rel(4096)
	admitted(t, "the huge transfer, once the small one is done", huge)(1 << 30)
}

// TestAdmissionPerClientLimit: a client never holds more than its limit of
// slots; others are still admitted meanwhile.
func TestAdmissionPerClientLimit(t *testing.T) {
	a := newAdmission(2)
	r1 := admitted(t, "1st", acquireAsync(a, "greedy", 1))
	admitted(t, "2nd", acquireAsync(a, "greedy", 1))
	third := acquireAsync(a, "greedy", 1)
	admitted(t, "another client", acquireAsync(a, "other", 1))
	select {
	case <-third:
		t.Fatal("a third concurrent transfer was admitted over the per-client limit of 2")
	default:
	}
	r1(1)
	admitted(t, "the 3rd after one finished", third)
}

// TestAdmissionLearnsCost: a transfer of unknown size is charged the client's
// moving average of bytes moved (α = 0.3).
func TestAdmissionLearnsCost(t *testing.T) {
	a := newAdmission(4)
	rel, err := a.acquire(context.Background(), "c", -1)
	if err != nil {
		t.Fatal(err)
	}
	start := a.clients["c"].ema
	rel(1 << 20)
	want := 0.3*(1<<20) + 0.7*start
	if got := a.clients["c"].ema; got != want {
		t.Fatalf("learned cost %v, want %v", got, want)
	}
}

func waitQueued(t *testing.T, a *admission, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		got := a.waiting.Len()
		a.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d transfers queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}
