package actions

import "testing"

// leaseWait is the server's wait (the time left on the holder's lease, at most a
// second), never below 50 ms.
func TestLeaseWait(t *testing.T) {
	for _, tc := range []struct{ server, want int64 }{{1000, 1000}, {230, 230}, {0, 50}, {8000, 8000}} {
		if got := leaseWait(tc.server); got != tc.want {
			t.Errorf("leaseWait(%d) = %d, want %d", tc.server, got, tc.want)
		}
	}
}
