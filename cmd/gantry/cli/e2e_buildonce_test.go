package cli

// End-to-end tests of build-once locks: several real `gantry build` sessions of one
// project on one cache.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gantry-build/gantry/internal/proctest"
)

// builtCounts reads the file every build of the test appends its element's name to,
// and counts the builds of each element.
func builtCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Fields(string(data)) {
		n[line]++
	}
	return n
}

// Three sessions of the same project on one cache, at once: every element is built
// exactly once across the three, and all three succeed. The first element's build
// waits until each session has either started building it or is waiting for
// another's build of it, so the three meet on it, and then on every element above.
func TestE2EBuildOnceSharedCache(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, nil)
	built, gate := p.scratch("built"), p.scratch("go")
	record := "echo %{element-name} >> " + built
	files := map[string]string{
		"elements/base.toml": manualElement(nil, fmt.Sprintf("while [ ! -e %s ]; do sleep 0.02; done", gate), record),
	}
	var top []string
	for i := range 8 {
		mid, leaf := fmt.Sprintf("mid%d.toml", i), fmt.Sprintf("leaf%d.toml", i)
		files["elements/"+mid] = manualElement([]string{"base.toml"}, record)
		files["elements/"+leaf] = manualElement([]string{mid}, record)
		top = append(top, leaf)
	}
	files["elements/app.toml"] = manualElement(top, record)
	files["project.toml"] = projectTOML("app.toml")
	for name, content := range files {
		p.write(name, content)
	}
	var runs []*gantryProc
	for range 3 {
		runs = append(runs, p.start("build", "--ui", "json", "--sandbox", "host"))
	}
	for i, g := range runs {
		g.waitFor(fmt.Sprintf("session %d to start building base.toml or wait for it", i), func(evs []e2eEvent) bool {
			return slices.ContainsFunc(evs, func(e e2eEvent) bool {
				return e.is("job-start", "build", "base.toml") || e.is("element-waiting", "build", "base.toml")
			})
		})
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, g := range runs {
		if code := g.wait(e2eTimeout); code != 0 {
			t.Fatalf("session %d: exit code %d\n%s", i, code, g.output())
		}
	}
	counts := builtCounts(t, built)
	for name := range files {
		el, ok := strings.CutPrefix(name, "elements/")
		if !ok {
			continue
		}
		if counts[el] != 1 {
			t.Errorf("%s was built %d times by the three sessions, want once", el, counts[el])
		}
		if st := p.state(el); st != "cached" {
			t.Errorf("%s is %s, want cached", el, st)
		}
	}
	waits := 0
	for _, g := range runs {
		for _, e := range g.snapshot() {
			if e.is("element-waiting", "build", "") {
				waits++
			}
		}
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	t.Logf("%d builds in all, %d waits for another session's build", total, waits)
	p.verifyCache()
	// A null build builds nothing, so takes no lock: it does not even open the file.
	building := filepath.Join(p.cache, "building")
	if err := os.RemoveAll(building); err != nil {
		t.Fatal(err)
	}
	p.mustRun(0, "build", "--sandbox", "host")
	if _, err := os.Stat(building); !os.IsNotExist(err) {
		t.Errorf("a null build made %s (%v): it took a build lock", building, err)
	}
	if t.Failed() {
		for i, g := range runs {
			t.Logf("session %d:\n%s", i, g.output())
		}
	}
}

// The holder of an element's build lock dies (kill -9) while it builds it, be it the
// session or only its build job: the lock is free at once (the kernel dropped the
// session's, or the session booked its job's end), and a session waiting for it
// takes the build over, builds it and succeeds, with no timeout to wait out.
func TestE2EBuildOnceTakeoverAfterKill(t *testing.T) {
	for _, victim := range []string{"session", "job"} {
		t.Run("kill the "+victim, func(t *testing.T) {
			t.Parallel()
			testTakeoverAfterKill(t, victim)
		})
	}
}

func testTakeoverAfterKill(t *testing.T, victim string) {
	p := newE2EProject(t, nil)
	built, first, fifo, pidFile := p.scratch("built"), p.scratch("first"), p.scratch("fifo"), p.scratch("pid")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Should the first build have outlived its holder, its read ends here.
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
	record := "echo %{element-name} >> " + built
	// The first build of base.toml says its shell's pid and blocks reading a FIFO
	// nobody writes; the next goes through.
	p.write("project.toml", projectTOML("app.toml"))
	p.write("elements/base.toml", manualElement(nil, fmt.Sprintf("if mkdir %s; then echo $$ > %s; cat %s; fi", first, pidFile, fifo), record))
	p.write("elements/app.toml", manualElement([]string{"base.toml"}, record))

	holder := p.start("build", "--ui", "json", "--sandbox", "host")
	killGroupOnCleanup(t, holder.pid())
	holder.waitEvent("job-start", "build", "base.toml")
	shell := readPid(t, pidFile)
	waiter := p.start("build", "--ui", "json", "--sandbox", "host")
	waited := waiter.waitEvent("element-waiting", "build", "base.toml")
	if !strings.Contains(waited.Text, "waiting for another builder of base.toml") {
		t.Errorf("the waiting session says %q, want what it waits for", waited.Text)
	}
	if _, started := findEvent(waiter.snapshot(), "job-start", "build", "base.toml"); started {
		t.Fatalf("the second session started building base.toml while the first builds it:\n%s", waiter.output())
	}
	kill := holder.pid()
	if victim == "job" {
		kill = jobWorkerOf(t, shell, holder.pid())
	}
	if err := syscall.Kill(kill, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	waiter.waitEvent("job-start", "build", "base.toml")
	tookOver := time.Since(killedAt)
	if code := waiter.wait(e2eTimeout); code != 0 {
		t.Fatalf("the waiting session failed after the holder was killed: exit code %d\n%s", code, waiter.output())
	}
	t.Logf("the waiter started building base.toml %v after the kill of the holder's %s", tookOver.Round(time.Millisecond), victim)
	// At once: the lock was freed; nothing waited for a timeout or a poll.
	if tookOver > 5*time.Second {
		t.Errorf("the waiter took %v to take the build over after the kill, want at once", tookOver)
	}
	if counts := builtCounts(t, built); counts["base.toml"] != 1 || counts["app.toml"] != 1 {
		t.Errorf("builds completed %v, want base.toml and app.toml once each (the killed build never finished)", counts)
	}
	t.Logf("the holder exited with %d", holder.wait(e2eTimeout))
	for _, el := range []string{"base.toml", "app.toml"} {
		if st := p.state(el); st != "cached" {
			t.Errorf("%s is %s after the takeover, want cached", el, st)
		}
	}
	if _, err := os.Stat(filepath.Join(p.cache, "building", "keys")); err != nil {
		t.Errorf("the build lock file: %v", err)
	}
	p.verifyCache()
}

// jobWorkerOf is the job worker of session gantry that pid runs under: its
// ancestor whose parent is gantry.
func jobWorkerOf(t *testing.T, pid, gantry int) int {
	t.Helper()
	for p := pid; p > 1; {
		pi, ok := proctest.Read(p)
		if !ok {
			break
		}
		if pi.PPID == gantry {
			return p
		}
		p = pi.PPID
	}
	t.Fatalf("process %d does not run under a job worker of gantry (pid %d)", pid, gantry)
	return 0
}

// The holder's build fails: its failure is cached, and the session waiting for it
// reports that failure as its own, without building the element again.
func TestE2EBuildOnceReusesACachedFailure(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, nil)
	built, fifo := p.scratch("built"), p.scratch("fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// Every build of base.toml counts itself, waits until the test writes the FIFO,
	// and fails.
	p.write("project.toml", projectTOML("app.toml"))
	p.write("elements/base.toml", manualElement(nil, "echo %{element-name} >> "+built, "cat "+fifo, "exit 1"))
	p.write("elements/app.toml", manualElement([]string{"base.toml"}, "true"))

	holder := p.start("build", "--ui", "json", "--sandbox", "host")
	holder.waitEvent("job-start", "build", "base.toml")
	waiter := p.start("build", "--ui", "json", "--sandbox", "host")
	waiter.waitEvent("element-waiting", "build", "base.toml")
	// Opening the FIFO waits for its reader, the holder's build; closing it ends the read.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	for name, g := range map[string]*gantryProc{"holder": holder, "waiter": waiter} {
		if code := g.wait(e2eTimeout); code != 1 {
			t.Errorf("the %s exited with %d, want 1 (base.toml failed)\n%s", name, code, g.output())
		}
	}
	if counts := builtCounts(t, built); counts["base.toml"] != 1 {
		t.Errorf("base.toml was built %d times, want once", counts["base.toml"])
	}
	end, _ := findEvent(waiter.snapshot(), "session-end", "", "")
	if end.Summary == nil || len(end.Summary.Failed) != 1 || end.Summary.Failed[0].Element != "base.toml" {
		t.Fatalf("the waiter's summary: %+v, want base.toml failed\n%s", end.Summary, waiter.output())
	}
	if !strings.Contains(waiter.output(), "failed in another gantry process on this cache") {
		t.Errorf("the waiter does not say whose failure it reports:\n%s", waiter.output())
	}
	if st := p.state("base.toml"); st != "failed" {
		t.Errorf("base.toml is %s, want failed (cached)", st)
	}
}
