package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/proctest"
)

// newPool returns a pool of test workers, closed when the test ends.
func newPool(t *testing.T) *Workers {
	t.Helper()
	p := NewWorkers(testOptions(t))
	t.Cleanup(func() { p.Close() })
	return p
}

// startIn starts action in p.
func startIn(t *testing.T, p *Workers, action string, payload any) started {
	t.Helper()
	return launch(t, action, payload, p.Start)
}

// runIn runs action in p to its end and returns the job and its outcome.
func runIn(t *testing.T, p *Workers, action string, payload any) (started, Outcome) {
	t.Helper()
	s := startIn(t, p, action, payload)
	return s, waitOutcome(t, s.job)
}

// reaped reports whether pid no longer exists, not even as a zombie.
func reaped(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// Jobs run one after another reuse one worker; jobs at once get one each.
func TestWorkersReuse(t *testing.T) {
	p := newPool(t)
	pids := map[int]int{}
	for range 5 {
		a, b := startIn(t, p, "messages", "x"), startIn(t, p, "messages", "y")
		for _, s := range []started{a, b} {
			if out := waitOutcome(t, s.job); !out.Result.OK || out.ExitCode != 0 {
				t.Fatalf("outcome = %+v, want OK", out)
			}
			pids[s.job.Pid()]++
			if log := readFile(t, s.log); !strings.Contains(log, fmt.Sprintf("(job messages-1, pid %d)", s.job.Pid())) {
				t.Errorf("log of a job in worker %d lacks its own start line:\n%s", s.job.Pid(), log)
			}
		}
	}
	if n := p.Started(); n != 2 || len(pids) != 2 {
		t.Errorf("10 jobs, 2 at a time, started %d workers (pids %v), want 2", n, pids)
	}
}

// What a job changes in its worker's process is put back before the next job.
func TestWorkerStateDoesNotLeak(t *testing.T) {
	p := newPool(t)
	first, before := runIn(t, p, "state", nil)
	mess, out := runIn(t, p, "mess", t.TempDir())
	if !out.Result.OK {
		t.Fatalf("mess: %+v", out)
	}
	second, after := runIn(t, p, "state", nil)
	if first.job.Pid() != mess.job.Pid() || mess.job.Pid() != second.job.Pid() {
		t.Fatalf("the jobs ran in workers %d, %d, %d; want one worker", first.job.Pid(), mess.job.Pid(), second.job.Pid())
	}
	if string(after.Result.Data) != string(before.Result.Data) {
		t.Errorf("after a job that changed them, working directory, environment and umask = %s, want %s as before",
			after.Result.Data, before.Result.Data)
	}
}

// A job that leaves a file open retires its worker: the next job gets a new one.
func TestWorkerRetiresAfterLeak(t *testing.T) {
	p := newPool(t)
	leak, out := runIn(t, p, "leak", nil)
	if !out.Result.OK {
		t.Fatalf("leak: %+v", out)
	}
	if log := readFile(t, leak.log); !strings.Contains(log, "takes no further job: its job left files open: descriptors") {
		t.Errorf("the leaking job's log does not say its worker retired:\n%s", log)
	}
	next, out := runIn(t, p, "messages", nil)
	if !out.Result.OK || next.job.Pid() == leak.job.Pid() || p.Started() != 2 {
		t.Errorf("next job: outcome %+v in worker %d (leaking job's: %d), %d workers started; want OK in a second worker",
			out, next.job.Pid(), leak.job.Pid(), p.Started())
	}
	proctest.Eventually(t, "the retired worker to exit", func() bool { return !proctest.Alive(leak.job.Pid()) })
}

// What a job keeps through Reporter.Keep (a connection: a descriptor and
// goroutines) serves the worker's later jobs without retiring it; a broken
// one is replaced; anything else a job leaves still retires the worker.
func TestWorkerKeepsResidents(t *testing.T) {
	p := newPool(t)
	keep := func(payload keepPayload) (started, int) {
		t.Helper()
		s, out := runIn(t, p, "keep", payload)
		if !out.Result.OK {
			t.Fatalf("keep %+v: %+v", payload, out)
		}
		var opened int
		if err := json.Unmarshal(out.Result.Data, &opened); err != nil {
			t.Fatal(err)
		}
		return s, opened
	}
	first, _ := keep(keepPayload{})
	for i, payload := range []keepPayload{{}, {}, {Break: true}, {}} {
		s, opened := keep(payload)
		want := 1
		if i >= 2 {
			want = 2
		}
		if s.job.Pid() != first.job.Pid() || opened != want {
			t.Fatalf("job %d (%+v) ran in worker %d having opened %d residents; want worker %d, %d opened\n%s",
				i+2, payload, s.job.Pid(), opened, first.job.Pid(), want, readFile(t, s.log))
		}
		if payload.Break && !strings.Contains(readFile(t, s.log), "[resident] test is broken: closed (<nil>), opening another") {
			t.Errorf("the log of the job that replaced the broken resident does not say so:\n%s", readFile(t, s.log))
		}
	}
	leak, _ := keep(keepPayload{Leak: true})
	if log := readFile(t, leak.log); leak.job.Pid() != first.job.Pid() || !regexp.MustCompile(`takes no further job: its job left files open: descriptors \d+ \(`+regexp.QuoteMeta(os.Args[0])+`\)\n`).MatchString(log) {
		t.Errorf("a file left open beside a kept resident did not retire worker %d (the job ran in %d):\n%s", first.job.Pid(), leak.job.Pid(), log)
	}
	linger, _ := keep(keepPayload{Linger: true})
	if log := readFile(t, linger.log); linger.job.Pid() == leak.job.Pid() || !strings.Contains(log, "takes no further job: its job left 1 goroutines running") {
		t.Errorf("a goroutine left running beside a kept resident did not retire worker %d (leak's worker %d):\n%s", linger.job.Pid(), leak.job.Pid(), log)
	}
}

// A daemon a job leaves behind is dead, and reaped, when the job's result
// arrives: before its worker can take the next job.
func TestWorkerDaemonDiesWithItsJob(t *testing.T) {
	p := newPool(t)
	s := startIn(t, p, "daemon", nil)
	var pid int
	if _, err := fmt.Sscanf(s.rec.waitStatus(t, "daemon "), "daemon %d", &pid); err != nil {
		t.Fatal(err)
	}
	if out := waitOutcome(t, s.job); !out.Result.OK {
		t.Fatalf("daemon: %+v", out)
	}
	if !reaped(pid) {
		t.Errorf("daemon %d (state %q) outlived its job's result", pid, procState(pid))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	next, _ := runIn(t, p, "messages", nil)
	if next.job.Pid() != s.job.Pid() {
		t.Errorf("the next job ran in worker %d, want the same worker %d", next.job.Pid(), s.job.Pid())
	}
}

// Suspending one job stops its processes and nothing else: not another job's,
// not an idle worker.
func TestSuspendOneJobOnly(t *testing.T) {
	p := newPool(t)
	ticksA, ticksB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	a := startIn(t, p, "ticker", tickerPayload{File: ticksA})
	b := startIn(t, p, "ticker", tickerPayload{File: ticksB})
	idle, _ := runIn(t, p, "messages", nil) // a third worker, idle from now on
	pidA, pidB := grandchildPid(t, a.rec), grandchildPid(t, b.rec)
	waitGrowing(t, ticksB, 0)

	if err := a.job.Suspend(); err != nil {
		t.Fatal(err)
	}
	size := waitStopped(t, pidA, ticksA)
	if st := procState(a.job.Pid()); st != "T" {
		t.Errorf("suspended job's worker is in state %q, want T (stopped)", st)
	}
	waitGrowing(t, ticksB, fileSize(ticksB)) // the other job runs on
	for what, pid := range map[string]int{"other job's grandchild": pidB, "other job's worker": b.job.Pid(), "idle worker": idle.job.Pid()} {
		if st := procState(pid); st == "T" {
			t.Errorf("%s %d is stopped", what, pid)
		}
	}
	if err := a.job.Resume(); err != nil {
		t.Fatal(err)
	}
	waitGrowing(t, ticksA, size)
}

// A job whose worker crashes fails alone; the pool goes on with a new worker.
func TestWorkerCrashFailsOnlyItsJob(t *testing.T) {
	for _, action := range []string{"crash", "panic"} {
		t.Run(action, func(t *testing.T) {
			p := newPool(t)
			other := startIn(t, p, "ticker", tickerPayload{File: filepath.Join(t.TempDir(), "ticks")})
			grandchildPid(t, other.rec)
			crashed, out := runIn(t, p, action, nil)
			if out.Result.OK || out.Terminated {
				t.Errorf("%s: outcome %+v, want failed, not terminated", action, out)
			}
			next, out := runIn(t, p, "messages", nil)
			if !out.Result.OK || next.job.Pid() == crashed.job.Pid() {
				t.Errorf("next job: outcome %+v in worker %d (the crashed job's: %d); want OK in a new worker",
					out, next.job.Pid(), crashed.job.Pid())
			}
			select {
			case <-other.job.Done():
				t.Errorf("the other job ended: %+v", other.job.Wait())
			default:
			}
		})
	}
}

// A terminated or killed job's worker takes no further job; Close ends idle
// workers.
func TestWorkerAfterTerminateAndClose(t *testing.T) {
	p := newPool(t)
	for _, stop := range []func(*Job) error{(*Job).Terminate, (*Job).Kill} {
		s := startIn(t, p, "ticker", tickerPayload{File: filepath.Join(t.TempDir(), "ticks")})
		grandchildPid(t, s.rec)
		if err := stop(s.job); err != nil {
			t.Fatal(err)
		}
		if out := waitOutcome(t, s.job); !out.Terminated {
			t.Errorf("outcome %+v, want terminated", out)
		}
		proctest.Eventually(t, "the stopped job's worker to exit", func() bool { return !proctest.Alive(s.job.Pid()) })
	}
	idle, _ := runIn(t, p, "messages", nil)
	if p.Started() != 3 {
		t.Errorf("started %d workers, want 3 (none reused after terminate or kill)", p.Started())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !reaped(idle.job.Pid()) {
		t.Errorf("idle worker %d is still there after Close", idle.job.Pid())
	}
}

// A goroutine a job leaves running retires its worker, unless it ends soon
// after the job (a closed connection's reader does).
func TestWorkerGoroutinesLeft(t *testing.T) {
	p := newPool(t)
	brief, out := runIn(t, p, "linger", 5)
	if !out.Result.OK {
		t.Fatalf("linger: %+v", out)
	}
	next, _ := runIn(t, p, "messages", nil)
	if next.job.Pid() != brief.job.Pid() {
		t.Errorf("a goroutine that ended 5ms after its job retired worker %d:\n%s", brief.job.Pid(), readFile(t, brief.log))
	}
	stuck, _ := runIn(t, p, "linger", -1)
	if log := readFile(t, stuck.log); !strings.Contains(log, "takes no further job: its job left 1 goroutines running") {
		t.Errorf("a goroutine left running for ever did not retire the worker:\n%s", log)
	}
	if after, _ := runIn(t, p, "messages", nil); after.job.Pid() == stuck.job.Pid() {
		t.Errorf("the next job ran in the retired worker %d", stuck.job.Pid())
	}
}

// startInStoppedWorker stops an idle worker of p and starts a job of action with
// payload, which goes to it: stopped, the worker cannot read the job; killed, it
// dies with the job given to it and not started. It returns the worker's pid.
func startInStoppedWorker(t *testing.T, p *Workers, action string, payload any) (int, started) {
	t.Helper()
	return startStopped(t, p, action, payload, p.Start)
}

// startStopped is startInStoppedWorker with the job started by run (p.Start, or
// a wrapper of it).
func startStopped(t *testing.T, p *Workers, action string, payload any, run func(Spec, func(Message)) (*Job, error)) (int, started) {
	t.Helper()
	first, _ := runIn(t, p, "messages", nil)
	idle := first.job.Pid()
	if err := syscall.Kill(idle, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Stopped only once seen so: until a thread of it takes the signal, another
	// could read the job.
	proctest.Eventually(t, fmt.Sprintf("worker %d to be stopped", idle), func() bool { return procState(idle) == "T" })
	s := launch(t, action, payload, run)
	if pid := s.job.Pid(); pid != idle {
		t.Fatalf("the job went to worker %d, want the idle worker %d", pid, idle)
	}
	return idle, s
}

// A job handed to a worker that dies before it starts the job (an idle worker
// the OOM killer takes as the job arrives) runs in a new worker: the dead one
// ran nothing of it. The job's log says so.
func TestWorkerDeadBeforeStartHandsJobOver(t *testing.T) {
	p := newPool(t)
	idle, s := startInStoppedWorker(t, p, "messages", "again")
	if err := syscall.Kill(idle, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	out := waitOutcome(t, s.job)
	if !out.Result.OK || out.Terminated || string(out.Result.Data) != `"again"` {
		t.Fatalf("outcome %+v, want OK with the payload back", out)
	}
	if pid := s.job.Pid(); pid == idle || p.Started() != 2 {
		t.Errorf("the job ran in worker %d (the dead one: %d), %d workers started; want a second worker", pid, idle, p.Started())
	}
	starts := 0
	for _, m := range s.rec.messages() {
		if m.Type == MessageStart {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("the job started %d times, want once", starts)
	}
	if log := readFile(t, s.log); !strings.Contains(log, fmt.Sprintf("[worker] pid %d exited before it started job messages-1; the job goes to a new worker", idle)) {
		t.Errorf("the job's log does not say its first worker died:\n%s", log)
	}
}

// A job suspended when its worker dies before starting it stays suspended in its
// new worker, which is stopped before it can read the job, until it is resumed.
func TestWorkerHandOverKeepsSuspension(t *testing.T) {
	p := newPool(t)
	idle, s := startInStoppedWorker(t, p, "messages", nil)
	if err := s.job.Suspend(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(idle, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var next int
	proctest.Eventually(t, "the job to go to a new worker", func() bool { next = s.job.Pid(); return next != idle })
	proctest.Eventually(t, fmt.Sprintf("the new worker %d to be stopped", next), func() bool { return procState(next) == "T" })
	if len(s.rec.messages()) != 0 {
		t.Errorf("a suspended job sent %+v", s.rec.messages())
	}
	if err := s.job.Resume(); err != nil {
		t.Fatal(err)
	}
	if out := waitOutcome(t, s.job); !out.Result.OK {
		t.Errorf("outcome %+v, want OK", out)
	}
}

// A job terminated before its worker read it runs nothing of it: once the worker
// reads it, it ends terminated, long before the grace period would have killed it,
// and the worker, which ran nothing of it, takes the next job.
func TestTerminateBeforeWorkerStarts(t *testing.T) {
	p, idle, s, marker := markerJobInStoppedWorker(t)
	if err := s.job.Terminate(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(idle, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	out := waitBeforeGrace(t, s)
	if !out.Terminated || out.Result.OK || !strings.Contains(out.Result.Error, "terminated before it started") {
		t.Errorf("outcome %+v, want terminated before it started", out)
	}
	if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the job's handler ran (its marker: %v)", err)
	}
	for _, m := range s.rec.messages() {
		if m.Type == MessageStart {
			t.Errorf("the job sent start")
		}
	}
	if log := readFile(t, s.log); !strings.Contains(log, fmt.Sprintf("[worker] job marker-1 was terminated before pid %d started it", idle)) {
		t.Errorf("the job's log does not say it was terminated before it started:\n%s", log)
	}
	next, out := runIn(t, p, "messages", nil)
	if !out.Result.OK || next.job.Pid() != idle || p.Started() != 1 {
		t.Errorf("next job: outcome %+v in worker %d, %d workers started; want OK in the same worker %d", out, next.job.Pid(), p.Started(), idle)
	}
}

// markerJobInStoppedWorker gives a "marker" job (it writes the file marker) to a
// stopped idle worker of a pool whose grace period is 30s.
func markerJobInStoppedWorker(t *testing.T) (p *Workers, idle int, s started, marker string) {
	t.Helper()
	opts := testOptions(t)
	opts.Grace = 30 * time.Second
	p = NewWorkers(opts)
	t.Cleanup(func() { p.Close() })
	marker = filepath.Join(t.TempDir(), "ran")
	idle, s = startInStoppedWorker(t, p, "marker", marker)
	return p, idle, s, marker
}

// waitBeforeGrace waits for the end of a job terminated or killed before its worker
// read it, well within its worker's 30s grace period.
func waitBeforeGrace(t *testing.T, s started) Outcome {
	t.Helper()
	select {
	case <-s.job.Done():
		return s.job.Wait()
	case <-time.After(10 * time.Second):
		t.Fatalf("the job stopped before its worker read it still ran after 10s (grace 30s)\n%s", readFile(t, s.log))
		return Outcome{}
	}
}

// A job killed before its worker read it ends at once with its worker, ran nothing,
// and does not go to a new worker.
func TestKillBeforeWorkerStarts(t *testing.T) {
	p, idle, s, marker := markerJobInStoppedWorker(t)
	if err := s.job.Kill(); err != nil {
		t.Fatal(err)
	}
	if out := waitBeforeGrace(t, s); !out.Terminated || out.Result.OK || s.job.Pid() != idle {
		t.Errorf("outcome %+v in worker %d, want killed in worker %d", out, s.job.Pid(), idle)
	}
	if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) || p.Started() != 1 {
		t.Errorf("the job's handler ran (its marker: %v; %d workers started)", err, p.Started())
	}
}

// A job suspended before its worker read it runs nothing until it is resumed, and
// runs when it is: the worker (stopped here before it was given the job, so that
// it cannot read it first) stays stopped with the job, whose clock stops.
func TestSuspendBeforeWorkerStarts(t *testing.T) {
	p := newPool(t)
	marker := filepath.Join(t.TempDir(), "ran")
	idle, s := startInStoppedWorker(t, p, "marker", marker)
	if err := s.job.Suspend(); err != nil {
		t.Fatal(err)
	}
	if st := procState(idle); st != "T" {
		t.Errorf("the suspended job's worker is in state %q, want T (stopped)", st)
	}
	if _, err := os.Stat(marker); err == nil || len(s.rec.messages()) != 0 {
		t.Fatalf("the suspended job ran (messages %+v)", s.rec.messages())
	}
	if e := s.job.Elapsed(); e != s.job.Elapsed() {
		t.Errorf("a suspended job's elapsed time goes on: %v", e)
	}
	if err := s.job.Resume(); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, "the resumed job to run", func() bool { _, err := os.Stat(marker); return err == nil })
	if err := s.job.Terminate(); err != nil {
		t.Fatal(err)
	}
	if out := waitOutcome(t, s.job); !out.Terminated {
		t.Errorf("outcome %+v, want terminated", out)
	}
}
