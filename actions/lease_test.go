package actions

import "testing"

// leaseWait backs off from the server's wait, up to 8× and 5 s, never below what
// the server asks.
func TestLeaseWait(t *testing.T) {
	for _, tc := range []struct {
		server int64
		waits  int
		want   int64
	}{
		{1000, 0, 1000}, {1000, 1, 2000}, {1000, 2, 4000}, {1000, 3, 5000}, {1000, 10, 5000},
		{100, 3, 800}, {100, 30, 800}, {0, 0, 50}, {8000, 2, 8000},
	} {
		if got := leaseWait(tc.server, tc.waits); got != tc.want {
			t.Errorf("leaseWait(%d, %d) = %d, want %d", tc.server, tc.waits, got, tc.want)
		}
	}
}
