package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// bwrapIsolationArgs are the namespace and filesystem options every bwrap
// invocation shares, the probe's included.
//
// No --new-session: it would put the command in a session and process group
// of its own, out of reach of a SIGSTOP to the job's process group.
// Runner.Run's NewGroup mode starts bwrap itself with setsid instead, which
// also leaves the sandbox without a controlling terminal (the TIOCSTI concern
// --new-session addresses).
func bwrapIsolationArgs(network bool) []string {
	args := []string{
		"--unshare-all", // user (if possible), ipc, pid, net, uts, cgroup
		"--hostname", "gantry",
		"--die-with-parent",
		"--dev", "/dev",
		"--proc", "/proc",
		"--tmpfs", "/tmp",
	}
	if network {
		args = append(args, "--share-net")
	}
	return args
}

// bwrapCommand returns the bwrap command line running argv in the sandbox
// described by cfg. argv[0] is looked up in the sandbox's PATH.
func bwrapCommand(cfg Config, argv []string) (string, []string, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return "", nil, errors.New("bwrap sandbox: bwrap is not installed (install bubblewrap, or use the host sandbox)")
	}
	if cfg.Sysroot == "" || cfg.BuildDir == "" {
		return "", nil, errors.New("bwrap sandbox: Sysroot and BuildDir must be set")
	}
	buildRoot, installRoot := cfg.sandboxBuildRoot(), cfg.sandboxInstallRoot()
	mounts := []string{"/dev", "/proc", "/tmp", buildRoot}
	if cfg.InstallDir != "" {
		mounts = append(mounts, installRoot)
	}
	// The sysroot is mounted read-only, so bwrap cannot create mount points
	// in it: create them on the host side. New directories only; nothing
	// staged (possibly hard-linked to the cache) is modified.
	for _, m := range mounts {
		if err := mkdirInRoot(cfg.Sysroot, m); err != nil {
			return "", nil, fmt.Errorf("bwrap sandbox: creating mount point %s in the sysroot: %w", m, err)
		}
	}

	bind := "--ro-bind"
	if cfg.WritableSysroot {
		bind = "--bind"
	}
	args := []string{bind, cfg.Sysroot, "/"}
	args = append(args, bwrapIsolationArgs(cfg.Network)...)
	args = append(args, "--bind", cfg.BuildDir, buildRoot)
	if cfg.InstallDir != "" {
		args = append(args, "--bind", cfg.InstallDir, installRoot)
	}
	// Pass the environment as arguments, not through bwrap's own
	// environment: a setuid bwrap would have LD_* variables stripped.
	args = append(args, "--clearenv")
	for _, kv := range bwrapEnv(cfg.Env) {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	args = append(args, "--chdir", buildRoot, "--")
	args = append(args, argv...)
	return bwrap, args, nil
}

// bwrapEnv is the environment inside the sandbox, sorted: cfg.Env with PATH
// defaulting to DefaultPath.
func bwrapEnv(env map[string]string) []string {
	out := make([]string, 0, len(env)+1)
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	if _, ok := env["PATH"]; !ok {
		out = append(out, "PATH="+DefaultPath)
	}
	sort.Strings(out)
	return out
}

// mkdirInRoot creates the directory dir (absolute, as seen inside root) under
// root, never following a symlink out of root: where a component exists and
// is not a plain directory, it stops and leaves the rest to bwrap.
func mkdirInRoot(root, dir string) error {
	cur := root
	for _, part := range strings.Split(path.Clean("/"+dir), "/") {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			return nil // a symlink or file: bwrap resolves it inside the sandbox
		case !errors.Is(err, os.ErrNotExist):
			return err
		}
		if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}
