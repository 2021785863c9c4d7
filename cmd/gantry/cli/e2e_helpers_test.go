package cli

// Helpers for the end-to-end tests in e2e_test.go: they build the real gantry
// binary once, run it as a child process with its own project, cache and home,
// follow its JSON event stream, and look at processes through /proc.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/proctest"
)

// e2eTimeout bounds every wait for an event; it only matters when something is broken.
const e2eTimeout = 15 * time.Second

var (
	e2eOnce   sync.Once
	e2eBinDir string
	e2eBin    string
	e2eErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if e2eBinDir != "" {
		os.RemoveAll(e2eBinDir)
	}
	os.Exit(code)
}

// gantryBinary builds the gantry binary, with the seams of testhooks.go, once per
// test run (only when an end-to-end test needs it) and returns its path.
func gantryBinary(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the end-to-end tests use /proc and Linux process semantics")
	}
	e2eOnce.Do(func() {
		e2eBinDir, e2eErr = os.MkdirTemp("", "gantry-e2e-bin-")
		if e2eErr != nil {
			return
		}
		bin := filepath.Join(e2eBinDir, "gantry")
		// With the seams the tests use (testhooks.go).
		cmd := exec.Command("go", "build", "-tags", "gantrytesthooks", "-o", bin, "github.com/gantry-build/gantry/cmd/gantry")
		out, err := cmd.CombinedOutput()
		if err != nil {
			e2eErr = fmt.Errorf("go build ./cmd/gantry: %v\n%s", err, out)
			return
		}
		e2eBin = bin
	})
	if e2eErr != nil {
		t.Fatal(e2eErr)
	}
	return e2eBin
}

// e2eProject is one test's project, cache and home directories.
type e2eProject struct {
	t     *testing.T
	bin   string
	root  string // the project
	cache string // --cache-dir
	tmp   string // scratch files the builds write (ticks, pid files)
	env   []string
}

// newE2EProject writes files (path relative to the project root → content) into
// a fresh project. Every gantry run gets a private HOME and XDG directories and
// no GANTRY_* variables from the caller's environment.
func newE2EProject(t *testing.T, files map[string]string) *e2eProject {
	t.Helper()
	bin := gantryBinary(t)
	base := t.TempDir()
	p := &e2eProject{t: t, bin: bin, root: filepath.Join(base, "project"), cache: filepath.Join(base, "cache"),
		tmp: filepath.Join(base, "tmp")}
	home := filepath.Join(base, "home")
	for _, d := range []string{p.root, p.tmp, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range files {
		p.write(name, content)
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		// CI and GITHUB_ACTIONS (set where the tests run in CI) would turn on the CI
		// annotations of plain output, which tests that want them set themselves.
		if strings.HasPrefix(k, "GANTRY_") || strings.HasPrefix(k, "XDG_") || k == "HOME" || k == "CI" || k == "GITHUB_ACTIONS" {
			continue
		}
		p.env = append(p.env, kv)
	}
	p.env = append(p.env, "HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"))
	return p
}

// write writes a file under the project root, creating directories.
func (p *e2eProject) write(name, content string) {
	p.t.Helper()
	path := filepath.Join(p.root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// scratch returns the absolute path of a scratch file for builds to write.
func (p *e2eProject) scratch(name string) string { return filepath.Join(p.tmp, name) }

func (p *e2eProject) command(args ...string) *exec.Cmd {
	full := append([]string{"-C", p.root, "--cache-dir", p.cache}, args...)
	cmd := exec.Command(p.bin, full...)
	cmd.Env = p.env
	cmd.Dir = p.tmp
	// Its own process group, so that nothing sent to it reaches the test, and
	// dead with the test if the test dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs gantry to completion and returns its stdout, stderr and exit code.
func (p *e2eProject) run(args ...string) (stdout, stderr string, code int) {
	p.t.Helper()
	cmd := p.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("starting gantry %s: %v", strings.Join(args, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.t.Fatalf("gantry %s: %v", strings.Join(args, " "), err)
		}
	case <-time.After(e2eTimeout):
		_ = cmd.Process.Kill()
		<-done
		p.t.Fatalf("gantry %s did not finish within %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), e2eTimeout, &out, &errb)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// mustRun runs gantry and fails the test unless it exits with want.
func (p *e2eProject) mustRun(want int, args ...string) (stdout, stderr string) {
	p.t.Helper()
	stdout, stderr, code := p.run(args...)
	if code != want {
		p.t.Fatalf("gantry %s: exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, stdout, stderr)
	}
	return stdout, stderr
}

// state is the element's state as `gantry show` reports it.
func (p *e2eProject) state(element string) string {
	p.t.Helper()
	out, _ := p.mustRun(0, "show", "--deps", "none", "--format", "%{state}", element)
	return strings.TrimSpace(out)
}

// verifyCache opens the cache in-process and fails the test unless Verify is clean.
func (p *e2eProject) verifyCache() *cache.VerifyReport {
	p.t.Helper()
	c, err := cache.Open(p.cache)
	if err != nil {
		p.t.Fatalf("opening the cache: %v", err)
	}
	rep, err := c.Verify()
	if err != nil {
		p.t.Fatalf("verifying the cache: %v", err)
	}
	if !rep.Clean() {
		p.t.Fatalf("cache verify found problems:\n  %s", strings.Join(rep.Problems, "\n  "))
	}
	return rep
}

// e2eEvent is one line of `--ui json` output (or any other stderr line, with Event "").
type e2eEvent struct {
	Raw      string `json:"-"`
	Event    string `json:"event"`
	Action   string `json:"action"`
	Element  string `json:"element"`
	Key      string `json:"key"`
	Job      string `json:"job"`
	Result   string `json:"result"`
	Error    string `json:"error"`
	Reason   string `json:"reason"`
	Log      string `json:"log"`
	Text     string `json:"text"`
	Level    string `json:"level"`
	ExitCode *int   `json:"exit-code"`
	Summary  *struct {
		OK         bool `json:"ok"`
		NotStarted []struct {
			Element string
			Reason  string
		} `json:"not-started"`
		Failed []struct {
			Element string
			Cached  bool
			LogPath string
		} `json:"failed"`
		Interrupted bool `json:"interrupted"`
		Queues      []struct {
			Action string `json:"action"`
			Failed int    `json:"failed"`
		} `json:"queues"`
	} `json:"summary"`
}

func (e e2eEvent) is(event, action, element string) bool {
	return e.Event == event && (action == "" || e.Action == action) && (element == "" || e.Element == element)
}

// gantryProc is a gantry process running in the background, whose stderr is
// parsed line by line as it arrives.
type gantryProc struct {
	t      *testing.T
	args   []string
	cmd    *exec.Cmd
	stdout bytes.Buffer

	mu     sync.Mutex
	events []e2eEvent
	part   []byte
	notify chan struct{} // poked on every new line and on exit

	exited   chan struct{}
	exitCode int
	exitedAt time.Time
}

// start starts gantry in the background. The test's cleanup kills it if it is still running.
func (p *e2eProject) start(args ...string) *gantryProc {
	p.t.Helper()
	g := &gantryProc{t: p.t, args: args, cmd: p.command(args...), notify: make(chan struct{}, 1), exited: make(chan struct{})}
	g.cmd.Stdout = &g.stdout
	g.cmd.Stderr = (*stderrSink)(g)
	if err := g.cmd.Start(); err != nil {
		p.t.Fatalf("starting gantry %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		err := g.cmd.Wait()
		g.mu.Lock()
		g.exitCode = g.cmd.ProcessState.ExitCode()
		g.exitedAt = time.Now()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			g.events = append(g.events, e2eEvent{Raw: "(test: wait: " + err.Error() + ")"})
		}
		g.mu.Unlock()
		close(g.exited)
		g.poke()
	}()
	p.t.Cleanup(func() {
		select {
		case <-g.exited:
		default:
			_ = g.cmd.Process.Kill() // ends a stopped gantry too; its jobs die with it (Pdeathsig)
			<-g.exited
		}
	})
	return g
}

func (g *gantryProc) pid() int { return g.cmd.Process.Pid }

func (g *gantryProc) poke() {
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

// stderrSink splits gantry's stderr into lines and decodes the JSON ones.
type stderrSink gantryProc

func (s *stderrSink) Write(b []byte) (int, error) {
	g := (*gantryProc)(s)
	g.mu.Lock()
	g.part = append(g.part, b...)
	for {
		i := bytes.IndexByte(g.part, '\n')
		if i < 0 {
			break
		}
		line := string(g.part[:i])
		g.part = g.part[i+1:]
		var ev e2eEvent
		if json.Unmarshal([]byte(line), &ev) != nil {
			ev = e2eEvent{}
		}
		ev.Raw = line
		g.events = append(g.events, ev)
	}
	g.mu.Unlock()
	g.poke()
	return len(b), nil
}

// output is everything gantry wrote to stderr so far, for failure messages.
func (g *gantryProc) output() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var b strings.Builder
	for _, e := range g.events {
		b.WriteString(e.Raw)
		b.WriteByte('\n')
	}
	b.Write(g.part)
	return b.String()
}

// snapshot returns the events so far.
func (g *gantryProc) snapshot() []e2eEvent {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]e2eEvent(nil), g.events...)
}

// waitFor blocks until cond holds for the events so far, failing the test if
// gantry exits first or the timeout passes. what describes the awaited event.
func (g *gantryProc) waitFor(what string, cond func([]e2eEvent) bool) {
	g.t.Helper()
	deadline := time.NewTimer(e2eTimeout)
	defer deadline.Stop()
	for {
		if cond(g.snapshot()) {
			return
		}
		select {
		case <-g.exited:
			if cond(g.snapshot()) {
				return
			}
			g.t.Fatalf("gantry exited (code %d) before %s\nstderr:\n%s", g.exitCode, what, g.output())
		default:
		}
		select {
		case <-g.notify:
		case <-deadline.C:
			g.t.Fatalf("timed out after %v waiting for %s\nstderr:\n%s", e2eTimeout, what, g.output())
		}
	}
}

// waitEvent waits until an event matching event/action/element (empty matches anything) arrives.
func (g *gantryProc) waitEvent(event, action, element string) e2eEvent {
	g.t.Helper()
	var found e2eEvent
	g.waitFor(fmt.Sprintf("event %s %s %s", event, action, element), func(evs []e2eEvent) bool {
		for _, e := range evs {
			if e.is(event, action, element) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// wait waits for gantry to exit within timeout and returns its exit code.
func (g *gantryProc) wait(timeout time.Duration) int {
	g.t.Helper()
	select {
	case <-g.exited:
	case <-time.After(timeout):
		g.t.Fatalf("gantry %s did not exit within %v\nstderr:\n%s", strings.Join(g.args, " "), timeout, g.output())
	}
	return g.exitCode
}

// signal sends sig to the gantry process (not its group).
func (g *gantryProc) signal(sig syscall.Signal) {
	g.t.Helper()
	if err := syscall.Kill(g.pid(), sig); err != nil {
		g.t.Fatalf("sending %v to gantry (pid %d): %v", sig, g.pid(), err)
	}
}

// waitGroupStopped fails the test unless every process of job group pgid stops soon.
func waitGroupStopped(t *testing.T, pgid int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !proctest.AllStopped(proctest.Group(pgid)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job's processes are not all stopped:\n%s", proctest.DescribeGroup(pgid))
		}
	}
}

// killGroupOnCleanup makes sure that, whatever the test's outcome, nothing of
// the job process group pgid (which a build of this test started) outlives the test.
func killGroupOnCleanup(t *testing.T, pgid int) {
	t.Cleanup(func() {
		if len(proctest.Group(pgid)) > 0 {
			t.Logf("killing leftover processes of job group %d", pgid)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
}

// eventually polls cond every 10ms until it holds, failing the test after the timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fileSize is the size of the file at path, 0 if it does not exist.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readPid waits until a build command has written its pid (a line) to path, and returns it.
func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, e2eTimeout, "a pid is written to "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}
