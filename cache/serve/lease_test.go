package serve

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLeaseTable: a table of steps on one key, each at its own time, with the
// reply it must get (granted or not, the token, the holder named) and whether
// an update carrying a token is fenced afterwards.
func TestLeaseTable(t *testing.T) {
	const ttl = 10 * time.Second
	t0 := time.Unix(1_000_000, 0)
	type step struct {
		at      time.Duration // since t0
		op      string        // "acquire", "release", "fenced"
		holder  string
		token   uint64
		granted bool   // acquire: the lease is the caller's
		want    uint64 // acquire: the token granted; fenced: 1 if fenced
		waiting string // acquire, not granted: the holder named
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"free key is granted, token counts up", []step{
			{op: "acquire", holder: "a", granted: true, want: 1},
		}},
		{"held key makes another wait, naming the holder", []step{
			{op: "acquire", holder: "a", granted: true, want: 1},
			{at: time.Second, op: "acquire", holder: "b", waiting: "a"},
		}},
		{"the holder renews with its token and keeps it", []step{
			{op: "acquire", holder: "a", granted: true, want: 1},
			{at: 9 * time.Second, op: "acquire", holder: "a", token: 1, granted: true, want: 1},
			{at: 15 * time.Second, op: "acquire", holder: "b", waiting: "a"},
		}},
		{"the holder without its token waits like anyone", []step{
			{op: "acquire", holder: "a", granted: true, want: 1},
			{at: time.Second, op: "acquire", holder: "a", waiting: "a"},
		}},
		{"an expired lease goes to the next with a newer token", []step{
			{op: "acquire", holder: "a", granted: true, want: 1},
			{at: ttl, op: "acquire", holder: "b", granted: true, want: 2},
			{at: ttl, op: "fenced", token: 1, want: 1},
			{at: ttl, op: "fenced", token: 2, want: 0},
		}},
		{"an update without a token is never fenced", []step{
			{op: "acquire", holder: "a", granted: true, want: 1},
			{at: ttl, op: "acquire", holder: "b", granted: true, want: 2},
			{at: ttl, op: "fenced", token: 0, want: 0},
		}},
		{"release frees the key; a stale release does not", []step{
			{op: "acquire", holder: "a", granted: true, want: 1},
			{op: "release", token: 7},
			{op: "acquire", holder: "b", waiting: "a"},
			{op: "release", token: 1},
			{op: "acquire", holder: "b", granted: true, want: 2},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := newLeaseTable(ttl, newMetrics(), discardLog)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "acquire":
					r := lt.acquire("k", s.holder, s.token, now)
					if r.Granted != s.granted || r.TTLms != ttl.Milliseconds() {
						t.Fatalf("step %d: acquire by %s = %+v, want granted %v", i, s.holder, r, s.granted)
					}
					if s.granted && r.Token != s.want {
						t.Fatalf("step %d: token %d, want %d", i, r.Token, s.want)
					}
					if !s.granted && (r.Holder != s.waiting || r.WaitMs < 50 || r.WaitMs > 1000) {
						t.Fatalf("step %d: refusal %+v, want holder %s and a wait of 50 ms to 1 s", i, r, s.waiting)
					}
				case "release":
					lt.release("k", s.token)
				case "fenced":
					if got := lt.fenced("k", s.token); got != (s.want == 1) {
						t.Fatalf("step %d: fenced(%d) = %v", i, s.token, got)
					}
				}
			}
		})
	}
}

// TestLeaseMetrics: the lease table counts what it grants, renews, makes wait,
// lets expire and fences.
func TestLeaseMetrics(t *testing.T) {
	const ttl = 10 * time.Second
	t0 := time.Unix(1_000_000, 0)
	m := newMetrics()
	lt := newLeaseTable(ttl, m, discardLog)
	lt.acquire("k", "a", 0, t0)                  // granted, token 1
	lt.acquire("k", "a", 1, t0.Add(time.Second)) // renewed
	lt.acquire("k", "b", 0, t0.Add(time.Second)) // waits
	lt.acquire("k", "b", 0, t0.Add(2*ttl))       // a's expired: b gets token 2
	lt.fenced("k", 1)                            // a's late update: refused
	lt.fenced("k", 2)
	for name, c := range map[string]prometheus.Counter{"granted": m.leasesGranted, "renewals": m.leaseRenewals,
		"waits": m.leaseWaits, "expired": m.leasesExpired, "fencing refused": m.fencingRefused} {
		want := 1.0
		if name == "granted" {
			want = 2
		}
		if got := testutil.ToFloat64(c); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
