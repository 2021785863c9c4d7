//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/proctest"
	"github.com/gantry-build/gantry/internal/proctree"
)

// TestMain doubles as a helper process standing in for a `gantry job` child:
// see runHelper.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	os.Exit(m.Run())
}

const helperEnv = "GANTRY_SANDBOX_TEST_HELPER"

// runHelper runs one command with Run in CallerGroup mode, described by
// environment variables, with output to stdout.
func runHelper() int {
	cfg := Config{
		Kind:       Kind(os.Getenv(helperEnv)),
		Sysroot:    os.Getenv("HELPER_SYSROOT"),
		BuildDir:   os.Getenv("HELPER_BUILD"),
		InstallDir: os.Getenv("HELPER_INSTALL"),
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		Group:      CallerGroup,
	}
	if err := runCommand(context.Background(), cfg, os.Getenv("HELPER_COMMAND")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func bwrapConfig(t *testing.T) Config {
	t.Helper()
	requireBwrap(t)
	sysroot, build, install := testDirs(t)
	busyboxSysroot(t, sysroot)
	return Config{Kind: Bwrap, Sysroot: sysroot, BuildDir: build, InstallDir: install,
		SandboxBuildRoot: "/gantry/build", SandboxInstallRoot: "/gantry/install"}
}

func TestResolveAutoPicksBwrapForBusyboxSysroot(t *testing.T) {
	cfg := bwrapConfig(t)
	if k, why := Resolve(Auto, cfg.Sysroot); k != Bwrap {
		t.Errorf("Resolve(auto, busybox sysroot) = %q, %q; want bwrap", k, why)
	}
	if k, why := Resolve(Auto, t.TempDir()); k != Host {
		t.Errorf("Resolve(auto, empty sysroot) = %q, %q; want host", k, why)
	}
}

func TestBwrapRunWritesInstallRoot(t *testing.T) {
	cfg := bwrapConfig(t)
	buildRoot, installRoot, sysroot := paths(cfg, Bwrap)
	if buildRoot != "/gantry/build" || installRoot != "/gantry/install" || sysroot != "/" {
		t.Fatalf("Paths(Bwrap) = %q %q %q", buildRoot, installRoot, sysroot)
	}
	writeFile(t, filepath.Join(cfg.BuildDir, "src.txt"), "source\n", 0o644)
	var log bytes.Buffer
	cfg.Stdout, cfg.Stderr = &log, &log
	err := runCommand(context.Background(), cfg, "mkdir -p "+installRoot+"/share\ncp src.txt "+installRoot+"/share/\npwd > "+installRoot+"/pwd\nhostname > "+installRoot+"/hostname")
	if err != nil {
		t.Fatalf("%v; log:\n%s", err, log.String())
	}
	if got := readFile(t, filepath.Join(cfg.InstallDir, "share", "src.txt")); got != "source\n" {
		t.Errorf("installed file = %q", got)
	}
	if got := readFile(t, filepath.Join(cfg.InstallDir, "pwd")); got != "/gantry/build\n" {
		t.Errorf("cwd = %q, want /gantry/build", got)
	}
	if got := readFile(t, filepath.Join(cfg.InstallDir, "hostname")); got != "gantry\n" {
		t.Errorf("hostname = %q, want gantry", got)
	}
}

func TestBwrapIsolation(t *testing.T) {
	cfg := bwrapConfig(t)
	secret := filepath.Join(t.TempDir(), "secret")
	writeFile(t, secret, "host file\n", 0o644)
	cmd := fmt.Sprintf(`
test ! -e %s
test ! -e /etc/hostname
test ! -e /usr/bin/go
if touch /bin/new 2>/dev/null; then echo "the sysroot is writable"; exit 1; fi
touch /tmp/scratch
ls / > /gantry/install/root
cat /proc/net/dev > /gantry/install/netdev`, secret)
	var log bytes.Buffer
	cfg.Stdout, cfg.Stderr = &log, &log
	if err := runCommand(context.Background(), cfg, cmd); err != nil {
		t.Fatalf("%v; log:\n%s", err, log.String())
	}
	if got, want := strings.Fields(readFile(t, filepath.Join(cfg.InstallDir, "root"))), []string{"bin", "dev", "gantry", "proc", "tmp"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("/ in the sandbox holds %v, want %v", got, want)
	}
	if got := interfaces(readFile(t, filepath.Join(cfg.InstallDir, "netdev"))); strings.Join(got, " ") != "lo" {
		t.Errorf("network interfaces in the sandbox: %v, want only lo", got)
	}
	if _, err := os.Stat(filepath.Join(cfg.Sysroot, "tmp", "scratch")); err == nil {
		t.Error("/tmp in the sandbox is the sysroot's directory, not a tmpfs")
	}
}

func TestBwrapNetwork(t *testing.T) {
	cfg := bwrapConfig(t)
	host, err := os.ReadFile("/proc/net/dev")
	if err != nil || len(interfaces(string(host))) < 2 {
		t.Skip("the host has no network interface besides lo")
	}
	cfg.Network = true
	if err := runCommand(context.Background(), cfg, "cat /proc/net/dev > /gantry/install/netdev"); err != nil {
		t.Fatal(err)
	}
	if got := interfaces(readFile(t, filepath.Join(cfg.InstallDir, "netdev"))); len(got) < 2 {
		t.Errorf("with Network, the sandbox sees only %v", got)
	}
}

// interfaces lists the interface names in /proc/net/dev.
func interfaces(netdev string) []string {
	var names []string
	for _, line := range strings.Split(netdev, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			names = append(names, strings.TrimSpace(name))
		}
	}
	return names
}

func TestBwrapEnvironment(t *testing.T) {
	t.Setenv("GANTRY_HOST_ONLY", "leak")
	cfg := bwrapConfig(t)
	cfg.Env = map[string]string{"FOO": "bar baz", "LD_LIBRARY_PATH": "/opt/lib"}
	var out bytes.Buffer
	cfg.Stdout = &out
	if err := runCommand(context.Background(), cfg, "env"); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	want := map[string]string{"FOO": "bar baz", "LD_LIBRARY_PATH": "/opt/lib", "PATH": DefaultPath}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["GANTRY_HOST_ONLY"]; ok {
		t.Error("the host environment leaked into the sandbox")
	}
}

func TestBwrapExitError(t *testing.T) {
	cfg := bwrapConfig(t)
	err := runCommand(context.Background(), cfg, "touch first\nfalse\ntouch second")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.ExitCode != 1 {
		t.Fatalf("err = %v, want exit code 1", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.BuildDir, "second")); err == nil {
		t.Error("sh -e went on after a failing command")
	}
	err = runCommand(context.Background(), cfg, "exit 7")
	if !errors.As(err, &ee) || ee.ExitCode != 7 {
		t.Fatalf("err = %v, want exit code 7", err)
	}
}

func TestBwrapShell(t *testing.T) {
	cfg := bwrapConfig(t)
	cfg.Env = map[string]string{"FOO": "bar"}
	var out bytes.Buffer
	cfg.Stdout, cfg.Stderr = &out, &bytes.Buffer{}
	code, err := Shell(context.Background(), cfg, nil, strings.NewReader("echo \"$FOO in $(pwd)\"\nexit 4\n"))
	if err != nil || code != 4 {
		t.Fatalf("Shell() = %d, %v", code, err)
	}
	if !strings.Contains(out.String(), "bar in /gantry/build\n") {
		t.Errorf("shell output = %q", out.String())
	}
	out.Reset()
	code, err = Shell(context.Background(), cfg, []string{"cat", "/proc/1/comm"}, nil)
	if err != nil || code != 0 || out.String() != "bwrap\n" {
		t.Errorf("Shell(cat) = %d, %v, %q", code, err, out.String())
	}
}

// TestBwrapSuspendAndCancelNewGroup stops the command's process group (as a
// scheduler would) and checks that everything in the sandbox stops, then
// cancels while it is stopped.
func TestBwrapSuspendAndCancelNewGroup(t *testing.T) {
	cfg := bwrapConfig(t)
	out := newReadyWriter()
	cfg.Stdout, cfg.Stderr = out, out
	pidc := make(chan int, 1)
	cfg.onStart = func(pid int) { pidc <- pid }
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- runCommand(ctx, cfg, "sleep 100 &\necho ready\nsleep 100") }()
	pgid := <-pidc
	waitReady(t, out, errc)
	members := proctest.Group(pgid)
	if len(members) < 4 { // bwrap, bwrap (init of the PID namespace), sh, 2×sleep
		t.Fatalf("process group %d has only:\n%s", pgid, proctest.DescribeGroup(pgid))
	}

	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, "every process in the sandbox is stopped", func() bool { return allStopped(pgid, len(members)) })
	if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, "every process in the sandbox runs again", func() bool { return proctest.NoneStopped(proctest.Group(pgid)) })

	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, "every process in the sandbox is stopped", func() bool { return allStopped(pgid, len(members)) })
	cause := errors.New("terminated by test")
	cancel(cause)
	select {
	case err := <-errc:
		if !errors.Is(err, cause) {
			t.Errorf("Run returned %v, want the cause", err)
		}
	case <-time.After(killGrace + 5*time.Second):
		t.Fatal("Run did not return after cancellation of a stopped sandbox")
	}
	for _, p := range members {
		proctest.Eventually(t, fmt.Sprintf("%s (%d) is gone", p.Comm, p.PID), func() bool { return !proctest.Alive(p.PID) })
	}
}

// TestCallerGroupSuspendAndTerminate runs a helper process standing in for a
// `gantry job` child, in its own process group, which runs the command with
// CallerGroup. SIGSTOP to the helper's group must stop everything the command
// runs, in the sandbox too; SIGTERM to the group must end it all.
func TestCallerGroupSuspendAndTerminate(t *testing.T) {
	for _, kind := range []Kind{Host, Bwrap} {
		t.Run(string(kind), func(t *testing.T) {
			var cfg Config
			if kind == Bwrap {
				cfg = bwrapConfig(t)
			} else {
				cfg = hostConfig(t)
			}
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			helper := exec.Command(exe)
			helper.Env = append(os.Environ(), helperEnv+"="+string(kind),
				"HELPER_SYSROOT="+cfg.Sysroot, "HELPER_BUILD="+cfg.BuildDir, "HELPER_INSTALL="+cfg.InstallDir,
				"HELPER_COMMAND=sleep 100 &\necho ready\nsleep 100")
			helper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			helper.Stderr = os.Stderr
			stdout, err := helper.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			pgid := helper.Process.Pid
			t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
			if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
				t.Fatalf("helper said %q, %v", line, err)
			}
			members := proctest.Group(pgid)

			if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			proctest.EventuallyDescribed(t, "everything in the job's group is stopped", func() bool { return allStopped(pgid, len(members)) },
				func() string {
					return fmt.Sprintf("%d members when it said ready:\n%s\nnow:\n%s", len(members), proctest.Describe(members), proctest.DescribeGroup(pgid))
				})
			if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			proctest.Eventually(t, "everything in the job's group runs again", func() bool { return proctest.NoneStopped(proctest.Group(pgid)) })

			if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			_ = helper.Wait()
			for _, p := range members {
				proctest.Eventually(t, fmt.Sprintf("%s (%d) is gone", p.Comm, p.PID), func() bool { return !proctest.Alive(p.PID) })
			}
		})
	}
}

// TestBwrapCancelCallerGroup cancels a command run in the caller's group:
// killing bwrap must take everything in the sandbox down.
func TestBwrapCancelCallerGroup(t *testing.T) {
	cfg := bwrapConfig(t)
	cfg.Group = CallerGroup
	out := newReadyWriter()
	cfg.Stdout, cfg.Stderr = out, out
	pidc := make(chan int, 1)
	cfg.onStart = func(pid int) { pidc <- pid }
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- runCommand(ctx, cfg, "sh -c 'sleep 100 & wait' &\necho ready\nsleep 100") }()
	pid := <-pidc
	waitReady(t, out, errc)
	tree := proctree.Tree(pid)
	if len(tree) < 4 { // bwrap, bwrap (init of the PID namespace), sh, sh -c
		t.Fatalf("the sandbox has only %d processes", len(tree))
	}
	cause := errors.New("stop")
	cancel(cause)
	if err := <-errc; !errors.Is(err, cause) {
		t.Errorf("Run returned %v, want the cause", err)
	}
	for _, p := range tree {
		proctest.Eventually(t, fmt.Sprintf("process %d is gone", p.Pid), func() bool { return !proctest.Alive(p.Pid) })
	}
}

// RunIn runs in the directory given (/ for integration commands), and a
// WritableSysroot lets them write to the sysroot, which stays read-only without it.
func TestBwrapRunInWritableSysroot(t *testing.T) {
	cfg := bwrapConfig(t)
	var log bytes.Buffer
	cfg.Stdout, cfg.Stderr = &log, &log
	ro, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	err = ro.RunIn(context.Background(), "/", "touch cache")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Command != "touch cache" {
		t.Fatalf("a read-only sysroot took a write: %v; log:\n%s", err, log.String())
	}
	cfg.WritableSysroot = true
	rw, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if err := rw.RunIn(context.Background(), "/", "pwd > cache"); err != nil {
		t.Fatalf("%v; log:\n%s", err, log.String())
	}
	if got := readFile(t, filepath.Join(cfg.Sysroot, "cache")); got != "/\n" {
		t.Errorf("RunIn(/) ran in %q", got)
	}
	if err := rw.Run(context.Background(), "pwd > /gantry/install/pwd"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(cfg.InstallDir, "pwd")); got != "/gantry/build\n" {
		t.Errorf("Run after RunIn ran in %q", got)
	}
}
