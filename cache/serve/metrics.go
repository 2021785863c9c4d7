package serve

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serverMetrics are what GET /metrics reports (docs/serve.md, "Metrics"), in a
// registry of the server's own: never prometheus's global one, so that two
// servers in one process (tests) keep apart. Requests, their latency and their
// bytes are counted by the HTTP middleware and the gRPC stats handler
// (observe.go), so every service on the server is covered without counting
// anything itself. Clients are labelled by name (token name, user,
// certificate subject, "anonymous"), never by credential.
type serverMetrics struct {
	reg *prometheus.Registry

	requests                *prometheus.CounterVec   // protocol, method, status
	duration                *prometheus.HistogramVec // protocol, method, status
	received, sent          *prometheus.CounterVec   // protocol
	clientRequests          *prometheus.CounterVec   // client
	clientIn, clientOut     *prometheus.CounterVec   // client
	hits, misses            prometheus.Counter
	evictions, evictedBytes prometheus.Counter
	rejected, quarantined   prometheus.Counter
	authRefused, limited    prometheus.Counter
	passwordChecks          prometheus.Counter

	leasesGranted, leaseRenewals, leaseWaits prometheus.Counter
	leasesExpired, fencingRefused            prometheus.Counter

	// The series a request counts in, resolved once per label set rather than
	// by a label lookup (hashing the labels, a map under a lock) for each of
	// seven metrics per request: requestKey → *requestSeries, client name →
	// *clientSeries, protocol → *protocolSeries. They hold what the vectors
	// hold anyway (a series, once made, stays).
	byRequest, byClient, byProtocol sync.Map
}

type requestKey struct{ protocol, method, status string }

type requestSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

type clientSeries struct{ requests, in, out prometheus.Counter }

type protocolSeries struct{ received, sent prometheus.Counter }

// metricPrefix starts every metric of the server's own.
const metricPrefix = "gantry_serve_"

// durationBuckets cover a lookup (a millisecond) to a large blob (minutes).
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

func newMetrics() *serverMetrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: metricPrefix + name, Help: help})
		reg.MustRegister(c)
		return c
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	lookups := counterVec("lookups_total", "Lookups of blobs and action cache entries, by result (hit or miss).", "result")
	m := &serverMetrics{
		reg:            reg,
		requests:       counterVec("requests_total", "Requests served, by protocol (http, grpc), method (HTTP method or RPC) and status (HTTP status or gRPC code).", "protocol", "method", "status"),
		received:       counterVec("received_bytes_total", "Bytes received in request bodies (HTTP) and request messages (gRPC), by protocol.", "protocol"),
		sent:           counterVec("sent_bytes_total", "Bytes sent in response bodies (HTTP) and response messages (gRPC), by protocol.", "protocol"),
		clientRequests: counterVec("client_requests_total", "Requests by client (token name, user, certificate subject or anonymous).", "client"),
		clientIn:       counterVec("client_received_bytes_total", "Bytes received by client.", "client"),
		clientOut:      counterVec("client_sent_bytes_total", "Bytes sent by client.", "client"),
		hits:           lookups.WithLabelValues("hit"),
		misses:         lookups.WithLabelValues("miss"),
		evictions:      counter("evictions_total", "Blobs and action cache entries evicted to keep the quota."),
		evictedBytes:   counter("evicted_bytes_total", "Bytes evicted to keep the quota."),
		rejected:       counter("rejected_total", "Requests refused: credentials, integrity, limits, fencing."),
		quarantined:    counter("quarantined_blobs_total", "Blobs found damaged while being served, moved to quarantine/."),
		authRefused:    counter("auth_refused_total", "Requests refused for their credentials: none, wrong, or read-only writing."),
		limited:        counter("auth_limited_total", "Requests refused because their address or user ran out of password checks."),
		passwordChecks: counter("password_checks_total", "Passwords checked with bcrypt (known and unknown users alike)."),
		leasesGranted:  counter("leases_granted_total", "Build-once leases granted (a new holder, with a new fencing token)."),
		leaseRenewals:  counter("lease_renewals_total", "Build-once leases renewed by their holder."),
		leaseWaits:     counter("lease_waits_total", "Lease requests answered with a wait: another client holds the lease."),
		leasesExpired:  counter("leases_expired_total", "Build-once leases that expired without being renewed or released."),
		fencingRefused: counter("fencing_refused_total", "Action cache updates refused for a fencing token older than the key's lease."),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricPrefix + "request_duration_seconds",
			Help: "Time from a request's arrival to the end of its response, by protocol, method and status.", Buckets: durationBuckets},
			[]string{"protocol", "method", "status"}),
	}
	reg.MustRegister(m.duration)
	return m
}

// gauges registers the values read when /metrics is scraped.
func (m *serverMetrics) gauges(s *Server) {
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricPrefix + name, Help: help}, f))
	}
	gauge("store_size_bytes", "The store's size: at its last scan, plus the bytes written since.", func() float64 { return float64(s.evictor.size.Load()) })
	gauge("store_quota_bytes", "The store's quota (--quota); 0 when there is none.", func() float64 { return float64(s.opts.Quota) })
	gauge("leases_held", "Build-once leases held now (not expired).", func() float64 { return float64(s.leases.held()) })
	gauge("admission_waiting", "Transfers waiting for an admission slot (per-client fairness).", func() float64 { w, _ := s.admit.depth(); return float64(w) })
	gauge("admission_active", "Transfers admitted and in progress.", func() float64 { _, a := s.admit.depth(); return float64(a) })
}

// lookup counts a hit or a miss.
func (m *serverMetrics) lookup(hit bool) {
	if hit {
		m.hits.Inc()
	} else {
		m.misses.Inc()
	}
}

// request counts one request of protocol, method and status, which took
// seconds, moved in and out bytes, for client.
func (m *serverMetrics) request(protocol, method, status, client string, seconds float64, in, out int64) {
	k := requestKey{protocol, method, status}
	rs, ok := m.byRequest.Load(k)
	if !ok {
		rs, _ = m.byRequest.LoadOrStore(k, &requestSeries{m.requests.WithLabelValues(protocol, method, status), m.duration.WithLabelValues(protocol, method, status)})
	}
	r := rs.(*requestSeries)
	r.count.Inc()
	r.duration.Observe(seconds)
	ps, ok := m.byProtocol.Load(protocol)
	if !ok {
		ps, _ = m.byProtocol.LoadOrStore(protocol, &protocolSeries{m.received.WithLabelValues(protocol), m.sent.WithLabelValues(protocol)})
	}
	p := ps.(*protocolSeries)
	cs, ok := m.byClient.Load(client)
	if !ok {
		cs, _ = m.byClient.LoadOrStore(client, &clientSeries{m.clientRequests.WithLabelValues(client), m.clientIn.WithLabelValues(client), m.clientOut.WithLabelValues(client)})
	}
	c := cs.(*clientSeries)
	c.requests.Inc()
	// A series is made even when nothing moved: a client that only reads still
	// shows its bytes received (0).
	p.received.Add(float64(in))
	p.sent.Add(float64(out))
	c.in.Add(float64(in))
	c.out.Add(float64(out))
}

// handler serves GET /metrics.
func (m *serverMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
