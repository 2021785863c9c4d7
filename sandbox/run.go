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

// finish turns how a Runner's command ended into its error; direct says it ran
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

// Shell runs argv (default: an interactive sh) in the same environment
// Runner.Run would use, with stdin and cfg's Stdout and Stderr, for `gantry shell`.
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
	env := cfg
	env.Stdout, env.Stderr = nil, nil // the shell writes to cfg's: no output pipe
	p, err := Prepare(env)
	if err != nil {
		return -1, err
	}
	defer p.Close()
	var cmd *exec.Cmd
	switch cfg.Kind {
	case Host:
		path, args := p.sh, argv
		if len(argv) == 0 {
			if p.shErr != nil {
				return -1, p.shErr
			}
			args = []string{"sh", "-i"}
		} else if path, err = lookPathIn(argv[0], envValue(p.env, "PATH")); err != nil {
			return -1, fmt.Errorf("host sandbox: %w", err)
		}
		cmd = p.hostCmd(path, args)
	case Bwrap:
		if len(argv) == 0 {
			argv = []string{"/bin/sh", "-i"}
		}
		cmd = p.bwrapCmd(argv)
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
	state, err := execute(ctx, cmd, CallerGroup, cfg.onStart, nil)
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
