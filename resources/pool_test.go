package resources

import (
	"strings"
	"testing"
)

// step is one call on the pool. Exactly one of the action fields is set.
type step struct {
	reserve    *Request
	want       bool // Reserve's answer
	release    *Request
	register   []Resource
	unregister []Resource
	owner      string
	inUse      map[Resource]int // checked after the step
}

func req(shared []Resource, exclusive ...Resource) *Request {
	return &Request{Shared: shared, Exclusive: exclusive}
}

func shared(rs ...Resource) *Request { return req(rs) }

func TestPool(t *testing.T) {
	limits := map[Resource]int{
		Process:             2,
		Download:            1,
		Upload:              1,
		Cache:               0,
		PoolResource("big"): 1,
	}
	build := shared(Process, Cache)
	pull := shared(Download, Cache)
	cleanup := req([]Resource{Process}, Cache)

	tests := []struct {
		name  string
		steps []step
	}{
		{"limit respected", []step{
			{reserve: shared(Process), want: true},
			{reserve: shared(Process), want: true},
			{reserve: shared(Process), want: false, inUse: map[Resource]int{Process: 2}},
			{release: shared(Process), inUse: map[Resource]int{Process: 1}},
			{reserve: shared(Process), want: true, inUse: map[Resource]int{Process: 2}},
		}},
		{"all or none", []step{
			{reserve: shared(Download), want: true},
			// Process is free but Download is not: nothing is taken.
			{reserve: shared(Process, Download), want: false,
				inUse: map[Resource]int{Process: 0, Download: 1}},
			{reserve: pull, want: false, inUse: map[Resource]int{Cache: 0, Download: 1}},
			{release: shared(Download)},
			{reserve: pull, want: true, inUse: map[Resource]int{Cache: 1, Download: 1}},
		}},
		{"all or none with pool", []step{
			{reserve: shared(Process, Cache, PoolResource("big")), want: true},
			{reserve: shared(Process, Cache, PoolResource("big")), want: false,
				inUse: map[Resource]int{Process: 1, Cache: 1, PoolResource("big"): 1}},
		}},
		{"unlimited", []step{
			{reserve: shared(Cache), want: true},
			{reserve: shared(Cache), want: true},
			{reserve: shared(Cache), want: true},
			{reserve: shared(Cache), want: true, inUse: map[Resource]int{Cache: 4}},
		}},
		{"exclusive blocks shared", []step{
			{reserve: cleanup, want: true, inUse: map[Resource]int{Cache: 1, Process: 1}},
			{reserve: build, want: false, inUse: map[Resource]int{Cache: 1, Process: 1}},
			{reserve: shared(Cache), want: false},
			{reserve: shared(Download), want: true}, // unrelated resources still flow
			{release: cleanup, inUse: map[Resource]int{Cache: 0, Process: 0}},
			{reserve: build, want: true},
		}},
		{"shared blocks exclusive", []step{
			{reserve: build, want: true},
			{reserve: cleanup, want: false, inUse: map[Resource]int{Cache: 1, Process: 1}},
			{release: build},
			{reserve: cleanup, want: true},
		}},
		{"exclusive blocks exclusive", []step{
			{reserve: req(nil, Cache), want: true},
			{reserve: req(nil, Cache), want: false, inUse: map[Resource]int{Cache: 1}},
		}},
		{"exclusive on a limited resource", []step{
			{reserve: req(nil, Process), want: true},
			{reserve: shared(Process), want: false, inUse: map[Resource]int{Process: 1}},
		}},
		{"interest stops new shared holders, then exclusive gets it", []step{
			{reserve: build, want: true},
			{register: []Resource{Cache}, owner: "cache-cleanup"},
			{reserve: build, want: false, inUse: map[Resource]int{Cache: 1, Process: 1}},
			{reserve: pull, want: false},
			{reserve: shared(Download), want: true}, // not interested in Download
			{reserve: cleanup, want: false},         // the running build still holds Cache
			{release: build, inUse: map[Resource]int{Cache: 0, Process: 0}},
			{reserve: build, want: false}, // still starved while interest is registered
			{reserve: cleanup, want: true, inUse: map[Resource]int{Cache: 1, Process: 1}},
			{release: cleanup},
			{unregister: []Resource{Cache}, owner: "cache-cleanup"},
			{reserve: build, want: true},
		}},
		{"interest from two owners", []step{
			{register: []Resource{Cache}, owner: "a"},
			{register: []Resource{Cache}, owner: "b"},
			{register: []Resource{Cache}, owner: "a"}, // idempotent
			{unregister: []Resource{Cache}, owner: "a"},
			{reserve: shared(Cache), want: false},
			{unregister: []Resource{Cache}, owner: "b"},
			{unregister: []Resource{Cache}, owner: "b"}, // no-op
			{reserve: shared(Cache), want: true},
		}},
		{"empty request", []step{
			{reserve: &Request{}, want: true},
			{release: &Request{}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPool(limits)
			for i, s := range tt.steps {
				switch {
				case s.reserve != nil:
					if got := p.Reserve(*s.reserve); got != s.want {
						t.Fatalf("step %d: Reserve(%s) = %v, want %v", i, *s.reserve, got, s.want)
					}
				case s.release != nil:
					p.Release(*s.release)
				case s.register != nil:
					p.RegisterExclusiveInterest(s.register, s.owner)
				case s.unregister != nil:
					p.UnregisterExclusiveInterest(s.unregister, s.owner)
				}
				for r, want := range s.inUse {
					if got := p.InUse(r); got != want {
						t.Fatalf("step %d: InUse(%s) = %d, want %d", i, r, got, want)
					}
				}
				checkInvariants(t, p)
			}
		})
	}
}

func checkInvariants(t *testing.T, p *Pool) {
	t.Helper()
	for r, lim := range p.limits {
		n := p.shared[r]
		if n < 0 || (lim > 0 && n > lim) {
			t.Fatalf("%s: %d shared holders, limit %d", r, n, lim)
		}
		if p.exclusive[r] && n > 0 {
			t.Fatalf("%s: held exclusively and by %d shared holders", r, n)
		}
	}
}

func TestPoolPanics(t *testing.T) {
	limits := map[Resource]int{Process: 1, Cache: 0}
	tests := []struct {
		name    string
		call    func(p *Pool)
		wantMsg string
	}{
		{"release shared not held", func(p *Pool) { p.Release(*shared(Process)) }, `releasing "process" (shared)`},
		{"release exclusive not held", func(p *Pool) { p.Release(*req(nil, Cache)) }, `releasing "cache" (exclusive)`},
		{"release twice", func(p *Pool) {
			p.Reserve(*shared(Cache))
			p.Release(*shared(Cache))
			p.Release(*shared(Cache))
		}, `releasing "cache" (shared)`},
		{"release exclusive held shared", func(p *Pool) {
			p.Reserve(*shared(Cache))
			p.Release(*req(nil, Cache))
		}, `releasing "cache" (exclusive)`},
		{"reserve unknown", func(p *Pool) { p.Reserve(*shared(Process, Download)) }, `unknown resource "download"`},
		{"reserve unknown pool", func(p *Pool) { p.Reserve(*shared(PoolResource("gpu"))) }, `unknown resource "pool:gpu"`},
		{"reserve exclusive unknown", func(p *Pool) { p.Reserve(*req(nil, Upload)) }, `unknown resource "upload"`},
		{"release unknown", func(p *Pool) { p.Release(*shared(Upload)) }, `unknown resource "upload"`},
		{"register unknown", func(p *Pool) { p.RegisterExclusiveInterest([]Resource{"disk"}, "x") }, `unknown resource "disk"`},
		{"in use unknown", func(p *Pool) { p.InUse("disk") }, `unknown resource "disk"`},
		{"limit unknown", func(p *Pool) { p.Limit("disk") }, `unknown resource "disk"`},
		{"duplicate", func(p *Pool) { p.Reserve(*req([]Resource{Cache}, Cache)) }, `"cache" appears twice`},
		{"negative limit", func(*Pool) { NewPool(map[Resource]int{Process: -1}) }, "negative limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPool(limits)
			defer func() {
				v := recover()
				msg, _ := v.(string)
				if v == nil || !strings.Contains(msg, tt.wantMsg) {
					t.Fatalf("panic = %v, want one containing %q", v, tt.wantMsg)
				}
			}()
			tt.call(p)
		})
	}
}

func TestReleaseImbalanceChangesNothing(t *testing.T) {
	p := NewPool(map[Resource]int{Process: 1, Download: 1})
	p.Reserve(*shared(Process))
	func() {
		defer func() { _ = recover() }()
		p.Release(*shared(Process, Download)) // Download is not held
	}()
	if got := p.InUse(Process); got != 1 {
		t.Fatalf("InUse(process) = %d after a failed Release, want 1", got)
	}
}

func TestLimitAndNames(t *testing.T) {
	p := NewPool(map[Resource]int{Process: 4, Cache: 0, PoolResource("big"): 1})
	for r, want := range map[Resource]int{Process: 4, Cache: 0, PoolResource("big"): 1} {
		if got := p.Limit(r); got != want {
			t.Errorf("Limit(%s) = %d, want %d", r, got, want)
		}
	}
	if got := PoolResource("big"); got != "pool:big" || !got.IsPool() || Process.IsPool() {
		t.Errorf("PoolResource(big) = %q, IsPool %v; Process.IsPool %v", got, got.IsPool(), Process.IsPool())
	}
	p.RegisterExclusiveInterest([]Resource{Cache}, "b")
	p.RegisterExclusiveInterest([]Resource{Cache}, "a")
	if got := strings.Join(p.Interested(Cache), ","); got != "a,b" {
		t.Errorf("Interested(cache) = %q, want a,b", got)
	}
}
