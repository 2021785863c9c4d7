package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gantry-build/gantry/internal/units"
	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/serve"
)

func newCacheServeCmd(g *globalOptions) *cobra.Command {
	var o serve.Options
	var quota, maxBlob string
	cmd := &cobra.Command{
		Use:   "serve --dir DIR [--http ADDR] [--grpc ADDR]",
		Short: "Serve an artifact cache over the HTTP cache protocol and REAPI v2 (gRPC)",
		Long: `Serve one store on disk (the local cache's CAS layout, with action cache entries
under DIR/ac/) to gantry, Bazel, BuildStream 1.x and any client of bazel-remote's HTTP
protocol or of REAPI v2. Writes need credentials (--token-file, --htpasswd or client certificates
with --client-ca) that may write; reads too unless --allow-anonymous-read.
docs/serve.md says what holds under abuse: timeouts, password limits, read-only credentials.
GET /metrics (Prometheus) and /status need credentials; GET /healthz, /readyz and gRPC's
health service do not. One log line per request on stderr (--log-format text|json).

SIGTERM or SIGINT: stop accepting, finish the requests in flight (up to --shutdown-grace),
exit 0. SIGHUP: reread the token and htpasswd files.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if quota != "" {
				if o.Quota, err = cache.ParseQuota(quota, o.Dir); err != nil {
					return usagef("--quota: %v", err)
				}
			}
			if maxBlob != "" {
				n, ok := units.ParseSize(maxBlob)
				if !ok {
					return usagef("--max-blob-size %q: not a size (500M, 10G)", maxBlob)
				}
				o.MaxBlobSize = n
			}
			o.Log = g.ios.ErrOut
			srv, err := serve.New(o)
			if errors.Is(err, serve.ErrConfig) {
				return usagef("%v", err)
			}
			if err != nil {
				return err
			}
			if err := srv.Listen(); err != nil {
				return err
			}
			// Signals are caught before the addresses are printed: whoever
			// starts the server may stop it as soon as it knows them.
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			h, gr := srv.Addrs()
			if h != "" {
				fmt.Fprintf(g.ios.Out, "http %s\n", h)
			}
			if gr != "" {
				fmt.Fprintf(g.ios.Out, "grpc %s\n", gr)
			}
			go func() {
				for range hup {
					_ = srv.ReloadCredentials() // the server logs a failure, in --log-format
				}
			}()
			return srv.Serve(ctx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Dir, "dir", "", "the store `DIR` (created if needed)")
	fl.StringVar(&o.HTTPAddr, "http", "", "serve the HTTP cache protocol on `ADDR` (host:port)")
	fl.StringVar(&o.GRPCAddr, "grpc", "", "serve REAPI v2 on `ADDR` (host:port)")
	fl.StringVar(&o.TokenFile, "token-file", "", "bearer tokens, one per line: TOKEN [CLIENT-NAME [read|write]] (default write; SIGHUP rereads it)")
	fl.StringVar(&o.HtpasswdFile, "htpasswd", "", "htpasswd `FILE` with bcrypt entries, for basic auth")
	fl.StringVar(&o.HtpasswdReadFile, "htpasswd-read", "", "htpasswd `FILE` of users who may only read")
	fl.DurationVar(&o.AuthRetryInterval, "auth-retry-interval", serve.DefaultAuthRetryInterval, fmt.Sprintf("past a burst of %d password checks, one per `INTERVAL` per client address and per user (429 meanwhile)", serve.PasswordBurst))
	fl.BoolVar(&o.AllowAnonymousRead, "allow-anonymous-read", false, "let clients without credentials read")
	fl.StringVar(&o.TLSCert, "tls-cert", "", "serve TLS with this certificate (PEM)")
	fl.StringVar(&o.TLSKey, "tls-key", "", "the key of --tls-cert (PEM)")
	fl.StringVar(&o.ClientCA, "client-ca", "", "verify client certificates against this CA (PEM): mutual TLS; a certificate is required unless --allow-anonymous-read")
	fl.StringVar(&quota, "quota", "", "keep the store under `SIZE` (500M, 10G, 50%): least recently used entries are evicted")
	fl.StringVar(&maxBlob, "max-blob-size", "", "refuse uploads over `SIZE`")
	fl.IntVar(&o.MaxStreams, "max-streams", serve.DefaultMaxStreams, "concurrent transfers per client")
	fl.DurationVar(&o.LeaseTTL, "lease-ttl", serve.DefaultLeaseTTL, "how long a build-once lease lasts without renewal")
	fl.DurationVar(&o.ShutdownGrace, "shutdown-grace", serve.DefaultShutdownGrace, "how long SIGTERM waits for requests in flight")
	fl.DurationVar(&o.IdleTimeout, "idle-timeout", serve.DefaultIdleTimeout, "close connections idle, and request bodies stalled, this long")
	fl.StringVar(&o.LogFormat, "log-format", serve.LogText, "write the log (stderr) as `FORMAT`: text or json (log/slog's, one line per request)")
	fl.BoolVar(&o.AssetFetch, "asset-fetch", false, "let the Remote Asset Fetch service download http(s) URIs it has no record of (for clients that may write), checking checksum.sri")
	fl.DurationVar(&o.HeaderTimeout, "header-timeout", serve.DefaultHeaderTimeout, "close new connections that have not sent their request headers (or gRPC handshake) within this")
	return cmd
}
