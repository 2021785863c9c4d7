package proctest

import (
	"testing"
	"time"
)

// pollEvery is how often Eventually asks its condition again.
const pollEvery = 10 * time.Millisecond

// Eventually polls cond until it holds, failing t after 10s. For what the
// kernel changes with no event to wait on: a process's state, a file its
// commands write.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyDescribed(t, what, cond, nil)
}

// EventuallyDescribed is Eventually that, when it times out, says what describe
// returns (the processes it was waiting on, their states). A loaded machine can
// keep a process in uninterruptible sleep for seconds, so with a describe it
// waits up to 30s.
func EventuallyDescribed(t testing.TB, what string, cond func() bool, describe func() string) {
	t.Helper()
	wait := 10 * time.Second
	if describe != nil {
		wait = 30 * time.Second
	}
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			if describe != nil {
				t.Fatalf("timed out waiting: %s; %s", what, describe())
			}
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(pollEvery)
	}
}
