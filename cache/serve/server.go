// Package serve is `gantry cache serve`: the HTTP cache protocol and REAPI v2
// (CAS, ActionCache, ByteStream, Capabilities) and BuildStream 1.x's
// ReferenceStorage over a store (package cache),
// with authentication, admission, eviction to a quota, build-once leases and
// metrics. The wire names it shares with the clients are package remote's (cache/remote/wire.go).
package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gantry-build/gantry/cache"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
)

// Options configure `gantry cache serve`.
type Options struct {
	Dir      string // the store: an ordinary cache directory, plus ac/
	HTTPAddr string // "" = no HTTP listener
	GRPCAddr string // "" = no gRPC listener

	TokenFile          string // bearer tokens, "TOKEN [NAME [read|write]]" per line
	HtpasswdFile       string // bcrypt htpasswd entries for basic auth
	HtpasswdReadFile   string // bcrypt htpasswd entries of users who may only read
	AllowAnonymousRead bool   // reads need no credentials
	// AuthRetryInterval: past a burst of password checks, a client address or a
	// user name gets one check per interval (429 / RESOURCE_EXHAUSTED meanwhile).
	AuthRetryInterval time.Duration

	TLSCert, TLSKey string // PEM files: serve TLS
	ClientCA        string // PEM file: require and verify client certificates (mutual TLS)

	Quota         int64 // bytes; 0 = no quota
	MaxBlobSize   int64 // largest upload accepted; 0 = no limit
	MaxStreams    int   // concurrent transfers per client; 0 = DefaultMaxStreams
	LeaseTTL      time.Duration
	ShutdownGrace time.Duration // how long SIGTERM waits for requests in flight

	// IdleTimeout closes a connection with no request in progress (HTTP
	// keep-alive, gRPC max connection idle) and an HTTP request whose body sends
	// nothing for that long. HeaderTimeout bounds how long a new connection may
	// take to send its request headers (HTTP) or its handshake (gRPC).
	IdleTimeout, HeaderTimeout time.Duration

	// AssetFetch lets the Remote Asset Fetch service download http(s) URIs it
	// has no record of into the store (asset.go).
	AssetFetch bool

	Log       io.Writer // the access log, request errors, events and lifecycle; never a credential
	LogFormat string    // LogText ("" too) or LogJSON
}

// The defaults of Options' zero fields (the command's flags show the same).
const (
	DefaultMaxStreams        = 16               // concurrent transfers per client
	DefaultLeaseTTL          = 3 * time.Second  // a build-once lease without renewal: a killed holder is replaced within about this long
	DefaultShutdownGrace     = 30 * time.Second // requests in flight at SIGTERM
	DefaultAuthRetryInterval = time.Second      // one password check per client and user, past the burst
	DefaultIdleTimeout       = time.Minute      // an idle connection, a stalled request body
	DefaultHeaderTimeout     = 10 * time.Second // request headers or gRPC handshake of a new connection
)

// Server serves one store over the HTTP cache protocol and REAPI v2.
type Server struct {
	opts    Options
	c       *cache.Cache
	auth    *authenticator
	metrics *serverMetrics
	admit   *admission
	leases  *leaseTable
	uploads *uploadTable
	evictor *evictor
	log     *slog.Logger
	logw    *logWriter // the log's buffer (logbuf.go)
	blobs   blobDir    // cas/, for reads (blobfile.go)
	started time.Time

	health    *health.Server
	stopping  context.Context // done once the server stops (Serve's ctx is done)
	stop      context.CancelFunc
	knownOnce sync.Once
	known     map[string]bool // the gRPC methods served (grpcMethods)

	httpSrv *http.Server
	grpcSrv *grpc.Server
	tlsConf *tls.Config
	lis     []net.Listener
}

// ErrConfig is wrapped by New's errors for a configuration it
// refuses (the command reports them as bad usage); other errors are faults.
var ErrConfig = errors.New("bad configuration")

// positiveOr sets *v to def when it is not positive: an option left 0 (or
// given negative) takes its default.
func positiveOr[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// New opens the store and checks the configuration.
func New(opts Options) (*Server, error) {
	config := func(err error) error { return fmt.Errorf("cache serve: %w (%w)", err, ErrConfig) }
	if opts.Dir == "" {
		return nil, config(errors.New("no store directory: give --dir DIR"))
	}
	if opts.HTTPAddr == "" && opts.GRPCAddr == "" {
		return nil, config(errors.New("nothing to serve: give --http ADDR, --grpc ADDR or both"))
	}
	positiveOr(&opts.MaxStreams, DefaultMaxStreams)
	positiveOr(&opts.LeaseTTL, DefaultLeaseTTL)
	positiveOr(&opts.ShutdownGrace, DefaultShutdownGrace)
	positiveOr(&opts.AuthRetryInterval, DefaultAuthRetryInterval)
	positiveOr(&opts.IdleTimeout, DefaultIdleTimeout)
	positiveOr(&opts.HeaderTimeout, DefaultHeaderTimeout)
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	logw := newLogWriter(opts.Log, logFlushDelay)
	logger, err := newLogger(logw, opts.LogFormat)
	if err != nil {
		return nil, config(err)
	}
	logger = slog.New(flushHandler{logger.Handler(), logw})
	auth, err := newAuthenticator(opts.TokenFile, opts.HtpasswdFile, opts.HtpasswdReadFile, opts.AuthRetryInterval)
	if err != nil {
		return nil, config(err)
	}
	if !auth.configured() && opts.ClientCA == "" {
		return nil, config(errors.New("writes need credentials: give --token-file, --htpasswd or --client-ca"))
	}
	tlsConf, err := tlsConfig(opts)
	if err != nil {
		return nil, config(err)
	}
	c, err := cache.Open(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("cache serve: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(c.Root, cache.ACDir), 0o755); err != nil {
		return nil, fmt.Errorf("cache serve: %w", err)
	}
	if _, err := c.PutBlob(nil); err != nil { // see emptyDigest
		return nil, fmt.Errorf("cache serve: %w", err)
	}
	s := &Server{
		opts:    opts,
		c:       c,
		auth:    auth,
		metrics: newMetrics(),
		uploads: newUploadTable(),
		log:     logger,
		logw:    logw,
		blobs:   openBlobDir(c),
		started: time.Now(),
		tlsConf: tlsConf,
	}
	s.stopping, s.stop = context.WithCancel(context.Background())
	auth.checks = func() { s.metrics.passwordChecks.Inc() }
	s.admit = newAdmission(opts.MaxStreams)
	s.leases = newLeaseTable(opts.LeaseTTL, s.metrics, s.log)
	// Best effort: a leftover costs space, never correctness.
	if n, err := c.RemoveDeadBlobImports(); err != nil {
		s.log.Error(fmt.Sprintf("removing partial uploads of a server that was killed (%d removed)", n), "error", err)
	} else if n > 0 {
		s.log.Info(fmt.Sprintf("removed %d partial uploads of a server that was killed", n))
	}
	s.evictor = newEvictor(c, opts.Quota, s.metrics, s.log)
	s.metrics.gauges(s)
	return s, nil
}

func tlsConfig(opts Options) (*tls.Config, error) {
	if opts.TLSCert == "" && opts.TLSKey == "" {
		if opts.ClientCA != "" {
			return nil, errors.New("--client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	if opts.TLSCert == "" || opts.TLSKey == "" {
		return nil, errors.New("TLS needs both --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(opts.TLSCert, opts.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("loading the TLS certificate %s and key %s: %w", opts.TLSCert, opts.TLSKey, err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if opts.ClientCA != "" {
		pem, err := os.ReadFile(opts.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("reading the client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading the client CA %s: no PEM certificate in it", opts.ClientCA)
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
		if opts.AllowAnonymousRead {
			// A client without a certificate is anonymous: it may read (BuildStream
			// 1.x pulling, which has no other credential), never write.
			conf.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return conf, nil
}

// Listen opens the listeners, so that the caller knows the addresses before
// Serve (":0" picks a free port).
func (s *Server) Listen() error {
	for _, addr := range []string{s.opts.HTTPAddr, s.opts.GRPCAddr} {
		if addr == "" {
			s.lis = append(s.lis, nil)
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			for _, o := range s.lis {
				if o != nil {
					o.Close()
				}
			}
			return fmt.Errorf("cache serve: listening on %s: %w", addr, err)
		}
		s.lis = append(s.lis, l)
	}
	return nil
}

// Addrs returns the HTTP and gRPC listening addresses ("" where not served).
func (s *Server) Addrs() (httpAddr, grpcAddr string) {
	if s.lis[0] != nil {
		httpAddr = s.lis[0].Addr().String()
	}
	if s.lis[1] != nil {
		grpcAddr = s.lis[1].Addr().String()
	}
	return
}

// ReloadCredentials rereads the token and htpasswd files (SIGHUP), and logs
// what became of it.
func (s *Server) ReloadCredentials() error {
	if err := s.auth.reload(); err != nil {
		s.log.Error("reloading credentials failed: the previous credentials stay in force", "error", err)
		return fmt.Errorf("cache serve: reloading credentials: %w", err)
	}
	s.log.Info("credentials reloaded")
	return nil
}

// Serve serves until ctx is done, then stops accepting, lets requests in flight
// finish within ShutdownGrace, and returns nil for a clean stop.
func (s *Server) Serve(ctx context.Context) error {
	if s.lis == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	errc := make(chan error, 2)
	var wg sync.WaitGroup
	if l := s.lis[0]; l != nil {
		// No ReadTimeout or WriteTimeout: a large blob may take long; a body that
		// stalls is cut by stallReader instead.
		s.httpSrv = &http.Server{Handler: s.observeHTTP(s.healthHTTP(s.httpHandler())), TLSConfig: s.tlsConf,
			ReadHeaderTimeout: s.opts.HeaderTimeout, IdleTimeout: s.opts.IdleTimeout,
			ErrorLog: log.New(io.Discard, "", 0)} // TLS handshake noise; errors we report go through s.log
		if s.tlsConf != nil {
			l = tls.NewListener(l, s.tlsConf)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.httpSrv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("cache serve: http: %w", err)
			}
		}()
		s.log.Info("serving the HTTP cache protocol", "addr", s.lis[0].Addr().String())
	}
	if l := s.lis[1]; l != nil {
		s.grpcSrv = s.newGRPCServer()
		s.healthServing(s.grpcSrv)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.grpcSrv.Serve(l); err != nil {
				errc <- fmt.Errorf("cache serve: grpc: %w", err)
			}
		}()
		s.log.Info("serving REAPI v2", "addr", s.lis[1].Addr().String())
	}
	evictCtx, stopEvict := context.WithCancel(context.Background())
	evictDone := make(chan struct{})
	go func() { defer close(evictDone); s.evictor.run(evictCtx) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.shutdown()
	stopEvict()
	<-evictDone
	wg.Wait()
	s.uploads.dropAll()
	s.logw.flush()
	return err
}

// shutdown stops accepting and waits for requests in flight, up to ShutdownGrace.
func (s *Server) shutdown() {
	s.log.Info(fmt.Sprintf("stopping: finishing requests in flight (up to %s)", s.opts.ShutdownGrace))
	s.stop()
	if s.health != nil {
		s.health.Shutdown() // NOT_SERVING, before the listeners close
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownGrace)
	defer cancel()
	var wg sync.WaitGroup
	if s.httpSrv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.httpSrv.Shutdown(ctx) != nil {
				s.httpSrv.Close()
			}
		}()
	}
	if s.grpcSrv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { s.grpcSrv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				s.grpcSrv.Stop()
			}
		}()
	}
	wg.Wait()
}
