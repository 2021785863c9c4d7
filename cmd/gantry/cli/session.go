package cli

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/resources"
	"github.com/gantry-build/gantry/ui"
)

// session is what a command works on beyond its flags: the project with the user
// configuration and the lock file, the local cache, the graph of its targets and the
// progress display. Each is loaded the first time the command asks for it, and kept:
// one command runs per process, so it has one session (globalOptions.session). Every
// command reaches the project and the local cache through it (cache serve and
// cache verify --dir work on the store their flag names instead).
//
// A command that only reads never makes the cache (findCache finds it as it is); one
// that writes makes it once what it names loaded (prepareCache), so that a project that
// does not load leaves no cache behind.
type session struct {
	opts *globalOptions

	// project, user and lock are set by loadProject, once it succeeded; a command
	// without a project (configuredCache) may have user alone.
	project *element.Project
	user    *element.UserConfig
	lock    *element.Lock

	// loadProject and userConfig each run once: their errors are kept for later asks.
	projectLoaded, userLoaded bool
	projectErr, userErr       error
	found                     *cache.Cache // the local cache, found (findCache), made or not

	quotaFlag string // --cache-quota of a scheduler command, for the TUI header

	// junctionTargets: a target may be a junction, whose own sources track and fetch
	// work on (element.LoadWithJunctions); junctionProjects: and the project each holds
	// is loaded, which show describes (element.LoadShowingJunctions).
	junctionTargets, junctionProjects bool

	endedBy os.Signal // the signal that ended the last scheduler session, if one did
}

// session is the command's session, nothing of it loaded until the command asks.
func (o *globalOptions) session() *session {
	if o.s == nil {
		o.s = &session{opts: o}
	}
	return o.s
}

// loadProject finds and loads the project, the user configuration and the lock file,
// the first time it is called; later calls return its first error.
func (s *session) loadProject() error {
	if !s.projectLoaded {
		s.projectLoaded = true
		s.projectErr = s.readProject()
	}
	return s.projectErr
}

func (s *session) readProject() error {
	o := s.opts
	if o.dir != "" {
		if info, err := os.Stat(o.dir); err != nil || !info.IsDir() {
			return usagef("-C %s: not a directory", o.dir)
		}
	}
	root, err := element.FindProject(o.startDir())
	if err != nil {
		return err
	}
	user, err := s.userConfig()
	if err != nil {
		return err
	}
	cli, err := commandLineOptions(o.options)
	if err != nil {
		return err
	}
	project, err := element.LoadProjectFor(root, element.LoadOptions{
		Layers: func(name string) [][]element.OptionSetting {
			return [][]element.OptionSetting{user.ProjectOptions[name], cli} // command line > user config > default
		},
		SourcesDir:     cache.SourcesDirOf(s.cacheRoot()), // tar and git junctions project.toml includes through
		SourcesWaiting: s.opts.cacheNotice,
		UserOptions:    user.ProjectOptions, // for the projects junctions hold
	})
	if err != nil {
		return err
	}
	project.Hermetic = isHermetic(defaultSandbox()) // a --sandbox flag overrides it
	if err := useMirrors(project, user, o.mirrors); err != nil {
		return err
	}
	lock, err := element.LoadLock(root)
	if err != nil {
		return err
	}
	s.project, s.user, s.lock = project, user, lock
	return nil
}

// userConfig loads the user configuration, the first time it is called: --config >
// GANTRY_CONFIG > the default path (which may be absent).
func (s *session) userConfig() (*element.UserConfig, error) {
	if !s.userLoaded {
		s.userLoaded = true
		o := s.opts
		cfgPath, explicit := o.config, o.config != ""
		if !explicit {
			if env := os.Getenv("GANTRY_CONFIG"); env != "" {
				cfgPath, explicit = env, true
			} else {
				cfgPath = element.DefaultUserConfigPath()
			}
		}
		s.user, s.userErr = element.LoadUserConfig(cfgPath, explicit)
	}
	return s.user, s.userErr
}

// cacheRoot resolves the cache directory: flag > env > user config > default. The user
// configuration is loaded.
func (s *session) cacheRoot() string {
	switch {
	case s.opts.cacheDir != "":
		return s.opts.cacheDir
	case os.Getenv("GANTRY_CACHE_DIR") != "":
		return os.Getenv("GANTRY_CACHE_DIR")
	case s.user.Cache.Dir != "":
		return expandHome(s.user.Cache.Dir)
	}
	return element.DefaultCacheDir()
}

func expandHome(p string) string {
	if strings.HasPrefix(p, "~/") {
		home, _ := os.UserHomeDir()
		return filepath.Join(home, p[2:])
	}
	return os.ExpandEnv(p)
}

// findCache is the local cache as cache.At finds it, not made: a query reads it as it
// is (one not made yet is empty); a command that writes to it makes it (prepareCache).
func (s *session) findCache() (*cache.Cache, error) {
	if s.found == nil {
		c, err := cache.At(s.cacheRoot())
		if err != nil {
			return nil, actions.OpenCacheError(s.cacheRoot(), err)
		}
		s.found = c
	}
	return s.found, nil
}

// openCache is the local cache, made (cache.Open) for a command that writes to it
// before anything else loads.
func (s *session) openCache() (*cache.Cache, error) {
	c, err := cache.Open(s.cacheRoot())
	if err != nil {
		return nil, actions.OpenCacheError(s.cacheRoot(), err)
	}
	return c, nil
}

// prepareCache makes the cache that cache.At found (its directories), once the
// command's project and elements loaded.
func (s *session) prepareCache(c *cache.Cache) error {
	if err := c.Prepare(); err != nil {
		return actions.OpenCacheError(s.cacheRoot(), err)
	}
	return nil
}

// projectCache loads the project and finds the local cache, not made yet (cache.At:
// reading it finds nothing where there is none): the command makes it (prepareCache)
// once the elements it names loaded, so that a project that does not load leaves no
// cache behind.
func (s *session) projectCache() (*cache.Cache, error) {
	if err := s.loadProject(); err != nil {
		return nil, err
	}
	return s.findCache()
}

// configuredCache is the local cache for a command that needs no project, but honours
// its configuration when there is one: without one, the user configuration alone. The
// cache is found, not made (cache.At): a query reads it as it is (one not made yet is
// empty), a command that changes it or expects its layout makes it first (prepareCache).
func (s *session) configuredCache() (*cache.Cache, error) {
	if s.loadProject() != nil {
		if _, err := s.userConfig(); err != nil {
			return nil, err
		}
	}
	return s.findCache()
}

// configuredCacheLaidOut is configuredCache with the cache's layout made, and nothing
// removed: what crashed processes left is gc's to list and count (Prepare would
// remove some of it before gc looked, even with --dry-run).
func (s *session) configuredCacheLaidOut() (*cache.Cache, error) {
	c, err := s.configuredCache()
	if err == nil {
		if err = c.MakeLayout(); err != nil {
			err = actions.OpenCacheError(s.cacheRoot(), err)
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// elementArg accepts an element name, or a path to the element file relative to the cwd
// (tab completion in a shell gives "elements/app.toml").
func (s *session) elementArg(a string) string {
	if abs, err := filepath.Abs(a); err == nil {
		if rel, err := filepath.Rel(s.project.ElementDir(), abs); err == nil && !strings.HasPrefix(rel, "..") {
			if _, statErr := os.Stat(abs); statErr == nil {
				return filepath.ToSlash(rel)
			}
		}
	}
	return a
}

// loadGraph loads the targets named by args (or the default targets) and saves the
// parse cache, into a cache already made only (see loadGraphUnsaved). The project is
// loaded.
func (s *session) loadGraph(args []string) (*element.Graph, error) {
	g, save, err := s.loadGraphUnsaved(args)
	if err != nil {
		return nil, err
	}
	s.warnUnsaved(save())
	return g, nil
}

// loadGraphUnsaved is loadGraph leaving the parse cache's saving to save, which may run
// on another goroutine while the caller works with the graph (show prints meanwhile), as
// long as nothing loads or keys elements until it has returned. Its error is for
// warnUnsaved. save writes nothing into a cache not made yet (cache.Made): a command
// that only reads leaves no cache behind, and one that makes the cache saves once it
// made it.
func (s *session) loadGraphUnsaved(args []string) (*element.Graph, func() error, error) {
	targets, err := s.targets(args)
	if err != nil {
		return nil, nil, err
	}
	root := s.cacheRoot()
	pc := element.OpenParseCache(cache.LoadsDir(root), s.project.Root)
	s.project.SourcesDir = cache.SourcesDirOf(root) // where tar and git junctions are fetched
	s.project.SourcesWaiting = s.opts.cacheNotice
	load := element.LoadCached
	if s.junctionTargets {
		load = element.LoadWithJunctions
	}
	if s.junctionProjects {
		load = element.LoadShowingJunctions
	}
	g, err := load(s.project, s.lock, targets, pc)
	if err != nil {
		return nil, nil, err
	}
	if err := s.resolveStrictness(g); err != nil {
		return nil, nil, err
	}
	save := func() error {
		if _, err := cache.Attach(root); err != nil {
			return nil // not made yet (or not a cache): a read-only command writes nothing
		}
		return pc.Save()
	}
	return g, save, nil
}

// warnUnsaved reports a parse cache that could not be saved: only speed is lost.
func (s *session) warnUnsaved(err error) {
	if err != nil {
		s.opts.ios.Message("warning", err.Error()+" (loading is slower next time; nothing else is affected)")
	}
}

// pipeline is what every scheduler command starts from.
type pipeline struct {
	session *session
	graph   *element.Graph
	cache   *cache.Cache
	display ui.Display
	limits  map[resources.Resource]int
	onError element.OnError
	maxJobs int
	// outcomes is the project's outcome memo, and stats the learnt build durations
	// (a damaged stats file only loses estimates: empty stats), both read while the
	// graph loaded when the command asked for them (pipelineReads), nil otherwise.
	outcomes *cache.OutcomeMemo
	stats    *cache.Stats
}

// pipelineReads says what a command reads of the cache while its graph loads.
type pipelineReads uint8

const (
	readOutcomes pipelineReads = 1 << iota // the project's outcome memo: pipeline.outcomes
	readStats                              // the learnt build durations: pipeline.stats
)

// pipeline loads the project, the targets named by args, the limits and the cache.
// What the command reads of the cache (reads: the project's outcome memo, the build
// durations) is read on another goroutine while the graph loads (the durations of
// 10,000 elements are 5% of a null build's CPU); an error loading the graph is reported
// first, and the cache's directories are made only once the graph loaded, so that a
// project that does not load leaves no cache behind; the parse cache is saved after.
func (s *session) pipeline(f *schedulerFlags, args []string, reads pipelineReads) (*pipeline, error) {
	if err := checkSandboxFlag(f.sandbox); err != nil {
		return nil, err
	}
	if err := s.loadProject(); err != nil {
		return nil, err
	}
	s.quotaFlag = f.quota
	s.project.Hermetic = isHermetic(f.sandbox) // the keys say what the artifacts are
	display, err := s.display()
	if err != nil {
		return nil, err
	}
	p := &pipeline{session: s, display: display}
	if p.limits, p.onError, p.maxJobs, err = s.limits(f); err != nil {
		return nil, err
	}
	if p.onError == "" {
		// Default quit; at a terminal the TUI asks what to do instead.
		p.onError = element.OnErrorQuit
		if _, ok := display.(*ui.TUI); ok {
			p.onError = element.OnErrorAsk
		}
	}
	root := s.cacheRoot()
	opened := make(chan error, 1)
	go func() {
		var err error
		if p.cache, err = cache.At(root); err == nil {
			if reads&readOutcomes != 0 {
				p.outcomes = p.cache.OpenOutcomeMemo(s.project.Name)
			}
			if reads&readStats != 0 {
				p.stats, _ = p.cache.LoadStats() // never nil
			}
		}
		opened <- err
	}()
	var saveLoads func() error
	p.graph, saveLoads, err = s.loadGraphUnsaved(args)
	cerr := <-opened
	if err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, actions.OpenCacheError(root, cerr)
	}
	if err := s.prepareCache(p.cache); err != nil {
		return nil, err
	}
	s.found = p.cache
	s.warnUnsaved(saveLoads()) // into the cache just made, on a first session
	return p, nil
}

// display picks the progress display for --ui.
// Precedence: --ui > GANTRY_UI > the user config's [ui] mode > auto.
func (s *session) display() (ui.Display, error) {
	o := s.opts
	mode, from := o.ui, "--ui %q"
	if !o.uiSet {
		if env := os.Getenv("GANTRY_UI"); env != "" {
			mode, from = env, "GANTRY_UI=%q"
		} else if s.user.UI.Mode != "" {
			mode, from = s.user.UI.Mode, "[ui] mode %q in the user configuration"
		}
	}
	uo := ui.Options{Verbose: o.verbose}
	switch mode {
	case "auto":
		if s.wantTUI() {
			return s.tui(uo)
		}
		return ui.NewPlain(o.ios.ErrOut, s.ciAnnotations(uo, false)), nil
	case "plain":
		return ui.NewPlain(o.ios.ErrOut, s.ciAnnotations(uo, true)), nil
	case "json":
		o.ios.jsonErr = true
		return ui.NewJSON(o.ios.ErrOut, uo), nil
	case "tui":
		return s.tui(uo)
	}
	return nil, usagef(from+": use auto, tui, plain or json", mode)
}

// ciAnnotations turns on GitHub Actions' workflow commands in plain output (ui.CIAnnotations)
// under GITHUB_ACTIONS=true, or under CI=true when plain output was asked for: another
// CI's log shows them as they are, which --ui plain accepts.
func (s *session) ciAnnotations(uo ui.Options, plain bool) ui.Options {
	if os.Getenv("GITHUB_ACTIONS") == "true" || plain && os.Getenv("CI") == "true" {
		uo.CI = &ui.CIAnnotations{File: s.elementFile}
	}
	return uo
}

// elementFile is the file of the element named (of a junction's element, the
// junction's), relative to the repository holding the project, else to the project.
func (s *session) elementFile(name string) string {
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name = name[:i]
	}
	p := s.project
	path := filepath.Join(p.Root, p.ElementPath, filepath.FromSlash(name))
	base := p.Root
	for d := p.Root; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, ".git")); err == nil {
			base = d
			break
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if rel, err := filepath.Rel(base, path); err == nil {
		return filepath.ToSlash(rel)
	}
	return path
}

// commandLineOptions reads --option NAME=VALUE values; one without '=' is a usage error.
func commandLineOptions(values []string) ([]element.OptionSetting, error) {
	var out []element.OptionSetting
	for _, v := range values {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return nil, usagef("--option %s: expected NAME=VALUE (e.g. --option debug=true; bst's -o NAME VALUE is -o NAME=VALUE here)", v)
		}
		out = append(out, element.OptionSetting{Name: name, Value: value})
	}
	return out, nil
}

// resolveStrictness keys g for a non-strict session when the command runs one:
// --no-strict, or strict = false for the project in the user configuration without
// --strict (actions.ResolveNonStrict). Strict is the default.
func (s *session) resolveStrictness(g *element.Graph) error {
	o := s.opts
	if o.strict && o.noStrict {
		return usagef("--strict and --no-strict contradict each other: give one")
	}
	if s.strictSession() {
		return nil
	}
	c, err := s.findCache() // a cache not made yet: nothing to reuse
	if err != nil {
		return err
	}
	actions.ResolveNonStrict(g, c, nil)
	return nil
}

// strictSession says whether the command's session is strict (resolveStrictness).
func (s *session) strictSession() bool {
	o := s.opts
	return o.strict || (!o.noStrict && s.user.Strict(s.project.Name))
}
