package element

import "testing"

// The default builders and %{max-jobs} never oversubscribe the machine:
// builders × max-jobs is at most the CPUs (with at least one job per build), and
// wastes fewer than one build's share of them.
func TestDefaultParallelismFitsTheCPUs(t *testing.T) {
	for _, tt := range []struct{ cpus, builders, maxJobs int }{
		{1, 1, 1}, {2, 2, 1}, {3, 3, 1}, {4, 4, 1}, {6, 4, 1}, {8, 4, 2}, {16, 4, 4}, {64, 4, 16},
	} {
		b := DefaultBuilders(tt.cpus)
		j := DefaultMaxJobs(tt.cpus, b)
		if b != tt.builders || j != tt.maxJobs {
			t.Errorf("%d CPUs: builders %d, max-jobs %d; want %d, %d", tt.cpus, b, j, tt.builders, tt.maxJobs)
		}
		if b*j > tt.cpus || tt.cpus-b*j >= b {
			t.Errorf("%d CPUs: %d builders × %d jobs does not fit the CPUs", tt.cpus, b, j)
		}
	}
	// Builders given by the user: the CPUs are shared among them.
	if j := DefaultMaxJobs(16, 8); j != 2 {
		t.Errorf("16 CPUs, 8 builders: max-jobs %d, want 2", j)
	}
	if j := DefaultMaxJobs(2, 8); j != 1 {
		t.Errorf("2 CPUs, 8 builders: max-jobs %d, want 1", j)
	}
}
