package serve

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
)

// counters are what GET /metrics reports (Prometheus text format).
// Clients are labelled by name (token name, user, certificate subject), never
// by credential.
type counters struct {
	hits, misses, evictions, evictedBytes, rejected atomic.Int64
	authRefused, limited, passwordChecks            atomic.Int64

	quarantined atomic.Int64 // blobs found damaged while being served (integrity.go)

	mu      sync.Mutex
	clients map[string]*clientCounters
	ops     map[[2]string]int64 // {protocol, op} → requests
}

type clientCounters struct{ requests, bytesIn, bytesOut int64 }

func newCounters() *counters {
	return &counters{clients: map[string]*clientCounters{}, ops: map[[2]string]int64{}}
}

// request counts one request of client, and the bytes it moved.
func (m *counters) request(protocol, op, client string, in, out int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cc := m.clients[client]
	if cc == nil {
		cc = &clientCounters{}
		m.clients[client] = cc
	}
	cc.requests++
	cc.bytesIn += in
	cc.bytesOut += out
	m.ops[[2]string{protocol, op}]++
}

// lookup counts a hit or a miss.
func (m *counters) lookup(hit bool) {
	if hit {
		m.hits.Add(1)
	} else {
		m.misses.Add(1)
	}
}

func (m *counters) write(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var in, out int64
	names := make([]string, 0, len(m.clients))
	for n, cc := range m.clients {
		names = append(names, n)
		in += cc.bytesIn
		out += cc.bytesOut
	}
	sort.Strings(names)
	ops := make([][2]string, 0, len(m.ops))
	for k := range m.ops {
		ops = append(ops, k)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i][0]+ops[i][1] < ops[j][0]+ops[j][1] })

	fmt.Fprintf(w, "# HELP gantry_serve_requests_total Requests served, by protocol and operation.\n# TYPE gantry_serve_requests_total counter\n")
	for _, k := range ops {
		fmt.Fprintf(w, "gantry_serve_requests_total{protocol=%q,op=%q} %d\n", k[0], k[1], m.ops[k])
	}
	counter := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	counter("gantry_serve_received_bytes_total", "Bytes received in blobs and entries.", in)
	counter("gantry_serve_sent_bytes_total", "Bytes sent in blobs and entries.", out)
	counter("gantry_serve_hits_total", "Lookups of blobs and action cache entries that found them.", m.hits.Load())
	counter("gantry_serve_misses_total", "Lookups of blobs and action cache entries that did not.", m.misses.Load())
	counter("gantry_serve_evictions_total", "Blobs and entries evicted to keep the quota.", m.evictions.Load())
	counter("gantry_serve_evicted_bytes_total", "Bytes evicted to keep the quota.", m.evictedBytes.Load())
	counter("gantry_serve_rejected_total", "Requests refused: credentials, integrity, limits, fencing.", m.rejected.Load())
	counter("gantry_serve_quarantined_blobs_total", "Blobs found damaged while being served, moved to quarantine/.", m.quarantined.Load())
	counter("gantry_serve_auth_refused_total", "Requests refused for their credentials: none, wrong, or read-only writing.", m.authRefused.Load())
	counter("gantry_serve_auth_limited_total", "Requests refused because their address or user ran out of password checks.", m.limited.Load())
	counter("gantry_serve_password_checks_total", "Passwords checked with bcrypt (known and unknown users alike).", m.passwordChecks.Load())
	for _, per := range []struct {
		name, help string
		v          func(*clientCounters) int64
	}{
		{"gantry_serve_client_requests_total", "Requests by client.", func(c *clientCounters) int64 { return c.requests }},
		{"gantry_serve_client_received_bytes_total", "Bytes received by client.", func(c *clientCounters) int64 { return c.bytesIn }},
		{"gantry_serve_client_sent_bytes_total", "Bytes sent by client.", func(c *clientCounters) int64 { return c.bytesOut }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", per.name, per.help, per.name)
		for _, n := range names {
			fmt.Fprintf(w, "%s{client=%q} %d\n", per.name, n, per.v(m.clients[n]))
		}
	}
}
