package job

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The "gate" handler's status at its gate, and once through it.
const (
	gateStatus = "staged, waiting for a builder"
	pastGate   = "past the gate"
)

// gated wraps run (p.Start, say) so that the jobs it starts are gated.
func gated(run func(Spec, func(Message)) (*Job, error)) func(Spec, func(Message)) (*Job, error) {
	return func(spec Spec, onMessage func(Message)) (*Job, error) {
		spec.Gated = true
		return run(spec, onMessage)
	}
}

// startGate starts a "gate" job through run, and returns it with the file its
// handler creates once through its gate.
func startGate(t *testing.T, run func(Spec, func(Message)) (*Job, error)) (started, string) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "through")
	return launch(t, "gate", marker, run), marker
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// sentGateStatus reports whether the job said it waits at its gate.
func sentGateStatus(s started) bool {
	return slices.ContainsFunc(s.rec.messages(), func(m Message) bool { return m.Type == MessageStatus && m.Text == gateStatus })
}

// gateMessages counts the job's MessageGate messages (it says it is at its
// gate, open or not).
func gateMessages(s started) int {
	n := 0
	for _, m := range s.rec.messages() {
		if m.Type == MessageGate {
			n++
		}
	}
	return n
}

// waitNeverGated waits for the end of a job whose gate was opened before it got
// there, failing as soon as the job says it waits at its gate.
func waitNeverGated(t *testing.T, s started) Outcome {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		if sentGateStatus(s) {
			t.Fatalf("the job waits at its gate, opened before it got there\n%s", readFile(t, s.log))
		}
		select {
		case <-s.job.Done():
			return s.job.Wait()
		case <-s.rec.changed:
		case <-timeout:
			t.Fatalf("the job did not end within 20s\n%s", readFile(t, s.log))
		}
	}
}

// A gated job waits at its gate, saying so, until the parent opens it, and then
// goes on. Opening twice, or an ended job, does
// nothing. The next gated job in the same worker waits at its own gate.
func TestGateBlocksUntilOpen(t *testing.T) {
	p := newPool(t)
	var pids []int
	for range 2 {
		s, marker := startGate(t, gated(p.Start))
		s.rec.waitStatus(t, gateStatus)
		select {
		case <-s.job.Done():
			t.Fatalf("the job ended at its closed gate: %+v", s.job.Wait())
		case <-time.After(200 * time.Millisecond): // a window in which nothing may happen
		}
		if exists(marker) {
			t.Fatalf("the job went through its closed gate")
		}
		for range 2 {
			if err := s.job.Open(); err != nil {
				t.Fatal(err)
			}
		}
		out := waitOutcome(t, s.job)
		if !out.Result.OK || !exists(marker) {
			t.Fatalf("outcome %+v (marker there: %v), want OK through the gate", out, exists(marker))
		}
		if err := s.job.Open(); err != nil {
			t.Errorf("opening an ended job: %v, want nil", err)
		}
		var statuses []string
		for _, m := range s.rec.messages() {
			if m.Type == MessageStatus {
				statuses = append(statuses, m.Text)
			}
		}
		if want := []string{gateStatus, pastGate}; !slices.Equal(statuses, want) {
			t.Errorf("status messages %q, want %q", statuses, want)
		}
		if n := gateMessages(s); n != 1 {
			t.Errorf("%d gate messages, want 1", n)
		}
		log := readFile(t, s.log)
		for _, want := range []string{"[gate] " + gateStatus + "\n", "[gate] opened after "} {
			if !strings.Contains(log, want) {
				t.Errorf("the log lacks %q:\n%s", want, log)
			}
		}
		pids = append(pids, s.job.Pid())
	}
	if pids[0] != pids[1] {
		t.Errorf("the jobs ran in workers %v, want one", pids)
	}
}

// A gate opened before the job gets there (before its worker even read the job)
// lets it through without waiting, also when the job goes to a new worker because
// the first died before it started the job.
func TestGateOpenBeforeReached(t *testing.T) {
	for _, handOver := range []bool{false, true} {
		t.Run(fmt.Sprintf("handOver=%v", handOver), func(t *testing.T) {
			p := newPool(t)
			marker := filepath.Join(t.TempDir(), "through")
			idle, s := startStopped(t, p, "gate", marker, gated(p.Start))
			if err := s.job.Open(); err != nil {
				t.Fatal(err)
			}
			sig := syscall.SIGCONT
			if handOver {
				sig = syscall.SIGKILL
			}
			if err := syscall.Kill(idle, sig); err != nil {
				t.Fatal(err)
			}
			out := waitNeverGated(t, s)
			if !out.Result.OK || !exists(marker) {
				t.Errorf("outcome %+v (marker there: %v), want OK through the gate", out, exists(marker))
			}
			if moved := s.job.Pid() != idle; moved != handOver {
				t.Errorf("the job ran in worker %d (the first: %d), want a new worker: %v", s.job.Pid(), idle, handOver)
			}
			if log := readFile(t, s.log); strings.Contains(log, "[gate]") {
				t.Errorf("the log of a job that never waited mentions its gate:\n%s", log)
			}
			if n := gateMessages(s); n != 1 {
				t.Errorf("a job that found its gate open sent %d gate messages, want 1 (it is there)", n)
			}
		})
	}

	// Right after Start, in a worker of its own, the job does not wait either.
	opts := testOptions(t)
	s, marker := startGate(t, gated(func(spec Spec, onMessage func(Message)) (*Job, error) {
		return startOneShot(spec, opts, onMessage)
	}))
	if err := s.job.Open(); err != nil {
		t.Fatal(err)
	}
	if out := waitOutcome(t, s.job); !out.Result.OK || !exists(marker) {
		t.Errorf("opened right after Start: outcome %+v, want OK through the gate", out)
	}
}

// A job terminated at its gate ends terminated, at once (well within the grace
// period), without going through.
func TestGateTerminate(t *testing.T) {
	opts := testOptions(t)
	opts.Grace = 30 * time.Second
	p := NewWorkers(opts)
	t.Cleanup(func() { p.Close() })
	s, marker := startGate(t, gated(p.Start))
	s.rec.waitStatus(t, gateStatus)
	if err := s.job.Terminate(); err != nil {
		t.Fatal(err)
	}
	out := waitBeforeGrace(t, s)
	if !out.Terminated || !strings.HasPrefix(out.Result.Error, "terminated") || out.ExitCode != 1 {
		t.Errorf("outcome %+v, want the job's own terminated result", out)
	}
	if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the terminated job went through its gate (marker: %v)", err)
	}
	if log := readFile(t, s.log); !strings.Contains(log, "[gate] still closed after ") {
		t.Errorf("the log does not say the job left its closed gate:\n%s", log)
	}
}

// An ungated job's gate is open: it goes through without a word, and Open does
// nothing.
func TestGateUngated(t *testing.T) {
	p := newPool(t)
	s, marker := startGate(t, p.Start)
	if err := s.job.Open(); err != nil {
		t.Fatal(err)
	}
	out := waitNeverGated(t, s)
	if !out.Result.OK || !exists(marker) {
		t.Errorf("outcome %+v (marker there: %v), want OK, through the gate", out, exists(marker))
	}
	if n := gateMessages(s); n != 0 {
		t.Errorf("an ungated job sent %d gate messages, want none", n)
	}
	if log := readFile(t, s.log); strings.Contains(log, "[gate]") {
		t.Errorf("an ungated job's log mentions its gate:\n%s", log)
	}
}

// BenchmarkGateOpen measures, in a warm worker, how long a job takes from the
// parent's go-ahead to its handler going on past its gate (the handler's next
// message, stamped in the worker), and to that message reaching the parent:
// "gated", from Open to a job waiting at its gate; "ungated", from Start of a job
// whose gate is open, for reference (the hand-over a gate saves).
func BenchmarkGateOpen(b *testing.B) {
	for _, gate := range []bool{true, false} {
		name := map[bool]string{true: "gated", false: "ungated"}[gate]
		b.Run(name, func(b *testing.B) { benchmarkGate(b, gate) })
	}
}

func benchmarkGate(b *testing.B, gate bool) {
	p := NewWorkers(testOptions(b))
	defer p.Close()
	logPath := filepath.Join(b.TempDir(), "gate.log")
	payload := fmt.Appendf(nil, "%q", filepath.Join(b.TempDir(), "through"))
	type received struct {
		m  Message
		at time.Time
	}
	var toHandler, toParent []time.Duration
	for i := 0; b.Loop(); i++ {
		msgs := make(chan received, 16)
		spec := Spec{ID: fmt.Sprintf("gate-%d", i), Action: "gate", Element: "app.toml", LogPath: logPath, Payload: payload, Gated: gate}
		goAhead := time.Now()
		j, err := p.Start(spec, func(m Message) { msgs <- received{m, time.Now()} })
		if err != nil {
			b.Fatal(err)
		}
		if gate {
			for r := range msgs {
				if r.m.Type == MessageStatus && r.m.Text == gateStatus {
					break
				}
			}
			goAhead = time.Now()
			if err := j.Open(); err != nil {
				b.Fatal(err)
			}
		}
		for r := range msgs {
			if r.m.Type == MessageStatus {
				if r.m.Text != pastGate {
					b.Fatalf("status %q, want %q", r.m.Text, pastGate)
				}
				toHandler = append(toHandler, r.m.Time.Sub(goAhead))
				toParent = append(toParent, r.at.Sub(goAhead))
				break
			}
		}
		if out := j.Wait(); !out.Result.OK {
			b.Fatalf("outcome %+v", out)
		}
	}
	for _, d := range []struct {
		name string
		ds   []time.Duration
	}{{"handler", toHandler}, {"parent", toParent}} {
		slices.Sort(d.ds)
		b.ReportMetric(float64(d.ds[0].Microseconds()), "µs-min-to-"+d.name)
		b.ReportMetric(float64(d.ds[len(d.ds)/2].Microseconds()), "µs-median-to-"+d.name)
	}
}

// The control pipe ends only when gantry exits: a job waiting at its gate then ends
// as a job does when the parent-death signal comes first, its context cancelled with
// ErrParentDied, so that the build handler, which caches no failure of a job whose
// context is done, does not cache "gantry exited" as the element's failure (seen in
// the kill -9 campaign before: the gate returned the error with the context alive).
func TestGateEndOfControlPipeIsGantryExiting(t *testing.T) {
	p := newPool(t)
	s, marker := startGate(t, gated(p.Start))
	s.rec.waitStatus(t, gateStatus)
	s.job.mu.Lock()
	w := s.job.w
	s.job.mu.Unlock()
	if err := w.controls.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.job.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the job did not end within 20s of its control pipe's end\n%s", readFile(t, s.log))
	}
	out := s.job.Wait()
	if want := "gantry exited (the job's context: gantry exited)"; !strings.Contains(out.Result.Error, want) {
		t.Errorf("result error %q, want it to contain %q", out.Result.Error, want)
	}
	if exists(marker) {
		t.Error("the job went through its gate")
	}
}
