package main

import (
	"testing"
	"time"

	"github.com/gantry-build/gantry/bench/synth"
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

// TestSpawnCost: the floor is measured with real processes that sleep: it is above zero
// (a process costs something), below the sleeps (it is the cost beyond them), and the
// commands ran.
func TestSpawnCost(t *testing.T) {
	g := &synth.Graph{Config: synth.Config{N: 8}, DurMS: []int{30, 30, 30, 30, 0, 0, 30, 30}}
	start := time.Now()
	c, err := spawnCost(g, 2, 6)
	if err != nil {
		t.Fatal(err)
	}
	// Only that it was measured: how long a spawn takes depends on the machine's load,
	// and a unit test asserts no timing (bench/makespan.sh reports it).
	if c <= 0 {
		t.Errorf("spawn cost %v, want above 0", c)
	}
	// 6 commands on 2 builders: at least two of the 30 ms sleeps ran one after the
	// other on one of them.
	if took := time.Since(start); took < 60*time.Millisecond {
		t.Errorf("6 commands on 2 builders took %v, want at least 60ms: the sleeps did not run", took)
	}
}
