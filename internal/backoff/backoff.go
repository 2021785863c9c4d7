// Package backoff is gantry's one rule for how long to wait before retrying
// something that failed for a reason that may pass (a remote unavailable, a
// network error): exponential from a base, capped.
package backoff

import (
	"math/rand/v2"
	"time"
)

const (
	// Base is the first wait when nothing sets another.
	Base = time.Second
	// maxWait caps every wait, however many attempts failed.
	maxWait = 30 * time.Second
	// maxDoublings stops the doubling at 32·base (before maxWait, for a small base).
	maxDoublings = 5
)

// Exponential is the wait before retry number attempt (1-based): base, 2·base,
// 4·base … at most 32·base and 30s (maxWait). It has no jitter: callers that retry one
// thing in a loop of their own (a remote lookup) and tests that want exact
// waits use it as it is.
func Exponential(base time.Duration, attempt int) time.Duration {
	return min(base<<min(attempt-1, maxDoublings), maxWait)
}

// Jittered is Exponential from Base, scaled by a random factor in [0.5, 1.5), so
// that jobs failing together do not all retry at the same moment.
func Jittered(attempt int) time.Duration {
	return time.Duration(float64(Exponential(Base, attempt)) * (0.5 + rand.Float64()))
}
