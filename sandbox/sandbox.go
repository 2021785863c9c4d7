// Package sandbox runs an element's build commands in a staged build root.
//
// Two backends exist (DESIGN.md §4):
//
//   - bwrap: bubblewrap makes the staged sysroot the root directory (read-only),
//     binds the build and install directories into it, and unshares every
//     namespace, so only declared dependencies are visible and there is no
//     network. Hermetic; what BuildStream does.
//   - host: commands run on the host with the build directory as the working
//     directory, and PATH and friends prefixed with the sysroot's directories.
//     Not hermetic, works everywhere.
//
// Kind "auto" is turned into one of these by Resolve before anything runs;
// the caller then expands %{build-root}, %{install-root} and %{sysroot} for
// the resolved kind, since host and bwrap see different paths (under bwrap,
// Config's SandboxBuildRoot and SandboxInstallRoot, and /).
//
// Every command runs as `sh -e -c COMMAND`. Process hygiene: the command's
// process is killed if gantry dies (Pdeathsig, and bwrap's --die-with-parent),
// and cancelling the context sends SIGTERM and, after a grace period, SIGKILL.
// See ProcessGroup for which processes those signals reach.
package sandbox

import (
	"fmt"
	"io"
	"syscall"
)

// Kind names a sandbox backend, as written in project and user configuration.
type Kind string

const (
	// Auto picks Bwrap where the sysroot provides /bin/sh and bwrap works,
	// otherwise Host. It must be resolved with Resolve before running.
	Auto Kind = "auto"
	// Host runs commands directly on the host.
	Host Kind = "host"
	// Bwrap runs commands under bubblewrap with the sysroot as /.
	Bwrap Kind = "bwrap"
)

// String returns the kind as written in configuration.
func (k Kind) String() string { return string(k) }

// Default locations of the build and install directories as seen by commands
// running under bwrap, used when Config leaves them empty.
const (
	DefaultSandboxBuildRoot   = "/gantry/build"
	DefaultSandboxInstallRoot = "/gantry/install"
)

// ProcessGroup says which process group a command started by Runner.Run
// lives in, and so which processes a signal to a group reaches.
type ProcessGroup int

const (
	// NewGroup (the default) starts the command in a new session and process
	// group of its own (Setsid: it also has no controlling terminal, so it
	// cannot write to or inject input into the user's terminal). On
	// cancellation Runner.Run signals the whole group, which includes every
	// process the command started, in the sandbox or not, and when the
	// command exits it kills whatever it left running in the group (on
	// Linux).
	//
	// Use it when Runner.Run is called in-process and nobody outside needs to
	// signal the command.
	NewGroup ProcessGroup = iota

	// CallerGroup leaves the command in the caller's process group. Use it in
	// a `gantry job` child that the scheduler suspends (SIGSTOP), resumes and
	// terminates by signalling the job's process group: the command and all
	// of its children, including those inside bwrap's PID namespace, are in
	// that group and receive those signals. (A NewGroup command would keep
	// running while its job is stopped.) On cancellation Runner.Run signals
	// the command's process and its descendants (found in /proc on Linux; under
	// bwrap, the sandbox dies with its bwrap process anyway). Background
	// processes a host command leaves running when it exits normally are not
	// killed by Runner.Run; they stay in the caller's group.
	CallerGroup
)

// Config describes one staged build root and how to run commands in it.
type Config struct {
	// Kind is the resolved backend, Host or Bwrap (see Resolve).
	Kind Kind

	// Sysroot is the host directory holding the staged dependencies; it
	// becomes / under bwrap (mounted read-only, since staged files may be
	// hard links into the artifact cache, unless WritableSysroot).
	Sysroot string
	// WritableSysroot mounts the sysroot writable under bwrap: for integration
	// commands, which update it. Only for a sysroot of copies.
	WritableSysroot bool
	// BuildDir is the host directory holding the staged sources; commands
	// run with it as their working directory.
	BuildDir string
	// InstallDir is the host directory collected as the artifact. Optional
	// (a shell may not need one).
	InstallDir string

	// SandboxBuildRoot and SandboxInstallRoot are where BuildDir and
	// InstallDir appear to commands under bwrap. Empty means
	// DefaultSandboxBuildRoot and DefaultSandboxInstallRoot.
	SandboxBuildRoot, SandboxInstallRoot string

	// Env is the build environment. On the host, PATH, LD_LIBRARY_PATH,
	// LIBRARY_PATH, CPATH and PKG_CONFIG_PATH are prefixed with the
	// sysroot's directories; under bwrap it is the complete environment, with
	// PATH defaulting to DefaultPath.
	Env map[string]string

	// Stdout and Stderr receive the command's output (the build log). Nil
	// discards it. Runner.Run gives commands /dev/null as stdin.
	Stdout, Stderr io.Writer

	// Network keeps the host's network under bwrap. The host backend always
	// has the network.
	Network bool

	// Group selects the process group of commands started by Runner.Run;
	// Shell always uses the caller's group, which owns the terminal.
	Group ProcessGroup

	// onStart, if set, is called with the pid of the started process (tests).
	onStart func(pid int)
}

// DefaultPath is PATH under bwrap when Env does not set it.
const DefaultPath = "/usr/bin:/bin:/usr/sbin:/sbin"

func (c Config) sandboxBuildRoot() string {
	if c.SandboxBuildRoot == "" {
		return DefaultSandboxBuildRoot
	}
	return c.SandboxBuildRoot
}

func (c Config) sandboxInstallRoot() string {
	if c.SandboxInstallRoot == "" {
		return DefaultSandboxInstallRoot
	}
	return c.SandboxInstallRoot
}

// ExitError reports a command that exited with a non-zero status or was
// killed by a signal.
type ExitError struct {
	Command  string
	ExitCode int            // the exit status; 128+signal for a signal, as sh reports it
	Signal   syscall.Signal // the signal that killed the process, or 0
}

func (e *ExitError) Error() string {
	// The whole command: displays cut it to their width, logs and JSON keep it.
	cmd := e.Command
	if e.Signal != 0 {
		return fmt.Sprintf("command killed by signal %d (%v): %s", int(e.Signal), e.Signal, cmd)
	}
	return fmt.Sprintf("command failed with exit code %d: %s", e.ExitCode, cmd)
}
