package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/proctest"
)

// The tests start real children by re-executing the test binary with
// childEnv set; TestMain then runs RunChild with testHandlers.
const childEnv = "GANTRY_JOB_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(RunChild(testHandlers))
	}
	os.Exit(m.Run())
}

// tickerPayload configures the "ticker" handler.
type tickerPayload struct {
	File      string // the grandchild appends a line here every 20ms
	TrapTerm  bool   // the grandchild ignores SIGTERM
	IgnoreCtx bool   // the child ignores termination (and so SIGTERM)
}

var testHandlers = map[string]Handler{
	"messages": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		r.Status("compiling")
		r.Log("line one")
		r.Progress(1, 2)
		fmt.Fprint(r.Writer(), "out 1\nout 2\r\npart")
		r.Progress(2, 2)
		return Result{OK: true, Data: spec.Payload}, nil
	},
	// available says its payload is available, then says so again with other
	// data, and ends with the payload as its result.
	"available": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		r.Available(spec.Payload)
		r.Log("making it durable")
		r.Available(json.RawMessage(`"again"`))
		return Result{OK: true, Data: spec.Payload}, nil
	},
	// binaryAvailable says something is available with data that is not JSON.
	"binaryAvailable": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		r.Available(binaryData)
		return Result{OK: true}, nil
	},
	// marker creates the payload's file, then waits until terminated.
	"marker": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		var path string
		if err := json.Unmarshal(spec.Payload, &path); err != nil {
			return Result{}, err
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			return Result{}, err
		}
		<-ctx.Done()
		return Result{}, context.Cause(ctx)
	},
	// gate waits at its gate, then creates the payload's file and says so.
	"gate": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		var path string
		if err := json.Unmarshal(spec.Payload, &path); err != nil {
			return Result{}, err
		}
		if err := r.Gate(ctx, gateStatus); err != nil {
			return Result{}, fmt.Errorf("%w (the job's context: %v)", err, context.Cause(ctx))
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			return Result{}, err
		}
		r.Status(pastGate)
		return Result{OK: true}, nil
	},
	"fail": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		r.Log("about to fail")
		return Result{Temporary: true}, errors.New("fetching foo.tar: remote unreachable")
	},
	"corrupt": corruptHandler, // frame_test.go
	"cutoff":  cutoffHandler,
	"crash": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		r.Log("crashing")
		os.Exit(3)
		return Result{}, nil
	},
	"panic": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		panic("kaboom")
	},
	// mess changes what a next job in the same worker must not see: the working
	// directory (to the payload's), an environment variable, the umask.
	"mess": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		var dir string
		if err := json.Unmarshal(spec.Payload, &dir); err != nil {
			return Result{}, err
		}
		syscall.Umask(0o077)
		if err := os.Setenv("GANTRY_JOB_TEST_MESS", "1"); err != nil {
			return Result{}, err
		}
		return Result{OK: true}, os.Chdir(dir)
	},
	// state reports the working directory, GANTRY_JOB_TEST_MESS and the umask.
	"state": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		cwd, err := os.Getwd()
		if err != nil {
			return Result{}, err
		}
		umask := syscall.Umask(0)
		syscall.Umask(umask)
		data, err := json.Marshal([]string{cwd, os.Getenv("GANTRY_JOB_TEST_MESS"), fmt.Sprintf("%03o", umask)})
		return Result{OK: true, Data: data}, err
	},
	// linger leaves a goroutine that runs for the payload's milliseconds (-1: for
	// ever) after the job.
	"linger": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		var ms int
		if err := json.Unmarshal(spec.Payload, &ms); err != nil {
			return Result{}, err
		}
		go func() {
			if ms < 0 {
				select {}
			}
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}()
		return Result{OK: true}, nil
	},
	// keep keeps a resident (a file open and a goroutine), and reports how many
	// its worker opened (see keepPayload).
	"keep": keepHandler,
	// leak leaves a file open.
	"leak": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		_, err := os.Open(os.Args[0])
		return Result{OK: true}, err
	},
	// daemon leaves a process behind that left the job's session and whose
	// parent exited, and reports its pid.
	"daemon": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		out, err := exec.Command("setsid", "sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!").Output()
		if err != nil {
			return Result{}, err
		}
		r.Status("daemon " + strings.TrimSpace(string(out)))
		return Result{OK: true}, nil
	},
	// ticker starts a grandchild that appends to a file, reports its pid in a
	// status message, and runs until terminated.
	"ticker": func(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
		var p tickerPayload
		if err := json.Unmarshal(spec.Payload, &p); err != nil {
			return Result{}, err
		}
		script := fmt.Sprintf("while :; do echo tick >> '%s'; sleep 0.02; done", p.File)
		if p.TrapTerm {
			script = "trap '' TERM; " + script
		}
		cmd := exec.Command("sh", "-c", script)
		cmd.Stdout = r.Writer()
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			return Result{}, err
		}
		r.Status(fmt.Sprintf("grandchild %d", cmd.Process.Pid))
		if p.IgnoreCtx {
			time.Sleep(time.Hour)
		}
		<-ctx.Done()
		r.Log("grandchild: " + cmd.Wait().Error())
		return Result{}, context.Cause(ctx)
	},
}

// keepPayload configures the "keep" handler.
type keepPayload struct {
	Break  bool // the kept resident breaks: Keep replaces it
	Leak   bool // the job also leaves a file open
	Linger bool // the job also leaves a goroutine running for ever
}

// testResident is a resident holding a file open and a goroutine.
type testResident struct {
	f      *os.File
	stop   chan struct{}
	broken bool
}

func (t *testResident) Broken() bool { return t.broken }
func (t *testResident) Close() error { close(t.stop); return t.f.Close() }

// residentsOpened counts the "keep" handler's residents in this worker.
var residentsOpened int

func keepHandler(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
	var p keepPayload
	if err := json.Unmarshal(spec.Payload, &p); err != nil {
		return Result{}, err
	}
	open := func() (Resident, error) {
		f, err := os.Open(os.Args[0])
		if err != nil {
			return nil, err
		}
		residentsOpened++
		t := &testResident{f: f, stop: make(chan struct{})}
		go func() { <-t.stop }()
		return t, nil
	}
	res, err := r.Keep("test", open)
	if err != nil {
		return Result{}, err
	}
	if p.Break {
		res.(*testResident).broken = true
		if _, err := r.Keep("test", open); err != nil {
			return Result{}, err
		}
	}
	if p.Leak {
		if _, err := os.Open(os.Args[0]); err != nil {
			return Result{}, err
		}
	}
	if p.Linger {
		go func() { select {} }()
	}
	data, err := json.Marshal(residentsOpened)
	return Result{OK: true, Data: data}, err
}

// recorder collects a job's messages and lets a test wait for one.
type recorder struct {
	mu      sync.Mutex
	msgs    []Message
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) add(m Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) messages() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Message(nil), r.msgs...)
}

// waitStatus waits for a status message starting with prefix and returns it.
func (r *recorder) waitStatus(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		for _, m := range r.messages() {
			if m.Type == MessageStatus && strings.HasPrefix(m.Text, prefix) {
				return m.Text
			}
		}
		select {
		case <-r.changed:
		case <-timeout:
			t.Fatalf("no status %q within 10s; got %+v", prefix, r.messages())
		}
	}
}

func waitOutcome(t *testing.T, j *Job) Outcome {
	t.Helper()
	select {
	case <-j.Done():
		return j.Wait()
	case <-time.After(20 * time.Second):
		_ = j.Kill()
		t.Fatalf("job %s did not finish within 20s", j.Spec().ID)
		return Outcome{}
	}
}

type started struct {
	job *Job
	rec *recorder
	log string
}

// testOptions starts workers that run testHandlers (see TestMain).
func testOptions(t testing.TB) Options {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Options{Command: []string{exe, "job"}, Env: append(os.Environ(), childEnv+"=1")}
}

// launch starts action with payload through run (startOneShot, or a pool's), its log under
// a directory that does not exist yet and its messages recorded, and kills it when
// the test ends.
func launch(t *testing.T, action string, payload any, run func(Spec, func(Message)) (*Job, error)) started {
	t.Helper()
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "logs", action+".log")
	rec := newRecorder()
	j, err := run(Spec{ID: action + "-1", Action: action, Element: "app.toml", LogPath: logPath, Payload: raw}, rec.add)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = j.Kill()
		j.Wait()
	})
	return started{j, rec, logPath}
}

// startOneShot runs spec in a worker process of its own that exits when the job
// ends: a Workers that never reuses its worker. It creates the log file's
// directory and the log file (truncating it), which receives the worker's stdout
// and stderr; the worker appends the job's log to it.
func startOneShot(spec Spec, opts Options, onMessage func(Message)) (*Job, error) {
	p := &Workers{opts: opts, oneShot: true}
	return p.Start(spec, onMessage)
}

// start runs action in a worker of its own (startOneShot).
func start(t *testing.T, action string, payload any, grace time.Duration) started {
	t.Helper()
	opts := testOptions(t)
	opts.Grace = grace
	return launch(t, action, payload, func(spec Spec, onMessage func(Message)) (*Job, error) {
		return startOneShot(spec, opts, onMessage)
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// procState returns the state letter of pid from /proc ("R", "S", "T", "Z"),
// or "" if there is no such process.
func procState(pid int) string {
	if p, ok := proctest.Read(pid); ok {
		return string(p.State)
	}
	return ""
}

// waitStopped waits until the ticker grandchild pid is stopped and its tick
// file has stopped growing, and returns the file's size.
func waitStopped(t *testing.T, pid int, ticks string) int64 {
	t.Helper()
	proctest.Eventually(t, fmt.Sprintf("grandchild %d to be stopped", pid), func() bool {
		p, ok := proctest.Read(pid)
		return ok && p.Stopped()
	})
	// Settle: a write in flight when SIGSTOP arrived may still land.
	size := fileSize(ticks)
	proctest.Eventually(t, "the tick file to stop growing", func() bool {
		time.Sleep(50 * time.Millisecond)
		n := fileSize(ticks)
		stable := n == size
		size = n
		return stable
	})
	return size
}

// waitGrowing waits until the tick file is larger than size.
func waitGrowing(t *testing.T, ticks string, size int64) {
	t.Helper()
	proctest.Eventually(t, fmt.Sprintf("%s to grow past %d bytes", ticks, size), func() bool { return fileSize(ticks) > size })
}

func grandchildPid(t *testing.T, rec *recorder) int {
	t.Helper()
	var pid int
	if _, err := fmt.Sscanf(rec.waitStatus(t, "grandchild "), "grandchild %d", &pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestMessagesInOrder(t *testing.T) {
	s := start(t, "messages", map[string]string{"echo": "yes"}, 0)
	out := waitOutcome(t, s.job)

	if !out.Result.OK || out.Terminated || out.ExitCode != 0 {
		t.Fatalf("outcome = %+v, want OK, not terminated, exit 0", out)
	}
	if got := string(out.Result.Data); got != `{"echo":"yes"}` {
		t.Errorf("result data = %s, want the payload back", got)
	}
	want := []Message{
		{Type: MessageStart, Text: "messages app.toml"},
		{Type: MessageStatus, Text: "compiling"},
		{Type: MessageLog, Text: "line one"},
		{Type: MessageProgress, Done: 1, Total: 2},
		{Type: MessageLog, Text: "out 1"},
		{Type: MessageLog, Text: "out 2"},
		{Type: MessageProgress, Done: 2, Total: 2},
		{Type: MessageLog, Text: "part"}, // the partial line, flushed when the handler returns
		{Type: MessageResult},
	}
	got := s.rec.messages()
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Type != w.Type || g.Text != w.Text || g.Done != w.Done || g.Total != w.Total {
			t.Errorf("message %d = %+v, want %+v", i, g, w)
		}
		if g.Time.IsZero() {
			t.Errorf("message %d has no time", i)
		}
	}
	if r := got[len(got)-1].Result; r == nil || !r.OK {
		t.Errorf("result message = %+v, want OK", r)
	}
	log := readFile(t, s.log)
	for _, line := range []string{"line one\n", "out 1\n", "out 2\n", "part\n", "[status] compiling\n"} {
		if !strings.Contains(log, line) {
			t.Errorf("log lacks %q:\n%s", line, log)
		}
	}
	// Every line carries its time, for build traces and merging logs.
	for _, line := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
		if !logStampRE.MatchString(line) {
			t.Errorf("log line without a timestamp: %q", line)
		}
		if got, want := TrimLogStamp(line), line[len("[15:04:05.000] "):]; got != want {
			t.Errorf("TrimLogStamp(%q) = %q, want %q", line, got, want)
		}
	}
	if out.Elapsed <= 0 || out.Elapsed != s.job.Elapsed() {
		t.Errorf("Elapsed = %v, job.Elapsed() = %v; want equal and positive", out.Elapsed, s.job.Elapsed())
	}
}

// A job says once, before its result, that its output is available, with the data
// it gives; the log records when.
func TestAvailableOnceBeforeResult(t *testing.T) {
	s := start(t, "available", map[string]string{"files": "abc/1"}, 0)
	if out := waitOutcome(t, s.job); !out.Result.OK {
		t.Fatalf("outcome = %+v, want OK", out)
	}
	var types []MessageType
	var data []string
	for _, m := range s.rec.messages() {
		types = append(types, m.Type)
		if m.Type == MessageAvailable {
			data = append(data, string(m.Data))
		}
	}
	want := []MessageType{MessageStart, MessageAvailable, MessageLog, MessageResult}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Errorf("message types = %v, want %v", types, want)
	}
	if len(data) != 1 || data[0] != `{"files":"abc/1"}` {
		t.Errorf("available data = %q, want the payload, once", data)
	}
	if log := readFile(t, s.log); strings.Count(log, "[available]\n") != 1 {
		t.Errorf("log does not say once when the output was available:\n%s", log)
	}

	// Data is opaque: any bytes, JSON or not, reach the parent as they were sent.
	s = start(t, "binaryAvailable", nil, 0)
	waitOutcome(t, s.job)
	sent := 0
	for _, m := range s.rec.messages() {
		if m.Type == MessageAvailable {
			sent++
			if !bytes.Equal(m.Data, binaryData) {
				t.Errorf("available data %q, want %q", m.Data, binaryData)
			}
		}
	}
	if sent != 1 {
		t.Errorf("%d available messages, want 1", sent)
	}
}

// binaryData is data that JSON could not carry as it is.
var binaryData = []byte{0, 0xff, '\n', '{'}

var logStampRE = regexp.MustCompile(`^\[\d\d:\d\d:\d\d\.\d{3}\] `)

func TestFailures(t *testing.T) {
	tests := []struct {
		action    string
		wantError string // the exact error, or with a "~" prefix a substring
		wantExit  int
		temporary bool
		wantLog   string
	}{
		{"fail", "fetching foo.tar: remote unreachable", 1, true, "about to fail\n"},
		{"crash", "job process exited with status 3 without reporting a result (see log LOG)", 3, false, "crashing\n"},
		{"panic", "~panic of app.toml: internal error: kaboom", 1, false, "panic: kaboom"},
		{"no-such-action", `unknown job action "no-such-action"`, 1, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			s := start(t, tt.action, nil, 0)
			out := waitOutcome(t, s.job)
			want := strings.ReplaceAll(tt.wantError, "LOG", s.log)
			if sub, ok := strings.CutPrefix(want, "~"); ok {
				if !strings.Contains(out.Result.Error, sub) {
					t.Errorf("error = %q, want it to contain %q", out.Result.Error, sub)
				}
			} else if out.Result.Error != want {
				t.Errorf("error = %q, want %q", out.Result.Error, want)
			}
			if out.Result.OK || out.Terminated || out.ExitCode != tt.wantExit || out.Result.Temporary != tt.temporary {
				t.Errorf("outcome = %+v, want failed, not terminated, exit %d, temporary %v", out, tt.wantExit, tt.temporary)
			}
			if log := readFile(t, s.log); !strings.Contains(log, tt.wantLog) {
				t.Errorf("log lacks %q:\n%s", tt.wantLog, log)
			}
		})
	}
}

func TestSuspendResume(t *testing.T) {
	ticks := filepath.Join(t.TempDir(), "ticks")
	wallStart := time.Now()
	s := start(t, "ticker", tickerPayload{File: ticks}, 0)
	pid := grandchildPid(t, s.rec)
	waitGrowing(t, ticks, 0)

	if err := s.job.Suspend(); err != nil {
		t.Fatal(err)
	}
	suspendedAt := time.Now()
	size := waitStopped(t, pid, ticks)
	elapsedBefore := s.job.Elapsed()
	const window = 400 * time.Millisecond
	time.Sleep(window) // the measured suspension, not a wait for an event
	if n := fileSize(ticks); n != size {
		t.Fatalf("tick file grew from %d to %d bytes while suspended", size, n)
	}
	if e := s.job.Elapsed(); e != elapsedBefore {
		t.Errorf("Elapsed moved from %v to %v while suspended", elapsedBefore, e)
	}
	if err := s.job.Suspend(); err != nil { // suspending twice is harmless
		t.Fatal(err)
	}
	if err := s.job.Resume(); err != nil {
		t.Fatal(err)
	}
	suspended := time.Since(suspendedAt)
	waitGrowing(t, ticks, size)

	wall := time.Since(wallStart)
	if e := s.job.Elapsed(); e >= wall-window*8/10 || e <= 0 {
		t.Errorf("Elapsed = %v, want below %v (wall %v, suspended %v)", e, wall-window*8/10, wall, suspended)
	}

	if err := s.job.Terminate(); err != nil {
		t.Fatal(err)
	}
	out := waitOutcome(t, s.job)
	if !out.Terminated || out.Result.Error != "terminated" {
		t.Errorf("outcome = %+v, want terminated with error %q", out, "terminated")
	}
	if out.Elapsed >= time.Since(wallStart)-window*8/10 {
		t.Errorf("outcome elapsed %v includes the suspension", out.Elapsed)
	}
}

func TestTerminateReachesWholeGroup(t *testing.T) {
	ticks := filepath.Join(t.TempDir(), "ticks")
	s := start(t, "ticker", tickerPayload{File: ticks}, 0)
	pid := grandchildPid(t, s.rec)

	if err := s.job.Terminate(); err != nil {
		t.Fatal(err)
	}
	out := waitOutcome(t, s.job)
	if !out.Terminated || out.ExitCode != 1 || out.Result.Error != "terminated" {
		t.Errorf("outcome = %+v, want terminated, exit 1, error %q", out, "terminated")
	}
	// The child waited for its grandchild, which SIGTERM to the group killed.
	if log := readFile(t, s.log); !strings.Contains(log, "grandchild: signal: terminated") {
		t.Errorf("log does not show the grandchild killed by SIGTERM:\n%s", log)
	}
	proctest.Eventually(t, fmt.Sprintf("grandchild %d to be gone", pid), func() bool { return !proctest.Alive(pid) })
	for _, err := range []error{s.job.Suspend(), s.job.Resume(), s.job.Terminate(), s.job.Kill()} {
		if err != nil {
			t.Errorf("signalling an exited job: %v", err)
		}
	}
}

func TestTerminateSuspended(t *testing.T) {
	ticks := filepath.Join(t.TempDir(), "ticks")
	s := start(t, "ticker", tickerPayload{File: ticks}, 0)
	pid := grandchildPid(t, s.rec)
	if err := s.job.Suspend(); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid, ticks)
	if err := s.job.Terminate(); err != nil {
		t.Fatal(err)
	}
	// The child handles SIGTERM itself and reports, well within the 5s grace.
	out := waitOutcome(t, s.job)
	if !out.Terminated || out.Result.Error != "terminated" || out.ExitCode != 1 {
		t.Errorf("outcome = %+v, want the child's own terminated result", out)
	}
	proctest.Eventually(t, fmt.Sprintf("grandchild %d to be gone", pid), func() bool { return !proctest.Alive(pid) })
}

func TestTerminateKillsAfterGrace(t *testing.T) {
	ticks := filepath.Join(t.TempDir(), "ticks")
	const grace = 300 * time.Millisecond
	s := start(t, "ticker", tickerPayload{File: ticks, TrapTerm: true, IgnoreCtx: true}, grace)
	pid := grandchildPid(t, s.rec)

	t0 := time.Now()
	if err := s.job.Terminate(); err != nil {
		t.Fatal(err)
	}
	out := waitOutcome(t, s.job)
	if d := time.Since(t0); d < grace {
		t.Errorf("job ended %v after Terminate, before the %v grace", d, grace)
	}
	want := fmt.Sprintf("job process was killed by signal 9 (killed) without reporting a result (see log %s)", s.log)
	if !out.Terminated || out.ExitCode != -1 || out.Result.Error != want {
		t.Errorf("outcome = %+v, want terminated, exit -1, error %q", out, want)
	}
	proctest.Eventually(t, fmt.Sprintf("grandchild %d to be gone", pid), func() bool { return !proctest.Alive(pid) })
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		spec Spec
		opts Options
		want string
	}{
		{"no command", Spec{ID: "a", LogPath: filepath.Join(dir, "a.log")}, Options{}, "starting job a: no command given"},
		{"no log", Spec{ID: "b"}, Options{Command: []string{"true"}}, "starting job b: no log path given"},
		{"missing executable", Spec{ID: "c", Action: "build", Element: "x.toml", LogPath: filepath.Join(dir, "c.log")},
			Options{Command: []string{filepath.Join(dir, "nonexistent")}}, "starting job c (build of x.toml)"},
		{"oversize payload", Spec{ID: "d", Action: "build", Element: "x.toml", LogPath: "d.log", Payload: make([]byte, maxFrame)},
			Options{Command: []string{"true"}}, "starting job d (build of x.toml): its spec holds 67108881 bytes, over the limit of a frame, 64.0 MiB (67108864 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := startOneShot(tt.spec, tt.opts, nil)
			if err == nil {
				j.Kill()
				j.Wait()
				t.Fatalf("startOneShot succeeded, want error %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// A child that is not a gantry job still gets an outcome, with its output in
// the log. It never sends start, so the job goes to a second worker, once: the
// second's death is the job's failure.
func TestForeignChild(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "sh.log")
	j, err := startOneShot(Spec{ID: "sh", LogPath: logPath}, Options{Command: []string{"sh", "-c", "echo oops >&2; exit 7"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := waitOutcome(t, j)
	want := fmt.Sprintf("job process exited with status 7 without reporting a result (see log %s)", logPath)
	if out.Result.Error != want || out.ExitCode != 7 {
		t.Errorf("outcome = %+v, want error %q", out, want)
	}
	log := readFile(t, logPath)
	first, second, ok := strings.Cut(log, " the job goes to a new worker\n")
	if !ok || !strings.HasPrefix(first, "oops\n") || second != "oops\n" {
		t.Errorf("log = %q, want the first child's stderr, the hand-over, and the second child's stderr", log)
	}
}
