package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// Run runs `sh -e -c command` in the sandbox described by cfg, with output to
// cfg.Stdout and cfg.Stderr and /dev/null as stdin. cfg.Kind must be Host or
// Bwrap (see Resolve). On the host, a command that is one simple command of
// literal words is exec'd directly, as sh would run it (see simpleCommand).
//
// A non-zero exit is an *ExitError. When ctx is cancelled, the command gets
// SIGTERM (and SIGCONT, in case it is suspended), then SIGKILL after a grace
// period of 2s, and Run returns context.Cause(ctx). Which processes the
// signals reach is cfg.Group's business; see ProcessGroup.
func Run(ctx context.Context, cfg Config, command string) error {
	if err := checkKind(cfg.Kind); err != nil {
		return err
	}
	if cfg.Kind == Host {
		if argv := simpleCommand(command); argv != nil {
			if cmd := directHostCmd(cfg, argv); cmd != nil {
				state, err := start(ctx, cfg, cmd)
				var se *startError
				if !errors.As(err, &se) { // else sh runs it, and says why it cannot
					return finish(ctx, cfg, command, state, err, true)
				}
			}
		}
	}
	var cmd *exec.Cmd
	var err error
	switch cfg.Kind {
	case Host:
		var sh string
		if sh, err = hostShell(); err != nil {
			return err
		}
		cmd = hostCmd(cfg, sh, []string{"sh", "-e", "-c", command})
	case Bwrap:
		// Not direct: bwrap (before 0.9, --argv0) cannot exec a program found
		// by a lookup of ours under the name it was given, and its own execvp
		// failing exits 1, not sh's 127 or 126.
		cmd, err = bwrapCmd(cfg, []string{"/bin/sh", "-e", "-c", command})
		if err != nil {
			return err
		}
	}
	state, err := start(ctx, cfg, cmd)
	return finish(ctx, cfg, command, state, err, false)
}

// start runs cmd for Run with cfg's output, group and start hook.
func start(ctx context.Context, cfg Config, cmd *exec.Cmd) (*os.ProcessState, error) {
	cmd.Stdout, cmd.Stderr = cfg.Stdout, cfg.Stderr
	cmd.SysProcAttr = sysProcAttr(cfg.Group == NewGroup)
	return execute(ctx, cmd, cfg.Group, cfg.onStart)
}

// finish turns how Run's command ended into Run's error; direct says it ran
// without sh, which finish then stands in for.
func finish(ctx context.Context, cfg Config, command string, state *os.ProcessState, err error, direct bool) error {
	if err != nil {
		return wrapError(ctx, cfg.Kind, err)
	}
	code, sig := exitStatus(state)
	if direct {
		code, sig = reportLikeSh(cfg.Stderr, state)
	}
	if code != 0 {
		return &ExitError{Command: command, ExitCode: code, Signal: sig}
	}
	return nil
}

// Shell runs argv (default: an interactive sh) in the same environment Run
// would use, with stdin and cfg's Stdout and Stderr, for `gantry shell`.
// argv[0] is looked up in the environment's PATH (the sysroot's first on the
// host; the sandbox's under bwrap). The shell stays in the caller's process
// group and session, so it can use the caller's terminal. While it runs, the
// caller's process does not die of SIGINT or SIGQUIT (Ctrl-C is the shell's);
// a caller must not turn SIGINT into cancelling ctx meanwhile, and must not
// ignore SIGINT (signal.Ignore), which the shell would inherit.
//
// It returns the exit code (128+signal if killed by a signal); err is set only
// if the shell could not be run or ctx was cancelled (context.Cause(ctx)).
func Shell(ctx context.Context, cfg Config, argv []string, stdin io.Reader) (exitCode int, err error) {
	if err := checkKind(cfg.Kind); err != nil {
		return -1, err
	}
	var cmd *exec.Cmd
	switch cfg.Kind {
	case Host:
		path, args := "", argv
		if len(argv) == 0 {
			if path, err = hostShell(); err != nil {
				return -1, err
			}
			args = []string{"sh", "-i"}
		} else if path, err = lookPathIn(argv[0], envValue(hostEnv(cfg), "PATH")); err != nil {
			return -1, fmt.Errorf("host sandbox: %w", err)
		}
		cmd = hostCmd(cfg, path, args)
	case Bwrap:
		if len(argv) == 0 {
			argv = []string{"/bin/sh", "-i"}
		}
		if cmd, err = bwrapCmd(cfg, argv); err != nil {
			return -1, err
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, cfg.Stdout, cfg.Stderr
	cmd.SysProcAttr = sysProcAttr(false)
	defer keepForeground(stdin)()
	// Like system(3): the terminal's SIGINT and SIGQUIT are for the shell;
	// the caller must survive them. Caught (not ignored), so the shell
	// still gets the default dispositions across exec.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	state, err := execute(ctx, cmd, CallerGroup, cfg.onStart)
	if err != nil {
		return -1, wrapError(ctx, cfg.Kind, err)
	}
	code, _ := exitStatus(state)
	return code, nil
}

// wrapError says which sandbox failed, except for the cancellation cause,
// which reaches the user verbatim.
func wrapError(ctx context.Context, k Kind, err error) error {
	if cause := context.Cause(ctx); cause != nil && err == cause {
		return err
	}
	return fmt.Errorf("%s sandbox: %w", k, err)
}

func checkKind(k Kind) error {
	switch k {
	case Host, Bwrap:
		return nil
	case Auto, "":
		return errors.New("sandbox kind auto must be resolved with sandbox.Resolve before running commands")
	default:
		return fmt.Errorf("unknown sandbox kind %q", string(k))
	}
}

// hostCmd runs path with args (args[0] is the name) on the host in BuildDir.
func hostCmd(cfg Config, path string, args []string) *exec.Cmd {
	return &exec.Cmd{Path: path, Args: args, Dir: cfg.BuildDir, Env: hostEnv(cfg)}
}

// bwrapCmd runs argv in a bwrap sandbox; bwrap itself gets an empty
// environment, the command gets cfg's through bwrap's arguments.
func bwrapCmd(cfg Config, argv []string) (*exec.Cmd, error) {
	path, args, err := bwrapCommand(cfg, argv)
	if err != nil {
		return nil, err
	}
	return &exec.Cmd{Path: path, Args: append([]string{"bwrap"}, args...), Env: []string{}}, nil
}
