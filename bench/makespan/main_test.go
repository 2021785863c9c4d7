package main

import (
	"testing"
	"time"
)

// TestFitOverhead: the overhead fitted to a makespan is the one that gives it, to 0.1 ms.
func TestFitOverhead(t *testing.T) {
	// A stand-in for a simulation: 100 jobs a builder of 300 ms each plus the overhead.
	span := func(overhead time.Duration) (time.Duration, error) {
		return 100 * (300*time.Millisecond + overhead), nil
	}
	got, err := fitOverhead(span, 100*(300*time.Millisecond+12300*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	if d := got - 12300*time.Microsecond; d < -100*time.Microsecond || d > 100*time.Microsecond {
		t.Errorf("fitted overhead %v, want 12.3ms", got)
	}
}
