package backoff

import (
	"testing"
	"time"
)

func TestExponential(t *testing.T) {
	for _, tc := range []struct {
		base    time.Duration
		attempt int
		want    time.Duration
	}{
		{time.Second, 1, time.Second},
		{time.Second, 2, 2 * time.Second},
		{time.Second, 5, 16 * time.Second},
		{time.Second, 6, maxWait}, // 32s, capped
		{time.Second, 60, maxWait},
		{10 * time.Millisecond, 3, 40 * time.Millisecond},
		{10 * time.Millisecond, 9, 320 * time.Millisecond}, // 32·base at most
		{0, 4, 0},
	} {
		if got := Exponential(tc.base, tc.attempt); got != tc.want {
			t.Errorf("Exponential(%v, %d) = %v, want %v", tc.base, tc.attempt, got, tc.want)
		}
	}
}

func TestJitteredStaysWithinHalfAndOneAndAHalf(t *testing.T) {
	for attempt := 1; attempt <= 8; attempt++ {
		mid := Exponential(Base, attempt)
		for range 100 {
			if got := Jittered(attempt); got < mid/2 || got >= mid*3/2 {
				t.Fatalf("Jittered(%d) = %v, want within [%v, %v)", attempt, got, mid/2, mid*3/2)
			}
		}
	}
}
