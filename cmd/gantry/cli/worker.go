package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/cache/remote"
	rexec "github.com/gantry-build/gantry/remote/exec"
	"github.com/gantry-build/gantry/sandbox"
)

// workerOptions are `gantry worker`'s flags.
type workerOptions struct {
	bots, cas, instance, botID, sandbox, workDir string
	platform                                     []string
	slots                                        int
	serverCA, clientCert, clientKey, tokenFile   string
}

func newWorkerCmd(g *globalOptions) *cobra.Command {
	var o workerOptions
	cmd := &cobra.Command{
		Use:   "worker --bots URL [--cas URL] [--instance NAME] [--platform K=V]... [--slots N] [--sandbox bwrap|host] [--work-dir DIR]",
		Short: "Run a remote execution cluster's actions (BuildGrid's bots) in gantry's sandbox",
		Long: `Serve the leases of a Remote Workers API server (BuildGrid's Bots service): fetch each
Action's Command and input root from the CAS into a local CAS under --work-dir, run the
command with the input root as / under bubblewrap (--sandbox host: in the input root's
directory), upload its outputs, stdout and stderr, and complete the lease with the
ActionResult. docs/remote-execution.md ("gantry worker") has the details.

SIGTERM or SIGINT: kill the running actions, hand their leases back, exit 0.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runWorker(g, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.bots, "bots", "", "the Bots service: grpc://HOST:PORT or grpcs://HOST:PORT (required)")
	f.StringVar(&o.cas, "cas", "", "the CAS the actions' inputs and outputs go through (default: --bots)")
	f.StringVar(&o.instance, "instance", "", "the instance `NAME` (BuildGrid's instance name; default \"\")")
	f.StringArrayVar(&o.platform, "platform", nil, "a platform property `K=V` the bot advertises (repeatable; default OSFamily=linux ISA=x86-64)")
	f.IntVar(&o.slots, "slots", 1, "how many actions run at once")
	f.StringVar(&o.sandbox, "sandbox", "bwrap", "bwrap (the input root as /) or host (in the input root's directory)")
	f.StringVar(&o.workDir, "work-dir", "", "`DIR` of the local CAS and the actions' directories (default $XDG_CACHE_HOME/gantry/worker)")
	f.StringVar(&o.botID, "bot-id", "", "the bot's name to the server (default HOSTNAME-PID)")
	f.StringVar(&o.serverCA, "server-ca", "", "PEM `FILE` of the CA of the servers' certificates (grpcs://)")
	f.StringVar(&o.clientCert, "client-cert", "", "PEM `FILE` of a client certificate (grpcs://)")
	f.StringVar(&o.clientKey, "client-key", "", "PEM `FILE` of its key")
	f.StringVar(&o.tokenFile, "token-file", "", "`FILE` holding a bearer token sent with every call")
	return cmd
}

// workerConfig checks o and turns it into the bot's configuration.
func workerConfig(o workerOptions) (rexec.WorkerConfig, error) {
	cfg := rexec.WorkerConfig{Slots: o.slots, Sandbox: sandbox.Kind(o.sandbox), WorkDir: o.workDir, BotID: o.botID,
		Platform: rexec.DefaultPlatform()}
	if o.bots == "" {
		return cfg, usagef("worker: --bots URL is required (the Bots service: grpc://HOST:PORT)")
	}
	spec := func(flag, u string) (remote.Spec, error) {
		if !strings.HasPrefix(u, "grpc://") && !strings.HasPrefix(u, "grpcs://") {
			return remote.Spec{}, usagef("worker: %s %q: not a grpc://HOST:PORT or grpcs://HOST:PORT url", flag, remote.RedactURL(u))
		}
		return remote.Spec{URL: u, Instance: o.instance, ServerCA: o.serverCA, ClientCert: o.clientCert,
			ClientKey: o.clientKey, TokenFile: o.tokenFile}, nil
	}
	var err error
	if cfg.Bots, err = spec("--bots", o.bots); err != nil {
		return cfg, err
	}
	if o.cas != "" {
		if cfg.CAS, err = spec("--cas", o.cas); err != nil {
			return cfg, err
		}
	}
	for _, kv := range o.platform {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return cfg, usagef("worker: --platform %q: not KEY=VALUE", kv)
		}
		cfg.Platform[k] = v
	}
	if o.slots < 1 {
		return cfg, usagef("worker: --slots %d: at least 1", o.slots)
	}
	switch cfg.Sandbox {
	case sandbox.Bwrap, sandbox.Host:
	default:
		return cfg, usagef("worker: --sandbox %q: bwrap or host", o.sandbox)
	}
	if cfg.WorkDir == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return cfg, usagef("worker: no --work-dir and no cache directory: %v", err)
		}
		cfg.WorkDir = filepath.Join(dir, "gantry", "worker")
	}
	if cfg.BotID == "" {
		host, _ := os.Hostname()
		cfg.BotID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return cfg, nil
}

func runWorker(g *globalOptions, o workerOptions) error {
	cfg, err := workerConfig(o)
	if err != nil {
		return err
	}
	if cfg.Sandbox == sandbox.Bwrap {
		if err := sandbox.CheckAvailable(sandbox.Bwrap); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	cfg.Log = g.ios.ErrOut
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return rexec.RunWorker(ctx, cfg)
}
