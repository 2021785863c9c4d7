package netx

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestWatchdog(t *testing.T) {
	stalled := errors.New("stalled")
	for _, tc := range []struct {
		name  string
		kicks int // kicks, each after idle/2
		stop  bool
		want  error // the context's cause at the end
	}{
		{"no progress", 0, false, stalled},
		{"progress keeps it alive", 4, false, stalled},
		{"stopped", 0, true, context.Canceled},
	} {
		// In a bubble the clock moves only when every goroutine waits: the
		// kicks land at exactly idle/2, however busy the machine is.
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const idle = 40 * time.Millisecond
				start := time.Now()
				ctx, w := WithWatchdog(context.Background(), idle, stalled)
				for range tc.kicks {
					time.Sleep(idle / 2)
					if ctx.Err() != nil {
						t.Fatalf("canceled despite progress: %v", context.Cause(ctx))
					}
					w.Kick()
				}
				if tc.stop {
					w.Stop()
				}
				<-ctx.Done()
				if want := time.Duration(tc.kicks)*idle/2 + idle; !tc.stop && time.Since(start) != want {
					t.Errorf("stalled after %v, want %v: idle after the last kick", time.Since(start), want)
				}
				if got := context.Cause(ctx); !errors.Is(got, tc.want) {
					t.Errorf("cause %v, want %v", got, tc.want)
				}
				w.Stop()
			})
		})
	}
}
