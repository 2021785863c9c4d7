package cli

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/proctree"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/resources"
	"github.com/gantry-build/gantry/sandbox"
	"github.com/gantry-build/gantry/ui"
)

// schedulerFlags are the flags of the commands that run the scheduler; each command
// registers those it uses (register), the others keep their defaults.
type schedulerFlags struct {
	onError   string
	keepGoing bool // -k/--keep-going: --on-error continue
	builders  int
	fetchers  int
	pushers   int
	maxJobs   int
	sandbox   string
	quota     string // --cache-quota
}

// schedFlag names a scheduler flag, for register.
type schedFlag uint8

const (
	flagOnError  schedFlag = 1 << iota // --on-error: every job can fail
	flagBuilders                       // --builders: build jobs
	flagFetchers                       // --fetchers: download jobs (fetch, track, pull)
	flagPushers                        // --pushers: upload jobs
	flagMaxJobs                        // --max-jobs: inside a build
	flagSandbox                        // --sandbox: builds, and which artifacts the keys name
	flagQuota                          // --cache-quota: kept by a build session's cleanup

	allSchedFlags = flagOnError | flagBuilders | flagFetchers | flagPushers | flagMaxJobs | flagSandbox | flagQuota
)

// register adds the scheduler flags in which to cmd. --sandbox of a command that
// builds nothing picks the artifacts of builds in that sandbox (sandboxUse says so):
// a bwrap build's keys differ from a host build's.
func (f *schedulerFlags) register(cmd *cobra.Command, which schedFlag, sandboxUse string) {
	f.sandbox = defaultSandbox() // also the value of a command without the flag
	fl := cmd.Flags()
	if which&flagOnError != 0 {
		fl.StringVar(&f.onError, "on-error", "", "what to do when a job fails: continue, quit or terminate (default quit)")
		fl.BoolVarP(&f.keepGoing, "keep-going", "k", false, "--on-error continue, as make -k and ninja -k")
	}
	if which&flagBuilders != 0 {
		fl.IntVarP(&f.builders, "builders", "j", 0, "build jobs at once (default 4, or the number of CPUs if fewer)")
	}
	if which&flagFetchers != 0 {
		fl.IntVar(&f.fetchers, "fetchers", 0, fmt.Sprintf("download jobs at once (default %d)", defaultFetchers))
	}
	if which&flagPushers != 0 {
		fl.IntVar(&f.pushers, "pushers", 0, fmt.Sprintf("push jobs at once (default %d)", defaultPushers))
	}
	if which&flagMaxJobs != 0 {
		fl.IntVar(&f.maxJobs, "max-jobs", 0, "parallelism inside one build, %{max-jobs} (default: the CPUs shared among the builders, so that builders × max-jobs ≈ CPUs)")
	}
	if which&flagSandbox != 0 {
		fl.StringVar(&f.sandbox, "sandbox", defaultSandbox(), sandboxUse+": auto, host or bwrap (default $GANTRY_SANDBOX, else auto)")
	}
	if which&flagQuota != 0 {
		fl.StringVar(&f.quota, "cache-quota", "", "keep the local cache under `SIZE` (500M, 10G, 50%): least recently used artifacts are cleaned up")
	}
}

type buildOptions struct {
	*globalOptions
	schedulerFlags
	remoteFlags
	retryFailed bool
	track       bool
	trace       string // --trace FILE
	explain     bool   // --explain
	deps        string
	executor    string   // --remote-executor URL
	args        []string // the targets
}

// newBuildCmd is `gantry build`; runF, when not nil, runs instead of runBuild (tests).
func newBuildCmd(g *globalOptions, runF func(*buildOptions) error) *cobra.Command {
	opts := &buildOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "build [ELEMENT...]",
		Short: "Build elements and what they depend on into the cache",
		Long: `Build the elements (default: the project's default-targets) and everything they
need, in dependency order, through the Fetch and Build queues. Cached elements are not
built again; a failed build is cached too: --retry-failed builds it again.

Ctrl-C (without a terminal), SIGTERM or SIGHUP terminates running jobs and prints the
summary (exit 128 + the signal: 130, 143, 129); a second Ctrl-C kills them. Ctrl-Z suspends every
job and gantry; 'fg' resumes them.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runBuild(opts)
		},
	}
	opts.schedulerFlags.register(cmd, allSchedFlags, "build sandbox")
	opts.remoteFlags.register(cmd, "pulled from; pushed to with --remote-push")
	opts.remoteFlags.registerPush(cmd)
	cmd.Flags().BoolVar(&opts.retryFailed, "retry-failed", false, "build elements whose failed build is cached")
	cmd.Flags().StringVar(&opts.trace, "trace", "", "write the session as a Chrome trace (Perfetto, chrome://tracing) to `FILE`")
	cmd.Flags().BoolVar(&opts.explain, "explain", false, "say why each element needs building before the session starts")
	cmd.Flags().StringVar(&opts.deps, "deps", "run", "which elements to build: the targets with none or run (and what they need), build (what they build on, not them), all (every dependency, cached targets or not)")
	g.mirrors.register(cmd, true)
	cmd.Flags().StringVar(&opts.executor, "remote-executor", "", "build on this REAPI execution service (`URL`: grpc(s)://HOST:PORT; it serves the storage and action cache too) instead of the configured [remote-execution] services")
	cmd.Flags().BoolVar(&opts.track, "track", false, "track every source the targets depend on (writes gantry.lock) and build with the new refs, in one session")
	return cmd
}

// The scheduler settings when neither a flag, the environment nor the user
// configuration sets them (the builders' and max-jobs' depend on the CPUs: element).
const (
	defaultFetchers       = 10 // fetch jobs at once
	defaultPushers        = 4  // push jobs at once
	defaultNetworkRetries = 2  // retries of a network job that failed
)

// limits resolves the scheduler settings: flag > environment > user config > default.
func (s *session) limits(f *schedulerFlags) (map[resources.Resource]int, element.OnError, int, error) {
	pick := func(flag int, name, env string, cfg, def int) (int, error) {
		switch {
		case flag < 0:
			return 0, usagef("%s %d: want a number of at least 1", name, flag)
		case flag > 0:
			return flag, nil
		}
		if v := os.Getenv(env); v != "" {
			var n int
			if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
				return 0, usagef("%s=%q: want a number of at least 1", env, v)
			}
			return n, nil
		}
		if cfg > 0 {
			return cfg, nil
		}
		return def, nil
	}
	sc := s.user.Scheduler
	cpus := runtime.NumCPU()
	builders, err := pick(f.builders, "--builders", "GANTRY_BUILDERS", sc.Builders, element.DefaultBuilders(cpus))
	if err != nil {
		return nil, "", 0, err
	}
	fetchers, err := pick(f.fetchers, "--fetchers", "GANTRY_FETCHERS", sc.Fetchers, defaultFetchers)
	if err != nil {
		return nil, "", 0, err
	}
	pushers, err := pick(f.pushers, "--pushers", "GANTRY_PUSHERS", sc.Pushers, defaultPushers)
	if err != nil {
		return nil, "", 0, err
	}
	maxJobs, err := pick(f.maxJobs, "--max-jobs", "GANTRY_MAX_JOBS", s.user.MaxJobs, element.DefaultMaxJobs(cpus, builders))
	if err != nil {
		return nil, "", 0, err
	}
	if f.keepGoing {
		if f.onError != "" && f.onError != string(element.OnErrorContinue) {
			return nil, "", 0, usagef("-k (--keep-going) is --on-error continue: it contradicts --on-error %s", f.onError)
		}
		f.onError = string(element.OnErrorContinue)
	}
	var onErr element.OnError // none given: the display decides (session.pipeline)
	for _, v := range []struct{ format, value string }{
		{"--on-error %q", f.onError}, {"GANTRY_ON_ERROR=%q", os.Getenv("GANTRY_ON_ERROR")}, {"on-error %q in the user configuration", sc.OnError},
	} {
		if v.value == "" {
			continue
		}
		o, ok := element.ParseOnError(v.value)
		if !ok {
			return nil, "", 0, usagef(v.format+": use continue, quit or terminate", v.value)
		}
		onErr = o
		break
	}
	limits := map[resources.Resource]int{
		resources.Process: builders, resources.Download: fetchers, resources.Upload: pushers, resources.Cache: 0,
	}
	for name, n := range s.project.Pools {
		limits[resources.PoolResource(name)] = n
	}
	return limits, onErr, maxJobs, nil
}

func runBuild(opts *buildOptions) error {
	deps, err := element.ParseDeps(opts.deps)
	if err != nil {
		return usagef("%v", err)
	}
	if err := checkRemoteExecutorFlag(opts.executor); err != nil {
		return err
	}
	p, err := opts.session().pipeline(&opts.schedulerFlags, opts.args, readOutcomes|readStats)
	if err != nil {
		return err
	}
	s, g, c, display, limits, onErr, maxJobs := p.session, p.graph, p.cache, p.display, p.limits, p.onError, p.maxJobs
	stats := p.stats
	q, err := actions.CacheQuery{Cache: c, Memo: p.outcomes}.WithArtifacts(g.Project.Name, g.Order)
	if err != nil {
		opts.ios.Message("warning", err.Error()+" (planning is slower next time; nothing else is affected)")
	}
	planOpts := queues.PlanOptions{
		Artifact:    func(e *element.Element) element.ArtifactStatus { return q.Of(g.Project.Name, e) },
		RetryFailed: opts.retryFailed,
		Estimate: func(e *element.Element) (time.Duration, bool) {
			project, name := e.ArtifactName(g.Project.Name)
			d, ok := stats.Durations[project+"/"+name]
			return d, ok
		},
	}
	specs, err := s.remotes(&opts.remoteFlags, false)
	if err != nil {
		return err
	}
	var warnings []string
	rs, err := s.newRemotes(specs, func(w string) { warnings = append(warnings, w) })
	if err != nil {
		return err
	}
	defer rs.Close()
	if len(specs) > 0 && !opts.track {
		if !s.strictSession() {
			// Non-strict: the remotes' artifacts, by key and by weak key, too.
			actions.ResolveNonStrict(g, c, rs)
		}
		// Keys are known now: ask the remotes what they have while planning.
		planOpts.OnRemote = rs.Lookup
	}
	// What a built artifact needs at run time is always built with it: --deps none
	// plans like run.
	selected := g.Select(g.Targets, deps)
	var items []*queues.Item
	var track *actions.Tracker
	if opts.track {
		// One session: Track first; keys, and what needs building, follow from the
		// refs it finds.
		track = s.sources(c).Tracker(g, s.lock)
		items = queues.PlanTracked(g, selected, planOpts)
	} else if items, err = queues.Plan(g, selected, planOpts); err != nil {
		return missingRefsError(g, selected, err)
	}
	rx, err := s.remoteExecution(opts.executor)
	if err != nil {
		return err
	}
	if err := checkSandbox(opts.sandbox, items, func(e *element.Element) bool { return actions.NeedsLocalSandbox(g, e, &rx) }); err != nil {
		return err
	}
	if err := checkRemoteExecution(rx, items); err != nil {
		return err
	}
	remoteLimits(limits, rx)
	if rs.HasPush() && slices.ContainsFunc(items, func(it *queues.Item) bool { return !it.Cached && !it.Remote }) {
		slots := limits[resources.Process]
		if rx.Enabled() {
			slots += limits[resources.Remote]
		}
		rs.ProbeLeases(slots) // something is to be built: another session may be building it
	}
	if opts.explain {
		var todo []*element.Element
		for _, it := range items {
			if !it.Cached {
				todo = append(todo, it.Element)
			}
		}
		for _, x := range actions.Explain(g, c, todo) {
			opts.ios.Info("explain: " + x.Text)
		}
	}
	build := &actions.Build{Cache: c, Graph: g, Sandbox: opts.sandbox, MaxJobs: maxJobs, RetryFailed: opts.retryFailed, Stats: stats, Remote: rx,
		Commits: actions.NewGroupCommits(c)}
	cleanup, err := s.cleanupConfig(opts.quota, c, g)
	if err != nil {
		return err
	}
	summary, err := s.runScheduler(schedulerRun{
		display: display, cache: c, limits: limits, onError: onErr, cleanup: cleanup,
		queues: actions.BuildQueues(track, rs, s.sources(c).FetchQueue(), build), items: items, notices: warnings,
		remoteDown: rs.PushDownWarnings(),
		onJobEnd:   func(end queues.JobEnd) error { rs.LeaseJobEnded(end); return build.JobEnded(end) },
		trace:      opts.trace,
		commits:    build.Commits,
	})
	if err != nil {
		return err
	}
	if track != nil {
		changes, err := track.Finish()
		printChanges(opts.ios, changes)
		if err != nil {
			return err
		}
	}
	if err := c.SaveStats(stats); err != nil {
		opts.ios.Message("warning", err.Error())
	}
	return s.sessionError(summary)
}

// defaultSandbox is the sandbox of every command without a --sandbox flag, and the
// default of the flag: $GANTRY_SANDBOX, else auto. It decides which artifacts the
// commands see: keys of elements built with bwrap say so (element.Project.Hermetic).
func defaultSandbox() string {
	if v := os.Getenv("GANTRY_SANDBOX"); v != "" {
		return v
	}
	return "auto"
}

// isHermetic says whether a build in the sandbox kind (a --sandbox value) is hermetic,
// which the keys of its artifacts say (element.Project.Hermetic): only bwrap is; auto
// picks bwrap or the host only once the dependencies are staged, after the keys.
func isHermetic(kind string) bool { return sandbox.Kind(kind) == sandbox.Bwrap }

// checkSandboxFlag refuses a --sandbox other than auto, host or bwrap.
func checkSandboxFlag(kind string) error {
	switch kind {
	case "auto", "host", "bwrap":
		return nil
	}
	if kind == os.Getenv("GANTRY_SANDBOX") { // the default the flag took from it
		return usagef("GANTRY_SANDBOX=%q: use auto, host or bwrap", kind)
	}
	return usagef("--sandbox %q: use auto, host or bwrap", kind)
}

// checkSandbox fails the session before it starts, naming the fix, when the sandbox
// asked for cannot run on this machine and something is to be built that needs it
// (remote builds do not): a fault of the machine must never be cached as an
// element's failed build.
func checkSandbox(kind string, items []*queues.Item, needs func(*element.Element) bool) error {
	for _, it := range items {
		if !it.Cached && !it.Failed && needs(it.Element) {
			return sandbox.CheckAvailable(sandbox.Kind(kind))
		}
	}
	return nil
}

// schedulerRun is one scheduler session as the commands set it up.
type schedulerRun struct {
	display  ui.Display
	cache    *cache.Cache
	limits   map[resources.Resource]int
	onError  element.OnError
	queues   []queues.Queue
	items    []*queues.Item
	onJobEnd func(queues.JobEnd) error // queues.Config.OnJobEnd: runs on the scheduler goroutine; may be nil
	// cleanup keeps the cache under its quota; nil: no quota.
	cleanup *queues.CleanupConfig
	notices []string // warnings from before the session, shown once it starts
	// remoteDown maps those of notices that marked a push remote down to the remote.
	remoteDown map[string]string
	trace      string // write the session's Chrome trace there; "": none
	// commits places the refs of the build jobs (actions.GroupCommits); nil: they do.
	commits *actions.GroupCommits
}

// runScheduler runs a session with signals forwarded, and waits until the display has
// shown everything, summary included.
func (s *session) runScheduler(r schedulerRun) (*queues.Summary, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the gantry executable to run jobs: %w", err)
	}
	live, err := actions.StartLiveSession(r.cache, s.project.Name)
	if err != nil {
		return nil, err
	}
	defer live.End()
	pub := queues.NewPublisher(func(e queues.Event) {
		r.display.Handle(e)
		if _, ok := e.(queues.SessionStart); ok {
			for _, n := range r.notices {
				r.display.Handle(queues.Notice{Base: queues.Base{Time: queues.TimeOf(e)}, Level: "warning", Text: n, RemoteDown: r.remoteDown[n]})
			}
		}
	})
	// The recorder sees each event on the scheduler goroutine before the display does:
	// the summary it completes (the critical path) is final when published.
	rec := queues.NewRecorder(r.items)
	workspaces := map[string]string{}
	for _, it := range r.items {
		if it.Element.Workspace != "" {
			workspaces[it.Element.Name] = it.Element.Workspace
		}
	}
	publish := func(e queues.Event) {
		if js, ok := e.(queues.JobStart); ok && js.Action == queues.Build {
			js.Workspace = workspaces[js.Element]
			e = js
		}
		rec.Observe(e)
		pub.Publish(e)
	}
	var runner queues.Runner = queues.NewProcessRunner([]string{exe, jobCommand}, live.JobEnv(), job.DefaultGrace)
	if r.commits != nil {
		runner = r.commits.Runner(runner)
	}
	sched := queues.New(queues.Config{
		Project:  s.project.Name,
		Queues:   r.queues,
		Items:    r.items,
		Pool:     resources.NewPool(r.limits),
		Runner:   runner,
		OnError:  r.onError,
		LogDir:   r.cache.LogsDir(),
		Publish:  publish,
		Backoff:  s.retryBackoff(),
		OnJobEnd: r.onJobEnd,
		Cleanup:  r.cleanup,
		Needs:    live.Need,
	})
	tui, _ := r.display.(*ui.TUI)
	if tui != nil {
		tui.Start(sched)
	}
	// A job killed outright (a second Ctrl-C) cannot kill what it started: gantry
	// adopts those processes and kills them when the session ends.
	adopted := proctree.AdoptOrphans() == nil
	stopSignals := forwardSignals(sched)
	summary := sched.Run()
	s.endedBy = stopSignals()
	if adopted {
		proctree.KillDescendants()
	}
	pub.Close()
	var traceErr error
	if r.trace != "" {
		traceErr = writeTrace(r.trace, rec)
	}
	if tui != nil {
		// The summary is printed once the terminal is given back.
		if err := tui.Wait(); err != nil {
			s.opts.ios.Message("warning", fmt.Sprintf("the terminal display failed: %v", err))
		}
	}
	if traceErr != nil {
		s.opts.ios.Message("warning", traceErr.Error())
	}
	return summary, nil
}

// writeTrace writes the session's trace to path (writeFileAtomic), so a reader never
// sees half a trace.
func writeTrace(path string, rec *queues.Recorder) error {
	return writeFileAtomic("the build trace", path, rec.WriteTrace)
}

// writeFileAtomic writes what, the file at path, through write, into a temporary file
// in the same directory renamed into place once complete: a failure leaves no partial
// file.
func writeFileAtomic(what, path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s %s: %w (check that its directory exists and is writable)", what, path, err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s %s: %w", what, path, err)
	}
	return nil
}

// sessionError turns a session's summary into the command's error (exit code).
func (s *session) sessionError(summary *queues.Summary) error {
	switch {
	case summary.Interrupted && s.endedBy == syscall.SIGHUP:
		return errHangup
	case summary.Interrupted && s.endedBy == syscall.SIGTERM:
		return errTerminated
	case summary.Interrupted:
		return errInterrupted
	case !summary.OK():
		return &failedError{}
	}
	return nil
}

func (s *session) networkRetries() int {
	if s.user.Scheduler.NetworkRetries != nil {
		return *s.user.Scheduler.NetworkRetries
	}
	return defaultNetworkRetries
}

// cleanupConfig turns on quota keeping for a build session of the targets, when a quota
// is set.
func (s *session) cleanupConfig(flag string, c *cache.Cache, g *element.Graph) (*queues.CleanupConfig, error) {
	quota, err := s.quota(flag, c)
	if err != nil || quota == 0 {
		return nil, err
	}
	return actions.CleanupConfig(c, g, quota)
}

// sources makes the payloads of the session's fetch and track jobs.
func (s *session) sources(c *cache.Cache) actions.Sources {
	return actions.Sources{Cache: c, Project: s.project, NetworkRetries: s.networkRetries(), TrackWithMirrors: s.opts.mirrors.trackWithMirrors,
		Remotes: append(slices.Clone(s.user.Remotes), s.project.Remotes...)}
}

// forwardSignals turns signals into scheduler commands until the returned stop is called;
// stop returns the first signal that terminated the session (nil: none did).
//   - SIGINT (no terminal UI): terminate; a second SIGINT kills at once.
//   - SIGTERM, SIGHUP (the terminal or the connection closed): terminate.
//   - SIGTSTP: suspend every job, then stop gantry itself; SIGCONT resumes the jobs.
func forwardSignals(sched *queues.Scheduler) (stop func() os.Signal) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGTSTP, syscall.SIGCONT)
	done, ended := make(chan struct{}), make(chan struct{})
	var first os.Signal // written by the goroutine only, read by stop once it ended
	go func() {
		defer close(ended)
		interrupts := 0
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				switch sig {
				case syscall.SIGINT:
					interrupts++
					if interrupts > 1 {
						sched.Send(queues.CmdKill)
					} else {
						sched.Send(queues.CmdTerminate)
					}
				case syscall.SIGTERM, syscall.SIGHUP:
					sched.Send(queues.CmdTerminate)
				case syscall.SIGTSTP:
					sched.Do(queues.CmdSuspend)
					syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				case syscall.SIGCONT:
					sched.Send(queues.CmdResume)
				}
				if first == nil && sig != syscall.SIGTSTP && sig != syscall.SIGCONT {
					first = sig
				}
			}
		}
	}()
	return func() os.Signal {
		signal.Stop(sigs)
		close(done)
		<-ended
		return first
	}
}
