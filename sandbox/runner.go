package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Runner runs commands in one sandbox (see Runner.Run). What depends only on
// the Config is worked out once, by Prepare: on the host the environment (with
// the sysroot's existing search directories), the build directory's physical
// path that sh exports as PWD and the host's sh; under bwrap the command line
// up to the command and the mount points in the sysroot; one /dev/null, and one
// pipe for output to a writer that is not a file (see outputPipe). So a build
// job can prepare before it has a builder, and each command then costs little
// more than its fork and exec.
//
// The environment is fixed when the Runner is prepared: a directory a command
// creates in the sysroot is not added to the search paths of later commands.
//
// A Runner is for one goroutine at a time; Close it when done.
type Runner struct {
	cfg  Config
	null *os.File    // /dev/null (read-write): every command's stdin, and its output where cfg has none
	out  *outputPipe // every command's stdout and stderr, or nil: cfg's

	// Host: the environment of commands run under sh, and of those exec'd
	// directly (with PWD), or nil when a direct run could differ from sh's.
	env, directEnv []string
	dir            string // the build directory's physical path, for relative programs
	lookup         bool   // PATH can be searched as sh would (absolute entries only)
	sh             string // the host's sh, or "" and shErr
	shErr          error

	// Bwrap: bwrap and its arguments up to "--", before the command.
	bwrap     string
	bwrapArgs []string
}

// Prepare checks cfg and works out what running commands in it needs; see
// Runner. Its errors are those of a command that could not be started.
func Prepare(cfg Config) (*Runner, error) {
	if err := checkKind(cfg.Kind); err != nil {
		return nil, err
	}
	p := &Runner{cfg: cfg}
	switch cfg.Kind {
	case Host:
		p.env = hostEnv(cfg)
		p.sh, p.shErr = hostShell()
		p.dir, p.directEnv = directEnv(cfg, p.env)
		p.lookup = plainPath(envValue(p.env, "PATH"))
	case Bwrap:
		var err error
		if p.bwrap, p.bwrapArgs, err = bwrapCommand(cfg, nil); err != nil {
			return nil, err
		}
	}
	// One /dev/null and one output pipe for every command, where os/exec
	// would open them for each.
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, wrapError(context.Background(), cfg.Kind, err)
	}
	p.null = null
	if w := sharedWriter(cfg.Stdout, cfg.Stderr); w != nil {
		if p.out, err = newOutputPipe(w); err != nil {
			null.Close()
			return nil, wrapError(context.Background(), cfg.Kind, err)
		}
	}
	return p, nil
}

// Close passes on the output still in the pipe and releases what Prepare
// opened. The Runner must not be used after. Closing twice, or a nil Runner,
// does nothing.
func (p *Runner) Close() error {
	if p == nil || p.null == nil {
		return nil
	}
	err := p.null.Close()
	if p.out != nil {
		err = errors.Join(err, p.out.close())
	}
	p.null, p.out = nil, nil
	return err
}

// Run runs `sh -e -c command` in p's sandbox, with output to the Config's Stdout
// and Stderr and /dev/null as stdin. On the host, a command that is one simple
// command of literal words is exec'd directly, as sh would run it (see
// simpleCommand).
//
// A non-zero exit is an *ExitError. When ctx is cancelled, the command gets
// SIGTERM (and SIGCONT, in case it is suspended), then SIGKILL after killGrace,
// and Run returns context.Cause(ctx). Which processes the signals reach is the
// Config's Group's business; see ProcessGroup.
func (p *Runner) Run(ctx context.Context, command string) error {
	if p.cfg.Kind == Host && p.directEnv != nil {
		if argv := simpleCommand(command); argv != nil {
			if cmd := p.directCmd(argv); cmd != nil {
				state, err := p.start(ctx, cmd)
				var se *startError
				if !errors.As(err, &se) { // else sh runs it, and says why it cannot
					return finish(ctx, p.cfg, command, state, err, true)
				}
			}
		}
	}
	cmd, err := p.shCmd(command)
	if err != nil {
		return err
	}
	state, err := p.start(ctx, cmd)
	return finish(ctx, p.cfg, command, state, err, false)
}

// shCmd is the command running `sh -e -c command` in p's sandbox.
func (p *Runner) shCmd(command string) (*exec.Cmd, error) {
	if p.cfg.Kind == Host {
		if p.shErr != nil {
			return nil, p.shErr
		}
		return p.hostCmd(p.sh, []string{"sh", "-e", "-c", command}), nil
	}
	// Not direct: bwrap (before 0.9, --argv0) cannot exec a program found
	// by a lookup of ours under the name it was given, and its own execvp
	// failing exits 1, not sh's 127 or 126.
	return p.bwrapCmd([]string{"/bin/sh", "-e", "-c", command}), nil
}

// RunIn is Run with dir as the working directory instead of the build directory:
// a path as the commands see it (under bwrap, inside the sandbox: "/" for the
// sysroot). The command always runs under sh.
func (p *Runner) RunIn(ctx context.Context, dir, command string) error {
	cmd, err := p.shCmd(command)
	if err != nil {
		return err
	}
	if p.cfg.Kind == Host {
		cmd.Dir = dir
	} else {
		// bwrapArgs end with --chdir BUILDROOT --: a copy with dir instead.
		args := slices.Clone(cmd.Args)
		i := len(args) - 6 // args end "--chdir", buildRoot, "--", "/bin/sh", "-e", "-c", command
		if args[i-1] != "--chdir" {
			panic("sandbox: bwrap arguments without --chdir before the command")
		}
		args[i] = dir
		cmd.Args = args
	}
	state, err := p.start(ctx, cmd)
	return finish(ctx, p.cfg, command, state, err, false)
}

// start runs cmd with p's stdin and output, and cfg's group and start hook.
// When it returns, what the command wrote has reached cfg's Stdout and Stderr.
func (p *Runner) start(ctx context.Context, cmd *exec.Cmd) (*os.ProcessState, error) {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.null, p.cfg.Stdout, p.cfg.Stderr
	if cmd.Stdout == nil {
		cmd.Stdout = p.null
	}
	if cmd.Stderr == nil {
		cmd.Stderr = p.null
	}
	if p.out != nil {
		cmd.Stdout, cmd.Stderr = p.out.w, p.out.w
	}
	cmd.SysProcAttr = sysProcAttr(p.cfg.Group == NewGroup)
	return execute(ctx, cmd, p.cfg.Group, p.cfg.onStart, p.out)
}

// hostCmd runs path with args (args[0] is the name) on the host in BuildDir.
func (p *Runner) hostCmd(path string, args []string) *exec.Cmd {
	return &exec.Cmd{Path: path, Args: args, Dir: p.cfg.BuildDir, Env: p.env}
}

// bwrapCmd runs argv in the bwrap sandbox; bwrap itself gets an empty
// environment, the command gets cfg's through bwrap's arguments.
func (p *Runner) bwrapCmd(argv []string) *exec.Cmd {
	return &exec.Cmd{Path: p.bwrap, Args: slices.Concat([]string{"bwrap"}, p.bwrapArgs, argv), Env: []string{}}
}

// directCmd returns the command running argv on the host as sh would run it,
// or nil when argv[0] is not found in PATH (sh reports it). PATH is looked up
// for every command, as each `sh -c` does.
func (p *Runner) directCmd(argv []string) *exec.Cmd {
	path := argv[0]
	if strings.Contains(path, "/") {
		if !filepath.IsAbs(path) {
			path = filepath.Join(p.dir, path)
		}
	} else {
		var err error
		if !p.lookup {
			return nil
		}
		if path, err = lookPathIn(path, envValue(p.env, "PATH")); err != nil {
			return nil
		}
	}
	cmd := p.hostCmd(path, argv)
	cmd.Env = p.directEnv
	return cmd
}

// directEnv returns the build directory's physical path and the environment
// of commands exec'd directly on the host, env with the PWD sh would export;
// or "", nil when a direct run is not certain to be like sh's: a variable sh
// would not pass on, or an explicit PWD.
func directEnv(cfg Config, env []string) (dir string, direct []string) {
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !shellName(k) || k == "PWD" {
			return "", nil
		}
	}
	dir, err := filepath.Abs(cfg.BuildDir)
	if err != nil {
		return "", nil
	}
	// sh exports PWD, its physical working directory when it inherits none.
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return "", nil
	}
	return dir, append(slices.Clip(env), "PWD="+dir)
}

// plainPath reports whether our lookup in the PATH value pathList finds what
// sh's would: no relative entries, and none of dash's % entries.
func plainPath(pathList string) bool {
	if strings.Contains(pathList, "%") {
		return false
	}
	for _, d := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(d) {
			return false
		}
	}
	return true
}
