//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/proctest"
)

func hostConfig(t *testing.T) Config {
	sysroot, build, install := testDirs(t)
	return Config{Kind: Host, Sysroot: sysroot, BuildDir: build, InstallDir: install}
}

func TestHostRunWritesInstallRootFromBuildDir(t *testing.T) {
	cfg := hostConfig(t)
	buildRoot, installRoot, sysroot := paths(cfg, Host)
	if buildRoot != cfg.BuildDir || installRoot != cfg.InstallDir || sysroot != cfg.Sysroot {
		t.Fatalf("Paths(Host) = %q %q %q, want the host directories", buildRoot, installRoot, sysroot)
	}
	writeFile(t, filepath.Join(cfg.BuildDir, "src.txt"), "source\n", 0o644)
	err := runCommand(context.Background(), cfg, "mkdir -p "+installRoot+"/share\ncp src.txt "+installRoot+"/share/\npwd > "+installRoot+"/pwd")
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(cfg.InstallDir, "share", "src.txt")); got != "source\n" {
		t.Errorf("installed file = %q", got)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(cfg.InstallDir, "pwd"))); got != cfg.BuildDir {
		t.Errorf("cwd = %q, want %q", got, cfg.BuildDir)
	}
}

func TestHostEnvironment(t *testing.T) {
	cfg := hostConfig(t)
	cfg.Env = map[string]string{"FOO": "bar baz", "LC_ALL": "C"}
	writeFile(t, filepath.Join(cfg.Sysroot, "usr", "bin", "mytool"), "#!/bin/sh\necho from-sysroot \"$@\"\n", 0o755)
	if err := os.MkdirAll(filepath.Join(cfg.Sysroot, "usr", "lib", "pkgconfig"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cfg.Stdout = &out
	err := runCommand(context.Background(), cfg, `echo "FOO=$FOO"; mytool x; echo "PATH=$PATH"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; echo "PKG_CONFIG_PATH=$PKG_CONFIG_PATH"; echo "CPATH=${CPATH:-unset}"; echo "HOME=${HOME:-unset}"`)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(l, "=")
		lines[k] = v
	}
	if lines["FOO"] != "bar baz" {
		t.Errorf("FOO = %q", lines["FOO"])
	}
	if _, ok := lines["from-sysroot x"]; !ok {
		t.Errorf("the tool staged in sysroot/usr/bin was not found in PATH; output:\n%s", out.String())
	}
	usrBin := filepath.Join(cfg.Sysroot, "usr", "bin")
	if want := usrBin + ":" + os.Getenv("PATH"); lines["PATH"] != want {
		t.Errorf("PATH = %q, want %q (existing sysroot dirs, then the host PATH)", lines["PATH"], want)
	}
	if want := filepath.Join(cfg.Sysroot, "usr", "lib"); !strings.HasPrefix(lines["LD_LIBRARY_PATH"], want) {
		t.Errorf("LD_LIBRARY_PATH = %q, want prefix %q", lines["LD_LIBRARY_PATH"], want)
	}
	if want := filepath.Join(cfg.Sysroot, "usr", "lib", "pkgconfig"); !strings.HasPrefix(lines["PKG_CONFIG_PATH"], want) {
		t.Errorf("PKG_CONFIG_PATH = %q, want prefix %q", lines["PKG_CONFIG_PATH"], want)
	}
	if os.Getenv("CPATH") == "" && lines["CPATH"] != "unset" {
		t.Errorf("CPATH = %q, want unset: the sysroot has no include directory", lines["CPATH"])
	}
	if lines["HOME"] != "unset" {
		t.Errorf("HOME = %q: the host environment leaked in", lines["HOME"])
	}
}

func TestHostEnvPathOverridesHostPath(t *testing.T) {
	cfg := hostConfig(t)
	cfg.Env = map[string]string{"PATH": "/usr/bin:/bin"}
	writeFile(t, filepath.Join(cfg.Sysroot, "bin", "t"), "", 0o755)
	env := hostEnv(cfg)
	if got, want := envValue(env, "PATH"), filepath.Join(cfg.Sysroot, "bin")+":/usr/bin:/bin"; got != want {
		t.Errorf("PATH = %q, want %q", got, want)
	}
}

// TestHostEnvSearchPathsThroughLinks: a search directory reached through a
// symlink (merged /usr) is used, one under a file is not.
func TestHostEnvSearchPathsThroughLinks(t *testing.T) {
	cfg := hostConfig(t)
	cfg.Env = map[string]string{"PATH": "/usr/bin"}
	writeFile(t, filepath.Join(cfg.Sysroot, "usr", "bin", "t"), "", 0o755)
	writeFile(t, filepath.Join(cfg.Sysroot, "usr", "local"), "not a directory", 0o644)
	if err := os.Symlink("usr/bin", filepath.Join(cfg.Sysroot, "bin")); err != nil {
		t.Fatal(err)
	}
	got := envValue(hostEnv(cfg), "PATH")
	if want := filepath.Join(cfg.Sysroot, "usr", "bin") + ":" + filepath.Join(cfg.Sysroot, "bin") + ":/usr/bin"; got != want {
		t.Errorf("PATH = %q, want %q", got, want)
	}
}

func TestRunExitError(t *testing.T) {
	cfg := hostConfig(t)
	err := runCommand(context.Background(), cfg, "echo before\nexit 3")
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v (%T), want *ExitError", err, err)
	}
	if ee.ExitCode != 3 || ee.Command != "echo before\nexit 3" || ee.Signal != 0 {
		t.Errorf("ExitError = %+v", ee)
	}
	if msg := ee.Error(); msg != "command failed with exit code 3: echo before\nexit 3" {
		t.Errorf("Error() = %q", msg)
	}
}

func TestRunKilledBySignal(t *testing.T) {
	cfg := hostConfig(t)
	err := runCommand(context.Background(), cfg, "kill -KILL $$")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Signal != syscall.SIGKILL || ee.ExitCode != 128+9 {
		t.Fatalf("err = %#v, want an ExitError for SIGKILL", err)
	}
}

func TestRunStopsAtFirstFailingCommand(t *testing.T) {
	cfg := hostConfig(t)
	err := runCommand(context.Background(), cfg, "touch first\nfalse\ntouch second")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.ExitCode != 1 {
		t.Fatalf("err = %v, want exit code 1", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.BuildDir, "first")); err != nil {
		t.Errorf("the command before the failure did not run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.BuildDir, "second")); err == nil {
		t.Error("sh -e went on after a failing command")
	}
}

func TestRunAlreadyCancelled(t *testing.T) {
	cfg := hostConfig(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("dependency lib.toml failed")
	cancel(cause)
	if err := runCommand(ctx, cfg, "touch ran"); err != cause {
		t.Errorf("Run = %v, want the cause", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.BuildDir, "ran")); err == nil {
		t.Error("the command ran although ctx was cancelled")
	}
}

func TestRunRejectsUnresolvedKind(t *testing.T) {
	for _, k := range []Kind{Auto, "", "chroot"} {
		cfg := hostConfig(t)
		cfg.Kind = k
		if err := runCommand(context.Background(), cfg, "true"); err == nil {
			t.Errorf("Run with kind %q succeeded", k)
		}
	}
}

// cancelScript starts a child and a grandchild, records their pids, says
// ready and waits.
const cancelScript = `sh -c 'sleep 100 & echo $! > grandchild.pid; wait' &
echo $! > child.pid
while [ ! -s grandchild.pid ]; do sleep 0.01; done
echo ready
sleep 100`

func TestRunCancelKillsProcessAndChildren(t *testing.T) {
	for _, tc := range []struct {
		name  string
		group ProcessGroup
		trap  string
	}{
		{"new-group", NewGroup, ""},
		{"caller-group", CallerGroup, ""},
		{"new-group", NewGroup, "trap '' TERM\n"}, // ignores SIGTERM: SIGKILL after the grace period
		{"caller-group", CallerGroup, "trap '' TERM\n"},
	} {
		name := tc.name
		if tc.trap != "" {
			name += "/ignoring-SIGTERM"
		}
		t.Run(name, func(t *testing.T) {
			cfg := hostConfig(t)
			cfg.Group = tc.group
			out := newReadyWriter()
			cfg.Stdout, cfg.Stderr = out, out
			pidc := make(chan int, 1)
			cfg.onStart = func(pid int) { pidc <- pid }
			ctx, cancel := context.WithCancelCause(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- runCommand(ctx, cfg, tc.trap+cancelScript) }()
			waitReady(t, out, errc)
			var pids []int
			for _, f := range []string{"child.pid", "grandchild.pid"} {
				pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(cfg.BuildDir, f))))
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
			}
			pids = append(pids, <-pidc)

			cause := errors.New("interrupted by test")
			start := time.Now()
			cancel(cause)
			select {
			case err := <-errc:
				if err != cause {
					t.Errorf("Run returned %v, want the cancellation cause verbatim", err)
				}
			case <-time.After(killGrace + 5*time.Second):
				t.Fatal("Run did not return after cancellation")
			}
			elapsed := time.Since(start)
			if tc.trap == "" && elapsed > killGrace {
				t.Errorf("Run took %v to return; SIGTERM should have been enough", elapsed)
			}
			if tc.trap != "" && elapsed < killGrace {
				t.Errorf("Run returned after %v, before the grace period for SIGTERM", elapsed)
			}
			for _, pid := range pids {
				proctest.Eventually(t, "process "+strconv.Itoa(pid)+" is gone", func() bool { return !proctest.Alive(pid) })
			}
		})
	}
}

func TestRunNewGroupKillsLeftovers(t *testing.T) {
	cfg := hostConfig(t)
	if err := runCommand(context.Background(), cfg, "sleep 100 >/dev/null 2>&1 &\necho $! > bg.pid"); err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(cfg.BuildDir, "bg.pid"))))
	if err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, "the background process is gone", func() bool { return !proctest.Alive(pid) })
}

func TestRunNoControllingTerminalInNewGroup(t *testing.T) {
	cfg := hostConfig(t)
	// In a new session there is no controlling terminal to open.
	err := runCommand(context.Background(), cfg, "if (: > /dev/tty) 2>/dev/null; then exit 1; fi")
	if err != nil {
		t.Fatalf("the command could open /dev/tty: %v", err)
	}
}

func TestHostShell(t *testing.T) {
	cfg := hostConfig(t)
	cfg.Env = map[string]string{"FOO": "bar"}
	writeFile(t, filepath.Join(cfg.Sysroot, "usr", "bin", "mytool"), "#!/bin/sh\necho \"tool $FOO $1\"\nexit 5\n", 0o755)
	var out, errOut bytes.Buffer
	cfg.Stdout, cfg.Stderr = &out, &errOut

	code, err := Shell(context.Background(), cfg, []string{"mytool", "arg"}, nil)
	if err != nil || code != 5 || out.String() != "tool bar arg\n" {
		t.Fatalf("Shell(mytool) = %d, %v; output %q", code, err, out.String())
	}

	out.Reset()
	code, err = Shell(context.Background(), cfg, nil, strings.NewReader("echo \"$FOO from $(pwd)\"\nexit 4\n"))
	if err != nil || code != 4 {
		t.Fatalf("Shell() = %d, %v; stderr %q", code, err, errOut.String())
	}
	if want := "bar from " + cfg.BuildDir + "\n"; out.String() != want {
		t.Errorf("shell output = %q, want %q", out.String(), want)
	}

	if _, err := Shell(context.Background(), cfg, []string{"no-such-tool-here"}, nil); err == nil {
		t.Error("Shell with a missing program succeeded")
	}
}

func TestShellCancel(t *testing.T) {
	cfg := hostConfig(t)
	out := newReadyWriter()
	cfg.Stdout = out
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := Shell(ctx, cfg, []string{"sh", "-c", "sleep 100 & echo $! > bg.pid; echo ready; sleep 100"}, nil)
		errc <- err
	}()
	waitReady(t, out, errc)
	bg, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(cfg.BuildDir, "bg.pid"))))
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("stop")
	start := time.Now()
	cancel(cause)
	if err := <-errc; !errors.Is(err, cause) {
		t.Errorf("Shell returned %v, want the cause", err)
	}
	if elapsed := time.Since(start); elapsed > killGrace {
		t.Errorf("Shell took %v to return; SIGTERM should have been enough", elapsed)
	}
	proctest.Eventually(t, "the shell's background process is gone", func() bool { return !proctest.Alive(bg) })
}

// runOutput runs command with Run in cfg and returns its output and error.
func runOutput(cfg Config, command string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	cfg.Stdout, cfg.Stderr = &out, &errOut
	err = runCommand(context.Background(), cfg, command)
	return out.String(), errOut.String(), err
}

// statPPID is the parent pid in the output of `cat /proc/self/stat`.
func statPPID(t *testing.T, stat string) int {
	t.Helper()
	fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(fields) < 2 {
		t.Fatalf("cannot parse /proc/self/stat: %q", stat)
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

func TestRunSimpleCommandWithoutShell(t *testing.T) {
	cfg := hostConfig(t)
	out, _, err := runOutput(cfg, "cat /proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	if ppid := statPPID(t, out); ppid != os.Getpid() {
		t.Errorf("the simple command's parent is %d, want this process (%d): it ran under sh", ppid, os.Getpid())
	}
	out, _, err = runOutput(cfg, "cat /proc/self/stat; :")
	if err != nil {
		t.Fatal(err)
	}
	if ppid := statPPID(t, out); ppid == os.Getpid() {
		t.Error("a command with shell syntax ran without sh")
	}
}

// TestRunDirectLikeSh runs each command directly and as `{ command; }`,
// which sh runs, and wants the same outcome: output, messages, exit status.
func TestRunDirectLikeSh(t *testing.T) {
	cfg := hostConfig(t)
	cfg.Env = map[string]string{"FOO": "bar baz", "LC_ALL": "C"}
	writeFile(t, filepath.Join(cfg.BuildDir, "noexec"), "#!/bin/sh\n", 0o644)
	writeFile(t, filepath.Join(cfg.BuildDir, "noshebang"), "echo from-script \"$@\"\n", 0o755)
	writeFile(t, filepath.Join(cfg.BuildDir, "term"), "#!/bin/sh\nkill -TERM $$\n", 0o755)
	writeFile(t, filepath.Join(cfg.BuildDir, "exit3"), "#!/bin/sh\necho out; echo err >&2; exit 3\n", 0o755)
	for _, tc := range []struct {
		command, stdout, stderr string
		code                    int
	}{
		{"no-such-tool-xyz", "", "not found", 127},
		{"./noexec", "", "Permission denied", 126},
		{"./noshebang a", "from-script a\n", "", 0},
		{"./term", "", "Terminated", 128 + 15},
		{"./exit3", "out\n", "err", 3},
		{"env", "FOO=bar baz", "", 0},
	} {
		if simpleCommand(tc.command) == nil {
			t.Fatalf("%q does not qualify for the direct path", tc.command)
		}
		out, errOut, err := runOutput(cfg, tc.command)
		shOut, shErr, shErrV := runOutput(cfg, "{ "+tc.command+"; }")
		if tc.command == "env" { // sh's order is its hash table's
			out, shOut = sortLines(out), sortLines(shOut)
		}
		if out != shOut || errOut != shErr {
			t.Errorf("%q: output %q, stderr %q; under sh %q, %q", tc.command, out, errOut, shOut, shErr)
		}
		if !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%q: output %q, stderr %q; want them to contain %q, %q", tc.command, out, errOut, tc.stdout, tc.stderr)
		}
		code, shCode := -1, -1
		var ee *ExitError
		if err == nil {
			code = 0
		} else if errors.As(err, &ee) && ee.Signal == 0 {
			code = ee.ExitCode
		}
		if shErrV == nil {
			shCode = 0
		} else if errors.As(shErrV, &ee) && ee.Signal == 0 {
			shCode = ee.ExitCode
		}
		if code != tc.code || shCode != tc.code {
			t.Errorf("%q: err %v, under sh %v; want exit code %d (no signal)", tc.command, err, shErrV, tc.code)
		}
	}
}

func sortLines(s string) string {
	lines := strings.Split(s, "\n")
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// BenchmarkRunSimpleCommand: a command run directly, and the same under sh;
// with Run, which prepares for every command, and with a Runner prepared once,
// as a build job runs its commands; output to nowhere or, as in a job, to a
// writer that is not a file.
func BenchmarkRunSimpleCommand(b *testing.B) {
	sysroot, build, install := b.TempDir(), b.TempDir(), b.TempDir()
	for _, out := range []struct {
		name string
		w    io.Writer
	}{{"", nil}, {"writer-", &discardWriter{}}} {
		cfg := Config{Kind: Host, Sysroot: sysroot, BuildDir: build, InstallDir: install, Stdout: out.w, Stderr: out.w}
		p, err := Prepare(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		for _, bc := range []struct{ name, command string }{
			{"direct", "sleep 0"},
			{"sh", "{ sleep 0; }"},
		} {
			b.Run(out.name+bc.name, func(b *testing.B) {
				for b.Loop() {
					if err := runCommand(context.Background(), cfg, bc.command); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(out.name+"prepared-"+bc.name, func(b *testing.B) {
				for b.Loop() {
					if err := p.Run(context.Background(), bc.command); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// discardWriter is io.Discard that os/exec cannot tell apart from any writer.
type discardWriter struct{}

func (*discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// RunIn runs on the host in the directory given.
func TestHostRunIn(t *testing.T) {
	cfg := hostConfig(t)
	p, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.RunIn(context.Background(), cfg.Sysroot, "pwd -P > cache"); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(cfg.Sysroot)
	if got := readFile(t, filepath.Join(cfg.Sysroot, "cache")); got != want+"\n" {
		t.Errorf("RunIn ran in %q, want %q", got, want)
	}
}
