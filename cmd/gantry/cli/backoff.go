package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/gantry-build/gantry/internal/backoff"
)

// retryBackoff is the wait before a network job's retry number attempt (1-based), for
// queues.Config.Backoff. GANTRY_RETRY_BACKOFF (a Go duration, "10ms") sets the base of
// the exponential backoff, without jitter (backoff.Exponential). It is a knob for tests
// and CI; unset (or invalid, with a warning), nil keeps the scheduler's default,
// backoff.Jittered.
func (s *session) retryBackoff() func(attempt int) time.Duration {
	v := os.Getenv("GANTRY_RETRY_BACKOFF")
	if v == "" {
		return nil
	}
	base, err := time.ParseDuration(v)
	if err != nil || base < 0 {
		s.opts.ios.Message("warning", fmt.Sprintf("GANTRY_RETRY_BACKOFF=%q is not a duration such as 10ms; using the default backoff", v))
		return nil
	}
	return func(attempt int) time.Duration { return backoff.Exponential(base, attempt) }
}
