//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gantry-build/gantry/internal/proctest"
)

// TestRunnerKeepsWhatItPrepared: a Runner's commands run with the environment
// worked out by Prepare (a tool put in the sysroot afterwards is not in
// PATH), directly or through sh as Run would run them, one after another.
func TestRunnerKeepsWhatItPrepared(t *testing.T) {
	cfg := hostConfig(t)
	var out bytes.Buffer
	p := prepareRunner(t, cfg, &out)
	writeFile(t, filepath.Join(cfg.Sysroot, "usr", "bin", "mytool"), "#!/bin/sh\necho from-sysroot\n", 0o755)

	if err := p.Run(context.Background(), "cat /proc/self/stat"); err != nil {
		t.Fatal(err)
	}
	if ppid := statPPID(t, out.String()); ppid != os.Getpid() {
		t.Errorf("the simple command's parent is %d, want this process (%d): it ran under sh", ppid, os.Getpid())
	}
	out.Reset()
	if err := p.Run(context.Background(), `echo "PATH=$PATH"`); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), "PATH="+os.Getenv("PATH"); got != want {
		t.Errorf("under sh, %s; want %s: the sysroot had no usr/bin when the runner was prepared", got, want)
	}
	var ee *ExitError
	if err := p.Run(context.Background(), "mytool"); !errors.As(err, &ee) || ee.ExitCode != 127 {
		t.Errorf("running a tool staged after Prepare: %v, want exit code 127 (not found)", err)
	}
	// Run prepares afresh.
	if got, _, err := runOutput(cfg, "mytool"); err != nil || got != "from-sysroot\n" {
		t.Errorf("Run(mytool) = %q, %v; want it found in the sysroot", got, err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestRunnerBwrapRunsEachCommand: one prepared bwrap command line serves
// several commands, each with its own words.
func TestRunnerBwrapRunsEachCommand(t *testing.T) {
	cfg := bwrapConfig(t)
	var out bytes.Buffer
	p := prepareRunner(t, cfg, &out)
	for _, cmd := range []string{"echo one > /gantry/install/a", "cat /gantry/install/a; echo two", "pwd"} {
		if err := p.Run(context.Background(), cmd); err != nil {
			t.Fatalf("%s: %v; output:\n%s", cmd, err, out.String())
		}
	}
	if got, want := out.String(), "one\ntwo\n/gantry/build\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// prepareRunner prepares cfg's Runner with its commands' output and errors written
// to out; the test's end closes it.
func prepareRunner(t *testing.T, cfg Config, out io.Writer) *Runner {
	t.Helper()
	cfg.Stdout, cfg.Stderr = out, out
	p, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// lockedBuffer is a writer that is not a file, safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRunnerOutputPipe: with a writer that is not a file, a Runner's commands
// write to one pipe of its own; each command's output, more than a pipe holds,
// has all been passed on when Run returns, in order; what a background process
// writes after its command ended is passed on with the next command's output,
// or by Close.
func TestRunnerOutputPipe(t *testing.T) {
	cfg := hostConfig(t)
	cfg.Group = CallerGroup // as in a job: Run leaves background processes be
	var out lockedBuffer
	p := prepareRunner(t, cfg, &out)
	if p.out == nil {
		t.Fatal("no output pipe for a writer that is not a file")
	}
	const big = 300 << 10
	if err := p.Run(context.Background(), "head -c "+strconv.Itoa(big)+" /dev/zero"); err != nil {
		t.Fatal(err)
	}
	if got := len(out.String()); got != big {
		t.Fatalf("after Run, %d bytes of output, want %d", got, big)
	}
	want := strings.Repeat("\x00", big)
	steps := []struct{ command, output string }{
		{"echo out; echo err >&2; exit 3", "out\nerr\n"},
		// Each background process waits until its command has ended, writes,
		// and says so in a file.
		{"(while test ! -e go1; do sleep 0.01; done; echo late; touch wrote1) & echo now", "now\n"},
		{"echo next", "late\nnext\n"},
		{"(while test ! -e go2; do sleep 0.01; done; echo later; touch wrote2) &", ""},
	}
	for i, step := range steps {
		if i == 2 {
			writeFile(t, filepath.Join(cfg.BuildDir, "go1"), "", 0o644)
			proctest.Eventually(t, "the first background process wrote", func() bool { return exists(filepath.Join(cfg.BuildDir, "wrote1")) })
		}
		_ = p.Run(context.Background(), step.command)
		if want += step.output; out.String() != want {
			t.Fatalf("after %q, the output ends %q, want %q", step.command, tail(out.String(), len(step.output)+8), step.output)
		}
	}
	writeFile(t, filepath.Join(cfg.BuildDir, "go2"), "", 0o644)
	proctest.Eventually(t, "the second background process wrote", func() bool { return exists(filepath.Join(cfg.BuildDir, "wrote2")) })
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if got := tail(out.String(), 16); !strings.HasSuffix(got, "next\nlater\n") {
		t.Errorf("after Close, the output ends %q, want the second background process's line", got)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
