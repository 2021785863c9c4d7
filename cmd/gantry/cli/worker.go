package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/proctree"
	rexec "github.com/gantry-build/gantry/remote/exec"
	rworker "github.com/gantry-build/gantry/remote/exec/worker"
	"github.com/gantry-build/gantry/sandbox"
)

// workerOptions are `gantry worker`'s flags.
type workerOptions struct {
	bots, cas, instance, botID, sandbox, workDir string
	platform                                     []string
	slots                                        int
	healthInterval                               time.Duration
	serverCA, clientCert, clientKey, tokenFile   string
	// botsSpec and casSpec are the services of the user configuration's [worker]
	// when their flag was not given; the flags given go over them.
	botsSpec, casSpec *remote.Spec
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
ActionResult. Each command runs in a job process: whatever it starts dies when it ends,
and when the worker dies. Every --health-interval the worker checks its work directory,
the sandbox and the CAS, and reports UNHEALTHY (taking no leases) while one fails.
docs/remote-execution.md ("gantry worker", "Run a small cluster") has the details.

SIGTERM or SIGINT: kill the running actions, hand their leases back, exit 0.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			user, err := g.session().userConfig()
			if err != nil {
				return err
			}
			return runWorker(g, workerDefaults(o, user.Worker, cmd.Flags().Changed))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.bots, "bots", "", "the Bots service: grpc://HOST:PORT or grpcs://HOST:PORT (required)")
	f.StringVar(&o.cas, "cas", "", "the CAS the actions' inputs and outputs go through (default: --bots)")
	f.StringVar(&o.instance, "instance", "", "the instance `NAME` (BuildGrid's instance name; default \"\")")
	f.StringArrayVar(&o.platform, "platform", nil, "a platform property `K=V` the bot advertises (repeatable; default OSFamily=linux ISA=x86-64)")
	f.IntVar(&o.slots, "slots", 1, "how many actions run at once")
	f.StringVar(&o.sandbox, "sandbox", "bwrap", "bwrap (the input root as /) or host (in the input root's directory)")
	f.StringVar(&o.workDir, "work-dir", "", "`DIR` of the local CAS and the actions' directories (default $XDG_CACHE_HOME/gantry/worker)")
	f.DurationVar(&o.healthInterval, "health-interval", rworker.DefaultHealthInterval, "how often the bot checks it can work (work directory, sandbox, CAS)")
	f.StringVar(&o.botID, "bot-id", "", "the bot's name to the server (default HOSTNAME-PID)")
	f.StringVar(&o.serverCA, "server-ca", "", "PEM `FILE` of the CA of the servers' certificates (grpcs://)")
	f.StringVar(&o.clientCert, "client-cert", "", "PEM `FILE` of a client certificate (grpcs://)")
	f.StringVar(&o.clientKey, "client-key", "", "PEM `FILE` of its key")
	f.StringVar(&o.tokenFile, "token-file", "", "`FILE` holding a bearer token sent with every call")
	return cmd
}

// workerDefaults fills the flags not given (changed says which were) from the user
// configuration's [worker] (nil: none). A service's url, instance and credentials
// come from the flags if --bots (--cas) is given, else from the configuration with
// the flags given over them.
func workerDefaults(o workerOptions, w *element.WorkerConfig, changed func(string) bool) workerOptions {
	if w == nil {
		return o
	}
	if !changed("slots") && w.Slots > 0 {
		o.slots = w.Slots
	}
	if !changed("sandbox") && w.Sandbox != "" {
		o.sandbox = w.Sandbox
	}
	if !changed("work-dir") {
		o.workDir = w.WorkDir
	}
	if !changed("bot-id") {
		o.botID = w.BotID
	}
	// Configured properties first: those of --platform go over them.
	keys := make([]string, 0, len(w.Platform))
	for k := range w.Platform {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var platform []string
	for _, k := range keys {
		platform = append(platform, k+"="+w.Platform[k])
	}
	o.platform = append(platform, o.platform...)
	if !changed("bots") && w.Bots != nil {
		o.bots, o.botsSpec = w.Bots.URL, w.Bots
	}
	if !changed("cas") && w.CAS != nil {
		o.cas, o.casSpec = w.CAS.URL, w.CAS
	}
	return o
}

// workerConfig checks o and turns it into the bot's configuration.
func workerConfig(o workerOptions) (rworker.Config, error) {
	cfg := rworker.Config{Slots: o.slots, Sandbox: sandbox.Kind(o.sandbox), WorkDir: o.workDir, BotID: o.botID,
		Platform: rexec.DefaultPlatform(), HealthInterval: o.healthInterval}
	if o.bots == "" {
		return cfg, usagef("worker: --bots URL is required (the Bots service: grpc://HOST:PORT)")
	}
	spec := func(flag, u string, configured *remote.Spec) (remote.Spec, error) {
		if !strings.HasPrefix(u, "grpc://") && !strings.HasPrefix(u, "grpcs://") {
			return remote.Spec{}, usagef("worker: %s %q: not a grpc://HOST:PORT or grpcs://HOST:PORT url", flag, remote.RedactURL(u))
		}
		s := remote.Spec{URL: u}
		if configured != nil {
			s = *configured
		}
		for _, f := range []struct{ field, flag *string }{{&s.Instance, &o.instance}, {&s.ServerCA, &o.serverCA},
			{&s.ClientCert, &o.clientCert}, {&s.ClientKey, &o.clientKey}, {&s.TokenFile, &o.tokenFile}} {
			if *f.flag != "" {
				*f.field = *f.flag
			}
		}
		return s, nil
	}
	var err error
	if cfg.Bots, err = spec("--bots", o.bots, o.botsSpec); err != nil {
		return cfg, err
	}
	if o.cas != "" {
		if cfg.CAS, err = spec("--cas", o.cas, o.casSpec); err != nil {
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
	if o.healthInterval <= 0 {
		return cfg, usagef("worker: --health-interval %s: more than 0", o.healthInterval)
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
		cfg.SandboxCheck = func() error { return sandbox.CheckAvailableNow(sandbox.Bwrap) }
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("worker: finding gantry's executable for the actions' job processes: %w", err)
	}
	cfg.Log, cfg.JobCommand = g.ios.ErrOut, []string{exe, jobCommand}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// A job killed outright cannot kill what it started: the worker adopts those
	// processes and kills them when it stops.
	if proctree.AdoptOrphans() == nil {
		defer proctree.KillDescendants()
	}
	return rworker.Run(ctx, cfg)
}
