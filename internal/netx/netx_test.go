package netx

import (
	"context"
	"errors"
	"testing"
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
		t.Run(tc.name, func(t *testing.T) {
			const idle = 40 * time.Millisecond
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
			if got := context.Cause(ctx); !errors.Is(got, tc.want) {
				t.Errorf("cause %v, want %v", got, tc.want)
			}
			w.Stop()
		})
	}
}
