package cli

import (
	"io"
	"os"
	"os/exec"

	"github.com/gantry-build/gantry/ui"
)

// wantTUI says whether --ui auto picks the interactive display: stderr is a terminal
// that can draw one.
func (s *session) wantTUI() bool {
	return s.opts.ios.IsStderrTTY() && os.Getenv("TERM") != "dumb"
}

// tui makes the interactive display on the terminal on stderr. Keys come from stdin
// when it is the terminal, else from /dev/tty; with neither it only shows.
func (s *session) tui(uo ui.Options) (*ui.TUI, error) {
	o := s.opts
	if !o.ios.IsStderrTTY() {
		return nil, usagef("--ui tui: stderr is not a terminal, so there is nothing to draw on; use --ui plain or --ui json")
	}
	var in io.Reader
	if o.ios.IsStdinTTY() {
		in = o.ios.In
	} else if tty, err := os.Open("/dev/tty"); err == nil {
		in = tty // open for the rest of the process, like the terminal itself
	}
	_, noColor := os.LookupEnv("NO_COLOR")
	opts := ui.TUIOptions{Options: uo, In: in, Out: o.ios.ErrOut, NoColor: noColor || (s.user.UI.Color != nil && !*s.user.UI.Color),
		Shell: s.failedShell}
	if s.quotaFlag != "" || os.Getenv("GANTRY_CACHE_QUOTA") != "" || s.user.Cache.Quota != "" {
		// Not made here: the session makes the cache once its project loaded
		// (session.pipeline), before the display measures it.
		c, err := s.findCache()
		if err != nil {
			return nil, err
		}
		if opts.CacheQuota, err = s.quota(s.quotaFlag, c); err != nil {
			return nil, err
		}
		opts.CacheUsage = c.Usage
	}
	return ui.NewTUI(opts), nil
}

// failedShell is the failure prompt's "shell": gantry shell --build on the failed tree,
// with this session's directory, cache and configuration.
func (s *session) failedShell(element string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	args := []string{"-C", s.project.Root}
	if s.opts.cacheDir != "" {
		args = append(args, "--cache-dir", s.opts.cacheDir)
	}
	if s.opts.config != "" {
		args = append(args, "--config", s.opts.config)
	}
	cmd := exec.Command(exe, append(args, "shell", "--build", element)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd
}
