package cli

// The log tells what happened in the order it happened: the real gantry binary
// builds a generated project, and its `--ui json` and plain output are read back.

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// logRecord is one line of a session's log about a build job, as the order rules
// see it: "start", "end" (with its result), "slot-done" (JSON only: the job gave its
// builder back), "durable" (JSON only: the job is over, after its end) or "other"
// (any other line about the job: status, log, available).
type logRecord struct {
	what, element, result, line string
}

// layeredProject writes a project of layers × width manual elements: each element
// of a layer depends on two of the layer before. It returns what each depends on.
func layeredProject(p *e2eProject, layers, width int) map[string][]string {
	deps := map[string][]string{}
	var top []string
	for l := range layers {
		for w := range width {
			name := fmt.Sprintf("l%d-%d.toml", l, w)
			var d []string
			if l > 0 {
				d = []string{fmt.Sprintf("l%d-%d.toml", l-1, w), fmt.Sprintf("l%d-%d.toml", l-1, (w+1)%width)}
			}
			deps[name] = d
			p.write("elements/"+name, manualElement(d, fmt.Sprintf("echo %s > %%{install-root}/%s", name, name)))
			if l == layers-1 {
				top = append(top, name)
			}
		}
	}
	p.write("project.toml", projectTOML(top...))
	return deps
}

// checkLogOrder checks the order rules on the build records of one session:
//   - every job has one start, and one end after it, and nothing about it comes
//     before its start or after its end but its durable, at most once;
//   - a build starts only after the SUCCESS (job-end) of the builds of what it
//     depends on;
//   - at a start, at most maxHolding builds hold a builder: those started and
//     neither ended nor past their slot (slot-done).
func checkLogOrder(t *testing.T, what string, recs []logRecord, deps map[string][]string, maxHolding int) {
	t.Helper()
	started, ended, durable := map[string]bool{}, map[string]string{}, map[string]bool{}
	holding := map[string]bool{}
	for _, r := range recs {
		switch {
		case r.what != "start" && !started[r.element]:
			t.Errorf("%s: %s of %s before its start: %s", what, r.what, r.element, r.line)
		case r.what == "durable" && (ended[r.element] != "success" || durable[r.element]):
			t.Errorf("%s: %s durable but not once after its success: %s", what, r.element, r.line)
		case r.what != "end" && r.what != "durable" && ended[r.element] != "":
			t.Errorf("%s: %s of %s after its end: %s", what, r.what, r.element, r.line)
		}
		switch r.what {
		case "start":
			if started[r.element] {
				t.Errorf("%s: %s started twice: %s", what, r.element, r.line)
			}
			started[r.element] = true
			for _, d := range deps[r.element] {
				if ended[d] != "success" {
					t.Errorf("%s: %s started before the SUCCESS of its dependency %s: %s", what, r.element, d, r.line)
				}
			}
			holding[r.element] = true
			if len(holding) > maxHolding {
				t.Errorf("%s: %d builds hold a builder at %s, want at most %d: %s", what, len(holding), r.element, maxHolding, r.line)
			}
		case "slot-done":
			delete(holding, r.element)
		case "durable":
			durable[r.element] = true
		case "end":
			if ended[r.element] != "" {
				t.Errorf("%s: %s ended twice: %s", what, r.element, r.line)
			}
			ended[r.element] = r.result
			delete(holding, r.element)
		}
	}
	for e := range started {
		if ended[e] == "" {
			t.Errorf("%s: %s started and never ended", what, e)
		}
	}
}

// jsonBuildRecords are the build jobs' events of a `--ui json` session.
func jsonBuildRecords(t *testing.T, stderr string) []logRecord {
	t.Helper()
	var recs []logRecord
	for _, e := range jsonLines(t, stderr) {
		if e.Action != "build" || !strings.HasPrefix(e.Event, "job-") {
			continue
		}
		r := logRecord{what: "other", element: e.Element, line: e.Raw}
		switch e.Event {
		case "job-start":
			r.what = "start"
		case "job-end":
			r.what, r.result = "end", e.Result
		case "job-slot-done":
			r.what = "slot-done"
		case "job-durable":
			r.what = "durable"
		}
		recs = append(recs, r)
	}
	return recs
}

// plainLine is a plain output line about a job: [time][key][action:element] VERB.
var plainLine = regexp.MustCompile(`^\[[0-9:]+\]\[[0-9a-f? ]{8}\]\[(\w+):([^\]]+)\]\s+(\S+)`)

// plainBuildRecords are the build jobs' lines of a plain session.
func plainBuildRecords(stderr string) []logRecord {
	var recs []logRecord
	for _, line := range strings.Split(stderr, "\n") {
		m := plainLine.FindStringSubmatch(line)
		if m == nil || m[1] != "build" {
			continue
		}
		r := logRecord{what: "other", element: m[2], line: line}
		switch m[3] {
		case "START":
			r.what = "start"
		case "SUCCESS", "FAILURE", "TERMINATED":
			r.what, r.result = "end", strings.ToLower(m[3])
		}
		recs = append(recs, r)
	}
	return recs
}

// TestE2ELogOrder: a 50-element build with two builders, in JSON and in plain
// output. A build's START (job-start) comes when it holds a builder — never more
// than two hold one; in plain output, where a build that gave its builder back
// while it caches shows no line, never more than four between START and SUCCESS —
// and only after the SUCCESS (job-end) of every build it depends on; each START has
// one end after it, and nothing of a job is shown outside them.
func TestE2ELogOrder(t *testing.T) {
	t.Parallel()
	const builders = 2
	p := newE2EProject(t, nil)
	deps := layeredProject(p, 10, 5)
	args := []string{"build", "--sandbox", "host", "--builders", fmt.Sprint(builders)}

	_, stderr := p.mustRun(0, append(args, "--ui", "json")...)
	recs := jsonBuildRecords(t, stderr)
	if n := countRecords(recs, "start"); n != len(deps) {
		t.Errorf("json: %d build job-starts, want %d", n, len(deps))
	}
	checkLogOrder(t, "json", recs, deps, builders)
	if n := countRecords(recs, "durable"); n != len(deps) {
		t.Errorf("json: %d build job-durables, want %d", n, len(deps))
	}

	if err := os.RemoveAll(p.cache); err != nil {
		t.Fatal(err)
	}
	_, stderr = p.mustRun(0, append(args, "--ui", "plain")...)
	recs = plainBuildRecords(stderr)
	if n := countRecords(recs, "start"); n != len(deps) {
		t.Errorf("plain: %d build STARTs, want %d\n%s", n, len(deps), stderr)
	}
	// Builders hold a builder; at most as many more are in their tails.
	checkLogOrder(t, "plain", recs, deps, 2*builders)
}

func countRecords(recs []logRecord, what string) int {
	n := 0
	for _, r := range recs {
		if r.what == what {
			n++
		}
	}
	return n
}

// TestE2ELogNoStartForJobsThatNeverRan: one builder; f gives it back when its
// command has failed, to x, which holds it until the test lets it go; y waits at
// its gate meanwhile, and f's failure (on-error quit) withdraws it. y never ran: it
// has no START and no TERMINATED, in JSON or plain output, and is listed as not
// started.
func TestE2ELogNoStartForJobsThatNeverRan(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{
		"project.toml":    projectTOML("g.toml", "x.toml", "y.toml"),
		"elements/f.toml": manualElement(nil, "exit 3"),
		"elements/g.toml": manualElement([]string{"f.toml"}, "echo g > %{install-root}/g"),
		"elements/y.toml": manualElement(nil, "echo y > %{install-root}/y"),
	})
	release := p.scratch("release")
	p.write("elements/x.toml", manualElement(nil, fmt.Sprintf("while [ ! -e %s ]; do sleep 0.02; done", release)))
	// run builds until f has failed, then lets x finish; it returns the output.
	run := func(ui string, failed func(e2eEvent) bool) string {
		t.Helper()
		os.Remove(release)
		g := p.start("build", "--sandbox", "host", "--builders", "1", "--on-error", "quit", "--ui", ui)
		g.waitFor("f's failure", func(evs []e2eEvent) bool { return slices.ContainsFunc(evs, failed) })
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if code := g.wait(e2eTimeout); code != 1 {
			t.Errorf("gantry --ui %s exited with %d, want 1\n%s", ui, code, g.output())
		}
		return g.output()
	}

	stderr := run("json", func(e e2eEvent) bool { return e.is("job-end", "build", "f.toml") && e.Result == "failure" })
	evs := jsonLines(t, stderr)
	if _, ok := findEvent(evs, "job-start", "build", "x.toml"); !ok {
		t.Fatalf("json: x never started: f did not give it the builder\n%s", stderr)
	}
	for _, e := range evs {
		if e.Element == "y.toml" && strings.HasPrefix(e.Event, "job-") {
			t.Errorf("json: an event of y's job, which never ran: %s", e.Raw)
		}
	}
	if ns, ok := findEvent(evs, "element-not-started", "", "y.toml"); !ok || ns.Text != "session quit before it started" {
		t.Errorf("json: y's element-not-started %q, want the reason \"session quit before it started\"\n%s", ns.Raw, stderr)
	}

	if err := os.RemoveAll(p.cache); err != nil {
		t.Fatal(err)
	}
	stderr = run("plain", func(e e2eEvent) bool { return strings.Contains(e.Raw, "[build:f.toml] FAILURE") })
	for _, r := range plainBuildRecords(stderr) {
		if r.element == "y.toml" {
			t.Errorf("plain: a line of y's job, which never ran: %s", r.line)
		}
	}
	if !strings.Contains(stderr, "\n  y.toml: session quit before it started\n") {
		t.Errorf("plain: the summary does not list y as not started:\n%s", stderr)
	}
}
