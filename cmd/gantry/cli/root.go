package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	ios      *IOStreams
	dir      string // -C
	cacheDir string
	config   string
	ui       string
	uiSet    bool // --ui was given: it wins over GANTRY_UI and the user config
	verbose  bool
}

// session is a loaded project with the user configuration, for commands that need one.
type session struct {
	opts    *globalOptions
	project *element.Project
	user    *element.UserConfig
	lock    *element.Lock

	quotaFlag string // --cache-quota of a scheduler command, for the TUI header

	endedBy os.Signal // the signal that ended the last scheduler session, if one did
}

func newRootCmd(ios *IOStreams) *cobra.Command {
	opts := &globalOptions{ios: ios}
	root := &cobra.Command{
		Use:   "gantry",
		Short: "Build orchestrator: elements through Track → Pull → Fetch → Build → Push",
		Long: `gantry builds a graph of elements (TOML files) into cached artifacts.

A project is a directory with project.toml and element files under elements/.
Run 'gantry init' to start one, 'gantry show' to inspect it.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			opts.uiSet = cmd.Flags().Changed("ui")
			// Errors loading the project come before the display: under --ui json
			// they must be JSON too.
			ios.jsonErr = earlyUIMode(cmd.Flags().Lookup("ui")) == "json"
		},
	}
	root.SetOut(ios.Out)
	root.SetErr(ios.ErrOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usagef("%v (see '%s --help')", err, c.CommandPath())
	})
	f := root.PersistentFlags()
	f.StringVarP(&opts.dir, "directory", "C", "", "run as if started in `DIR` (the project is found upward from there)")
	f.StringVar(&opts.cacheDir, "cache-dir", "", "local cache `DIR` (default $GANTRY_CACHE_DIR, else $XDG_CACHE_HOME/gantry)")
	f.StringVar(&opts.config, "config", "", "user configuration `FILE` (default $XDG_CONFIG_HOME/gantry/config.toml)")
	f.StringVar(&opts.ui, "ui", "auto", "progress display: auto, tui, plain or json")
	f.BoolVarP(&opts.verbose, "verbose", "v", false, "show more detail")

	root.AddCommand(
		newShowCmd(opts),
		newExplainCmd(opts),
		newTrackCmd(opts),
		newFetchCmd(opts),
		newBuildCmd(opts),
		newPullCmd(opts),
		newPushCmd(opts),
		newArtifactCmd(opts),
		newShellCmd(opts),
		newWorkspaceCmd(opts),
		newCacheCmd(opts),
		newGraphCmd(opts),
		newInitCmd(opts),
		newVersionCmd(opts),
	)
	root.InitDefaultCompletionCmd()
	completeElementArgs(opts, root)
	root.SetHelpCommand(newHelpCmd(root))
	requireSubcommands(root)
	return root
}

// requireSubcommands makes every command group (a command with subcommands and
// nothing to run itself, root included) a usage error, exit 2, when it is given no
// subcommand or an unknown one; cobra would print the help and exit 0, so a typo in
// a script would pass unnoticed.
func requireSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		requireSubcommands(sub)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q for %q (see '%s --help')", args[0], c.CommandPath(), c.CommandPath())
		}
		var names []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		return usagef("missing command for %q: use one of %s (see '%s --help')", c.CommandPath(), strings.Join(names, ", "), c.CommandPath())
	}
}

// newHelpCmd is `gantry help [COMMAND...]`; an unknown topic is a usage error.
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, rest, err := root.Find(args)
			if err != nil || c == nil || len(rest) > 0 {
				return usagef("unknown help topic %q (see 'gantry --help')", strings.Join(args, " "))
			}
			return c.Help()
		},
	}
}

// earlyUIMode is the --ui mode as far as it is known before the user configuration is
// loaded: the flag, else GANTRY_UI. (A mode set in the user configuration applies
// once the display is chosen.)
func earlyUIMode(flag *pflag.Flag) string {
	if flag != nil && flag.Changed {
		return flag.Value.String()
	}
	return os.Getenv("GANTRY_UI")
}

// startDir is where project lookup begins.
func (o *globalOptions) startDir() string {
	if o.dir != "" {
		return o.dir
	}
	wd, _ := os.Getwd()
	return wd
}

// load finds and loads the project, the user configuration and the lock file.
func (o *globalOptions) load() (*session, error) {
	if o.dir != "" {
		if info, err := os.Stat(o.dir); err != nil || !info.IsDir() {
			return nil, usagef("-C %s: not a directory", o.dir)
		}
	}
	root, err := element.FindProject(o.startDir())
	if err != nil {
		return nil, err
	}
	project, err := element.LoadProject(root)
	if err != nil {
		return nil, err
	}
	project.Hermetic = isHermetic(defaultSandbox()) // a --sandbox flag overrides it
	user, err := o.userConfig()
	if err != nil {
		return nil, err
	}
	lock, err := element.LoadLock(root)
	if err != nil {
		return nil, err
	}
	return &session{opts: o, project: project, user: user, lock: lock}, nil
}

// userConfig loads the user configuration: --config > GANTRY_CONFIG > the default path
// (which may be absent).
func (o *globalOptions) userConfig() (*element.UserConfig, error) {
	cfgPath, explicit := o.config, o.config != ""
	if !explicit {
		if env := os.Getenv("GANTRY_CONFIG"); env != "" {
			cfgPath, explicit = env, true
		} else {
			cfgPath = element.DefaultUserConfigPath()
		}
	}
	return element.LoadUserConfig(cfgPath, explicit)
}

// cacheRoot resolves the cache directory: flag > env > user config > default.
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
// parse cache, into a cache already made only (see loadGraphUnsaved).
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
	g, err := element.LoadCached(s.project, s.lock, targets, pc)
	if err != nil {
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

func newVersionCmd(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gantry's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(opts.ios.Out, "gantry %s\n", version())
			return nil
		},
	}
}

func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " (" + s.Value[:12] + ")"
		}
	}
	return v
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usagef("%s: wrong number of arguments (usage: %s)", cmd.CommandPath(), cmd.UseLine())
		}
		return nil
	}
}
