package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantry-build/gantry/internal/version"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	ios      *IOStreams
	dir      string   // -C
	dirs     []string // every -C/--directory given, in order (workspace open reads an old spelling)
	cacheDir string
	config   string
	ui       string
	uiSet    bool // --ui was given: it wins over GANTRY_UI and the user config
	verbose  bool
	options  []string    // --option NAME=VALUE, in the order given
	mirrors  mirrorFlags // of the commands that fetch or track
	// strict, noStrict: --strict, --no-strict (over the user configuration's strict).
	strict, noStrict bool

	s *session // made by the first command that asks (session)
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
	// --version prints what `gantry version` does.
	root.Version = version.String()
	root.SetVersionTemplate("gantry {{.Version}}\n")
	root.SetOut(ios.Out)
	root.SetErr(ios.ErrOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usagef("%v (see '%s --help')", err, c.CommandPath())
	})
	f := root.PersistentFlags()
	f.VarP(&dirFlag{&opts.dir, &opts.dirs}, "directory", "C", "run as if started in `DIR` (the project is found upward from there)")
	f.StringVar(&opts.cacheDir, "cache-dir", "", "local cache `DIR` (default $GANTRY_CACHE_DIR, else $XDG_CACHE_HOME/gantry)")
	f.StringVar(&opts.config, "config", "", "user configuration `FILE` (default $XDG_CONFIG_HOME/gantry/config.toml)")
	f.StringVar(&opts.ui, "ui", "auto", "progress display: auto, tui, plain or json")
	f.BoolVarP(&opts.verbose, "verbose", "v", false, "show more detail")
	f.StringArrayVarP(&opts.options, "option", "o", nil, "set project option `NAME=VALUE` (repeatable; the last wins)")
	f.BoolVar(&opts.noStrict, "no-strict", false, "reuse an artifact whose weak key matches although a dependency changed (docs/non-strict.md; not for CI)")
	root.Flags().Bool("version", false, "print gantry's version, as 'gantry version' does") // cobra's, with our text
	f.BoolVar(&opts.strict, "strict", false, "rebuild whatever a changed dependency reaches, over the user configuration's strict = false (the default)")

	root.AddCommand(
		newShowCmd(opts, nil),
		newExplainCmd(opts, nil),
		newTrackCmd(opts, nil),
		newFetchCmd(opts, nil),
		newBuildCmd(opts, nil),
		newPullCmd(opts, nil),
		newPushCmd(opts, nil),
		newArtifactCmd(opts),
		newShellCmd(opts, nil),
		newSourceCmd(opts),
		newWorkspaceCmd(opts),
		newCacheCmd(opts),
		newGraphCmd(opts, nil),
		newInitCmd(opts, nil),
		newVersionCmd(opts),
		newWorkerCmd(opts),
		newEnvironmentTopic(),
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

// dirFlag is -C/--directory: the last value wins; every value is kept.
type dirFlag struct {
	dir  *string
	dirs *[]string
}

func (d *dirFlag) String() string {
	if d.dir == nil {
		return ""
	}
	return *d.dir
}
func (d *dirFlag) Set(v string) error { *d.dir, *d.dirs = v, append(*d.dirs, v); return nil }
func (d *dirFlag) Type() string       { return "string" }

// startDir is where project lookup begins.
func (o *globalOptions) startDir() string {
	if o.dir != "" {
		return o.dir
	}
	wd, _ := os.Getwd()
	return wd
}

func newVersionCmd(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gantry's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(opts.ios.Out, "gantry %s\n", version.String())
			return nil
		},
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// rangeArgs accepts between lo and hi (-1: any number) arguments; otherwise it is bad
// usage, naming the command's usage line.
func rangeArgs(lo, hi int) cobra.PositionalArgs { return argCount(lo, hi, "wrong number of arguments") }

// argCount accepts between lo and hi (-1: any number) arguments; otherwise it is bad
// usage: the command, what is wrong, and its usage line.
func argCount(lo, hi int, wrong string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || (hi >= 0 && len(args) > hi) {
			return usagef("%s: %s (usage: %s)", cmd.CommandPath(), wrong, cmd.UseLine())
		}
		return nil
	}
}
