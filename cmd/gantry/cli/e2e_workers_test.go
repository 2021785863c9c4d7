package cli

// End-to-end tests of the job workers: a session starts at most three workers per
// builder (one running a build, one staging the next and waiting at its gate for the
// builder, one making its last artifact durable), not one process per job, and each
// job stays a unit of its own.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/proctest"
)

// jobStartRE is a job log's first line: "[start] build a.toml (job build-3, pid 123)".
var jobStartRE = regexp.MustCompile(`\[start\] (\w+) (\S+) \(job \S+, pid (\d+)\)`)

// jobPids returns, for each build job logged in the project's cache, the pid of the
// process that ran it, by element. A log without its start line yet is left out.
func (p *e2eProject) jobPids() map[string]int {
	p.t.Helper()
	pids := map[string]int{}
	logs, err := filepath.Glob(filepath.Join(p.cache, "logs", "e2e", "*.*-build*.log"))
	if err != nil {
		p.t.Fatal(err)
	}
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			p.t.Fatal(err)
		}
		if m := jobStartRE.FindStringSubmatch(string(b)); m != nil {
			pids[m[2]], _ = strconv.Atoi(m[3])
		}
	}
	return pids
}

// The start-up path: a build of N elements with B builders starts at most 3B job
// processes, not N (a build that made its artifact available gives its builder to
// the next while it makes the artifact durable, in its own worker, and the next
// staged in a worker of its own while it waited for that builder). Each job still
// has its own log, and no worker outlives gantry.
func TestE2EBuildStartsAboutOneWorkerPerBuilder(t *testing.T) {
	t.Parallel()
	const n, builders = 12, 2
	files := map[string]string{"project.toml": projectTOML("all.toml")}
	var deps []string
	for i := range n {
		name := fmt.Sprintf("e%02d.toml", i)
		files["elements/"+name] = manualElement(nil, "true")
		deps = append(deps, name)
	}
	files["elements/all.toml"] = manualElement(deps, "true")
	p := newE2EProject(t, files)
	p.mustRun(0, "build", "--ui", "json", "--sandbox", "host", "--builders", strconv.Itoa(builders))

	pids := p.jobPids()
	if len(pids) != n+1 {
		t.Fatalf("found the logs of %d build jobs, want %d: %v", len(pids), n+1, pids)
	}
	workers := map[int]bool{}
	for _, pid := range pids {
		workers[pid] = true
	}
	if len(workers) > 3*builders {
		t.Errorf("%d build jobs with %d builders ran in %d processes, want at most %d: %v",
			n+1, builders, len(workers), 3*builders, pids)
	}
	for pid := range workers {
		if proctest.Alive(pid) {
			t.Errorf("job worker %d outlived gantry", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// A daemon a job leaves behind is dead before the next job starts, in its worker or
// in another: the job kills what it left before it says its artifact is available,
// which lets its dependant start. The dependant checks.
func TestE2EDaemonDeadBeforeNextJob(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("gantry-worker-daemon-%d", time.Now().UnixNano())
	killMarkedOnCleanup(t, marker)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("second.toml")})
	pidFile := p.scratch("daemon.pid")
	sleeper := "./" + marker
	p.write("elements/first.toml", manualElement(nil, fmt.Sprintf(
		"ln -s \"$(command -v sleep)\" %[1]s; setsid sh -c '%[1]s 300 >/dev/null 2>&1 & echo $! > %[2]s'", sleeper, pidFile)))
	p.write("elements/second.toml", manualElement([]string{"first.toml"}, fmt.Sprintf(
		"pid=$(cat %s); if kill -0 $pid; then echo \"daemon $pid of the last job is alive\"; exit 1; fi", pidFile)))
	p.mustRun(0, "build", "--ui", "json", "--sandbox", "host", "--builders", "1")
}

// A job whose worker crashes fails alone, as a fault of the machine (nothing is
// cached: the next session tries it again), with the crash's trace in its log; the
// next job in that slot runs in a new worker.
func TestE2EWorkerCrashFailsOnlyItsJob(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{
		"project.toml": projectTOML("crash.toml", "ok.toml"),
		// The build's shell is a child of the worker: SIGABRT makes Go's runtime
		// crash the worker with a goroutine dump.
		"elements/crash.toml": manualElement(nil, "kill -ABRT $PPID; sleep 10"),
		"elements/mid.toml":   manualElement(nil, "true"),
		"elements/ok.toml":    manualElement([]string{"mid.toml"}, "true"),
	})
	_, stderr := p.mustRun(1, "build", "--ui", "json", "--sandbox", "host", "--builders", "1", "--on-error", "continue")

	if st := p.state("ok.toml"); st != "cached" {
		t.Errorf("ok.toml is %s after the crash of another job, want cached\n%s", st, stderr)
	}
	if st := p.state("crash.toml"); st == "failed" {
		t.Errorf("crash.toml's crash was cached as its failure; want nothing cached (a machine fault)")
	}
	logs, _ := filepath.Glob(filepath.Join(p.cache, "logs", "e2e", "crash.*-build.log"))
	if len(logs) != 1 {
		t.Fatalf("crash.toml's build logs: %v, want one", logs)
	}
	if b, _ := os.ReadFile(logs[0]); !strings.Contains(string(b), "SIGABRT") {
		t.Errorf("crash.toml's log lacks the worker's crash trace:\n%s", b)
	}
	pids := p.jobPids()
	if pids["ok.toml"] == pids["crash.toml"] {
		t.Errorf("ok.toml ran in the crashed worker %d", pids["crash.toml"])
	}
}

// kill -9 of gantry: its idle job workers die too, not only the busy one.
func TestE2EKill9LeavesNoWorker(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{
		"project.toml":       projectTOML("long.toml"),
		"elements/a.toml":    manualElement(nil, "true"),
		"elements/b.toml":    manualElement(nil, "true"),
		"elements/long.toml": manualElement([]string{"a.toml", "b.toml"}, "sleep 300"),
	})
	g := p.start("build", "--ui", "json", "--sandbox", "host", "--builders", "2")
	g.waitEvent("job-start", "build", "long.toml")
	var pids map[string]int
	eventually(t, e2eTimeout, "three build jobs have started", func() bool { pids = p.jobPids(); return len(pids) == 3 })
	g.signal(syscall.SIGKILL)
	g.wait(e2eTimeout)
	for element, pid := range pids {
		eventually(t, 10*time.Second, fmt.Sprintf("the worker %d that built %s is gone", pid, element), func() bool { return !proctest.Alive(pid) })
	}
}

// Ctrl-Z stops the jobs, not the workers idle at the time: those are no job's.
func TestE2ESuspendLeavesIdleWorkerRunning(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{
		"project.toml":        projectTOML("quick.toml", "tick.toml"),
		"elements/quick.toml": manualElement(nil, "true"),
	})
	ticks := p.scratch("ticks")
	p.write("elements/tick.toml", manualElement(nil, fmt.Sprintf("while :; do echo x >> %s; sleep 0.05; done", ticks)))
	g := p.start("build", "--ui", "json", "--sandbox", "host", "--builders", "2")
	g.waitEvent("job-end", "build", "quick.toml")
	// Its JobEnd comes when its artifact is available; its worker is idle once the
	// job has made it durable and ended, as its log's last line says.
	eventually(t, e2eTimeout, "quick.toml's job has ended", func() bool {
		logs, _ := filepath.Glob(filepath.Join(p.cache, "logs", "e2e", "quick.*-build.log"))
		if len(logs) != 1 {
			return false
		}
		b, err := os.ReadFile(logs[0])
		return err == nil && strings.Contains(string(b), "[success]")
	})
	var pids map[string]int
	eventually(t, e2eTimeout, "both build jobs have started", func() bool { pids = p.jobPids(); return len(pids) == 2 })
	idle, busy := pids["quick.toml"], pids["tick.toml"]
	if idle == busy {
		t.Fatalf("quick.toml and tick.toml ran in one worker %d; want two", idle)
	}
	killGroupOnCleanup(t, busy)
	waitGrowth(t, ticks, 0)

	g.signal(syscall.SIGTSTP)
	eventually(t, e2eTimeout, "gantry is stopped (state T)", func() bool {
		pi, ok := proctest.Read(g.pid())
		return ok && pi.State == 'T'
	})
	waitGroupStopped(t, busy) // the busy worker's group: the worker and tick.toml's build
	if pi, ok := proctest.Read(idle); !ok || pi.State == 'T' {
		t.Errorf("the idle worker %d is stopped (state %c) by a suspend of the session's jobs", idle, pi.State)
	}
	g.signal(syscall.SIGCONT)
	waitGrowth(t, ticks, fileSize(ticks))
	g.signal(syscall.SIGTERM)
	if code := g.wait(e2eTimeout); code != exitTerminated {
		t.Fatalf("gantry exited with %d after SIGTERM, want %d\n%s", code, exitTerminated, g.output())
	}
}

// A worker's next build works in the directories its last one left, emptied (the same
// build root, by inode): nothing the last job built, staged or changed reaches it —
// a work directory whose mode a command changed is not used again — and the session
// leaves nothing in tmp/. A chain of five builds with one builder runs in at most two
// workers (see above), so at least three builds follow another in the same worker.
func TestE2EWorkerKeepsItsWorkDirectoryEmptied(t *testing.T) {
	t.Parallel()
	chain := []string{"a.toml", "b.toml", "c.toml", "d.toml", "e.toml"}
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("e.toml")})
	ino := func(name string) string {
		return fmt.Sprintf("stat -c %%i . > %s; if [ -n \"$(ls -A .)$(ls -A %%{install-root})\" ]; then echo left: $(ls -A . %%{install-root}); exit 1; fi",
			p.scratch(name))
	}
	for i, name := range chain {
		var deps []string
		if i > 0 {
			deps = []string{chain[i-1]}
		}
		cmds := []string{ino(name), `test "$(stat -c %a %{install-root})" = 755`,
			"echo x > junk && mkdir -p %{install-root}/sub && echo y > %{install-root}/sub/f"}
		if name == "b.toml" { // what b's worker must not use again
			cmds = append(cmds, "chmod 0777 %{install-root}")
		}
		p.write("elements/"+name, manualElement(deps, cmds...))
	}
	_, stderr := p.mustRun(0, "build", "--ui", "json", "--sandbox", "host", "--builders", "1")

	read := func(name string) string {
		b, err := os.ReadFile(p.scratch(name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	pids := p.jobPids()
	last := map[int]string{} // by worker: the last build it ran so far (the chain is built in order)
	reused := 0
	for _, name := range chain {
		pid := pids[name]
		if prev, ok := last[pid]; ok {
			// After b a fresh directory (checked by the next build's own command:
			// mode 755), which may get the inode number just freed.
			if prev != "b.toml" {
				if read(prev) != read(name) {
					t.Errorf("%s's build root is inode %s, %s's was %s in the same worker: the worker made its work directory again",
						name, read(name), prev, read(prev))
				}
				reused++
			}
		}
		last[pid] = name
	}
	if reused == 0 {
		t.Errorf("no build followed another (but b) in the same worker: workers %v\n%s", pids, stderr)
	}
	if left, _ := os.ReadDir(filepath.Join(p.cache, "tmp")); len(left) > 0 {
		t.Errorf("tmp/ holds %d entries after the session, want none: %v", len(left), left)
	}
}

// A worker that dies idle, just as a job is handed to it (the OOM killer, say), fails
// nothing: it had not started the job, so the job runs in a new worker, once, and the
// element is built once and cached. The idle worker is stopped so that it cannot read
// the job it is given, and killed once it has been given one.
func TestE2EIdleWorkerDeathHandsItsJobOver(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("b1.toml", "b2.toml")})
	// Long enough that both are running at once: one in c's worker, one in a's.
	g, idle := p.buildWithStoppedIdleWorker(t, func(b string) []string {
		return []string{fmt.Sprintf("echo built >> %s", p.scratch(b+".count")), "sleep 0.3"}
	})
	if err := syscall.Kill(idle, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := g.wait(e2eTimeout); code != 0 {
		t.Fatalf("gantry exited with %d after an idle worker died, want 0\n%s", code, g.output())
	}
	read := func(path string) string { b, _ := os.ReadFile(path); return string(b) }
	handedOver := 0
	for _, b := range []string{"b1", "b2"} {
		if n := strings.Count(read(p.scratch(b+".count")), "built"); n != 1 {
			t.Errorf("%s was built %d times, want once", b, n)
		}
		if st := p.state(b + ".toml"); st != "cached" {
			t.Errorf("%s.toml is %s, want cached", b, st)
		}
		logs, _ := filepath.Glob(filepath.Join(p.cache, "logs", "e2e", b+".*-build.log"))
		for _, l := range logs {
			if strings.Contains(read(l), fmt.Sprintf("[worker] pid %d exited before it started job", idle)) {
				handedOver++
			}
		}
	}
	if handedOver != 1 {
		t.Errorf("%d build logs say the job went to a new worker after worker %d died, want 1\n%s", handedOver, idle, g.output())
	}
}

// kill -9 of gantry just after a build said its artifact is available (its dependant
// started; its ref may not be written yet): the cache verifies clean — a ref is never
// written before the blobs it names are durable — and the next session builds what
// has no ref, and only that.
func TestE2EKill9AfterAvailableLeavesCacheClean(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("b.toml")})
	goFile := p.scratch("go")
	p.write("elements/a.toml", manualElement(nil, "echo a > %{install-root}/a"))
	p.write("elements/b.toml", manualElement([]string{"a.toml"},
		fmt.Sprintf("while [ ! -f %s ]; do sleep 0.05; done", goFile), "cp %{sysroot}/a %{install-root}/b"))
	g := p.start("build", "--ui", "json", "--sandbox", "host", "--builders", "1")
	g.waitEvent("job-available", "build", "a.toml")
	g.signal(syscall.SIGKILL)
	g.wait(e2eTimeout)
	// a's worker may still write a's ref after gantry died (its artifact is whole):
	// the cache is looked at once every worker of the session is gone.
	home := "HOME=" + filepath.Join(filepath.Dir(p.root), "home") + "\x00"
	eventually(t, e2eTimeout, "the session's workers are gone", func() bool { return len(processesWith("environ", home)) == 0 })

	rep := p.verifyCache() // fails the test unless clean
	if rep.Refs > 1 {
		t.Errorf("cache has %d refs after the kill, want a's at most", rep.Refs)
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr := p.mustRun(0, "build", "--ui", "json", "--sandbox", "host", "--builders", "1")
	_, rebuiltA := findEvent(parseEvents(stderr), "job-start", "build", "a.toml")
	if rebuiltA != (rep.Refs == 0) {
		t.Errorf("the next session built a again: %v; a's ref was written before the kill: %v", rebuiltA, rep.Refs == 1)
	}
	if rep := p.verifyCache(); rep.Refs != 2 {
		t.Errorf("cache has %d refs after the rebuild, want 2", rep.Refs)
	}
}

// Ctrl-C as a job is handed to a worker that has not read it yet ends the session at
// once and runs nothing of that job: the job does not wait out the grace period, and
// none of the element's commands runs. The idle worker is stopped so that it cannot
// read the job it is given before the interrupt, and continued after it.
func TestE2EInterruptBeforeWorkerStartsJob(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("b1.toml", "b2.toml")})
	g, idle := p.buildWithStoppedIdleWorker(t, func(b string) []string {
		return []string{fmt.Sprintf("echo ran >> %s", p.scratch(b+".ran")), "sleep 30"}
	})
	running, waiting := "", ""
	eventually(t, e2eTimeout, "one b's command runs", func() bool {
		_, err1 := os.Stat(p.scratch("b1.ran"))
		_, err2 := os.Stat(p.scratch("b2.ran"))
		switch {
		case err1 == nil && err2 != nil:
			running, waiting = "b1", "b2"
		case err2 == nil && err1 != nil:
			running, waiting = "b2", "b1"
		}
		return running != ""
	})
	busy := p.jobPids()[running+".toml"]
	killGroupOnCleanup(t, busy)

	g.signal(syscall.SIGINT)
	// The loop terminates every job at once: once the running one has ended, the
	// waiting one was terminated too.
	g.waitEvent("job-end", "build", running+".toml")
	if err := syscall.Kill(idle, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Well before the 5s grace after which the job would be killed.
	if code := g.wait(4 * time.Second); code != exitInterrupted {
		t.Fatalf("gantry exited with %d after SIGINT, want %d\n%s", code, exitInterrupted, g.output())
	}
	if _, err := os.Stat(p.scratch(waiting + ".ran")); err == nil {
		t.Errorf("%s's command ran after the interrupt that terminated its job\n%s", waiting, g.output())
	}
	// Its worker never began it: it never ran, and no display says it started or was
	// terminated; it did not start.
	for _, e := range g.snapshot() {
		if e.Element == waiting+".toml" && strings.HasPrefix(e.Event, "job-") {
			t.Errorf("an event of %s's job, which never ran: %s", waiting, e.Raw)
		}
	}
	if ns, ok := findEvent(g.snapshot(), "element-not-started", "", waiting+".toml"); !ok || ns.Text != "session terminated" {
		t.Errorf("element-not-started of %s.toml %q, want the reason \"session terminated\"\n%s", waiting, ns.Raw, g.output())
	}
	eventually(t, e2eTimeout, fmt.Sprintf("worker %d is gone", idle), func() bool { return !proctest.Alive(idle) })
	eventually(t, e2eTimeout, fmt.Sprintf("%s's job group %d is gone", running, busy), func() bool { return len(proctest.Group(busy)) == 0 })
	assertNotBuilt(t, p, waiting+".toml")
}

// buildWithStoppedIdleWorker starts a build of b1 and b2 (commands: bCommands(name)),
// which depend on a and on c, c waiting until a's worker is idle and stopped: b1 and b2
// then start together, one in c's worker, the other handed to a's stopped worker, which
// cannot read it until continued. It returns the session and that worker's pid (killed
// when the test ends).
func (p *e2eProject) buildWithStoppedIdleWorker(t *testing.T, bCommands func(b string) []string) (*gantryProc, int) {
	t.Helper()
	release := p.scratch("release")
	p.write("elements/a.toml", manualElement(nil, "true"))
	p.write("elements/c.toml", manualElement(nil, fmt.Sprintf("while [ ! -e %s ]; do sleep 0.02; done", release)))
	for _, b := range []string{"b1", "b2"} {
		p.write("elements/"+b+".toml", manualElement([]string{"a.toml", "c.toml"}, bCommands(b)...))
	}
	g := p.start("build", "--ui", "json", "--sandbox", "host", "--builders", "2")
	g.waitEvent("job-durable", "build", "a.toml") // its job is over: its worker idle
	idle := p.jobPids()["a.toml"]
	if idle == 0 {
		t.Fatalf("a.toml's build log names no worker\n%s", g.output())
	}
	if err := syscall.Kill(idle, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(idle, syscall.SIGKILL) })
	// Stopped only once seen so: until a thread of it takes the signal, another
	// could read the job it is given.
	eventually(t, e2eTimeout, fmt.Sprintf("worker %d is stopped", idle), func() bool {
		pi, ok := proctest.Read(idle)
		return ok && pi.State == 'T'
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// c's worker, idle last, takes one of them, a's stopped worker the other.
	// The one in c's worker begins (job-start); the one handed to the stopped worker
	// cannot: its log file, made as it is handed over, says it was.
	g.waitFor("b1 or b2 begun", func(evs []e2eEvent) bool {
		return slices.ContainsFunc(evs, func(e e2eEvent) bool {
			return e.is("job-start", "build", "b1.toml") || e.is("job-start", "build", "b2.toml")
		})
	})
	eventually(t, e2eTimeout, "both b's jobs handed to workers (their logs made)", func() bool {
		for _, b := range []string{"b1", "b2"} {
			if logs, _ := filepath.Glob(filepath.Join(p.cache, "logs", "e2e", b+".*-build.log")); len(logs) == 0 {
				return false
			}
		}
		return true
	})
	return g, idle
}

// A build that becomes ready while the only builder is busy starts gated: its job
// stages and waits at its gate (its log says so), and its commands run only once the
// builder is free. JSON shows it only then: its job-start, "gated", comes when its
// gate opens, after a gave the builder back.
func TestE2EGatedBuildStagesWhileTheBuilderIsBusy(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("a.toml", "b.toml")})
	release, ran := p.scratch("release"), p.scratch("b.ran")
	p.write("elements/a.toml", manualElement(nil, fmt.Sprintf("while [ ! -e %s ]; do sleep 0.02; done", release)))
	p.write("elements/b.toml", manualElement(nil, "echo ran > "+ran))
	g := p.start("build", "--ui", "json", "--sandbox", "host", "--builders", "1")
	bLog := func() string {
		logs, _ := filepath.Glob(filepath.Join(p.cache, "logs", "e2e", "b.*-build.log"))
		if len(logs) != 1 {
			return ""
		}
		b, _ := os.ReadFile(logs[0])
		return string(b)
	}
	eventually(t, e2eTimeout, "b's log says it waits at its gate", func() bool {
		return strings.Contains(bLog(), "[gate] staged, waiting for a builder")
	})
	if _, err := os.Stat(ran); err == nil {
		t.Fatalf("b's command ran while a held the only builder\n%s", g.output())
	}
	if start, started := findEvent(g.snapshot(), "job-start", "build", "b.toml"); started {
		t.Fatalf("b's job-start %s came while a held the only builder\n%s", start.Raw, g.output())
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := g.wait(e2eTimeout); code != 0 {
		t.Fatalf("gantry exited with %d\n%s", code, g.output())
	}
	if _, err := os.Stat(ran); err != nil {
		t.Errorf("b's command did not run: %v", err)
	}
	// a gives its builder back when its commands have ended (before its job ends).
	freed, opened := -1, -1
	for i, e := range g.snapshot() {
		switch {
		case freed < 0 && (e.is("job-slot-done", "build", "a.toml") || e.is("job-available", "build", "a.toml") || e.is("job-end", "build", "a.toml")):
			freed = i
		case e.is("job-start", "build", "b.toml"):
			opened = i
			if !strings.Contains(e.Raw, `"gated":true`) {
				t.Errorf("b's job-start %s does not say it waited at its gate", e.Raw)
			}
		}
	}
	if freed < 0 || opened < freed {
		t.Errorf("b's job-start is event %d, a gave its builder back at event %d\n%s", opened, freed, g.output())
	}
	if log := bLog(); !strings.Contains(log, "[gate] opened after") {
		t.Errorf("b's log does not say when its gate opened:\n%s", log)
	}
}
