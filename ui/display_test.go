package ui

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/queues"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

const key = "1a2b3c4d5e6f00000000000000000000000000000000000000000000000000ff"

func session(logPath string) []queues.Event {
	return []queues.Event{
		queues.SessionStart{Base: queues.Base{Time: t0}, Project: "demo", Queues: []queues.Action{queues.Fetch, queues.Build}, Elements: 2, NameLen: len("top.toml")},
		queues.JobStart{Base: queues.Base{Time: t0}, JobID: "build-1", Action: queues.Build, Element: "app.toml", Key: key, LogPath: logPath, Attempt: 1},
		queues.JobMessage{Base: queues.Base{Time: t0.Add(time.Second)}, JobID: "build-1", Action: queues.Build, Element: "app.toml", Key: key, Kind: "status", Text: "build: make"},
		queues.JobEnd{Base: queues.Base{Time: t0.Add(3 * time.Second)}, JobID: "build-1", Action: queues.Build, Element: "app.toml", Key: key,
			Result: queues.ResultFailure, Error: "build-commands: `make` exited with status 2", Duration: 3 * time.Second, LogPath: logPath},
		queues.SessionEnd{Base: queues.Base{Time: t0.Add(4 * time.Second)}, Summary: &queues.Summary{
			Project: "demo", Elapsed: 4 * time.Second,
			Queues:     []queues.QueueStats{{Action: queues.Fetch, Skipped: 2}, {Action: queues.Build, Failed: 1}},
			Failed:     []queues.FailedElement{{Element: "app.toml", Action: queues.Build, Error: "build-commands: `make` exited with status 2", LogPath: logPath}},
			NotStarted: []queues.NotStarted{{Element: "top.toml", Reason: "dependency app.toml failed"}},
		}},
	}
}

func writeLog(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "app.log")
	var lines []string
	for i := 1; i <= 30; i++ {
		lines = append(lines, "line "+string(rune('a'+i%26)))
	}
	lines = append(lines, "make: *** [all] Error 2")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlainLinesHaveBuildStreamShape(t *testing.T) {
	log := writeLog(t)
	var out bytes.Buffer
	d := NewPlain(&out, Options{ErrorLines: 5})
	for _, e := range session(log) {
		d.Handle(e)
	}
	got := out.String()
	wantContains(t, "plain output", got,
		"[00:00:00][        ][session]        START    demo: 2 elements, queues fetch → build\n",
		"[00:00:00][1a2b3c4d][build:app.toml] START    "+log,
		"[00:00:03][1a2b3c4d][build:app.toml] FAILURE  build-commands: `make` exited with status 2",
		"    make: *** [all] Error 2\n",
		"(full log: "+log+")",
		"  build: processed 0, skipped 0, failed 1",
		"  app.toml (build): build-commands",
		"  top.toml: dependency app.toml failed")
	if strings.Contains(got, "\x1b[") || strings.Contains(got, "--:--") {
		t.Error("plain output contains escape codes or placeholders")
	}
	if strings.Contains(got, "STATUS") {
		t.Error("status lines shown without --verbose")
	}
	if n := strings.Count(got, "    line "); n != 4 {
		t.Errorf("want the last 5 log lines (4 'line' + the error), got %d 'line' lines", n)
	}
}

func TestPlainVerboseShowsStatus(t *testing.T) {
	var out bytes.Buffer
	d := NewPlain(&out, Options{Verbose: true})
	for _, e := range session("") {
		d.Handle(e)
	}
	if !strings.Contains(out.String(), "[00:00:01][1a2b3c4d][build:app.toml] STATUS   build: make") {
		t.Errorf("verbose status line missing:\n%s", out.String())
	}
}

func TestJSONEventsAreOneObjectPerLine(t *testing.T) {
	var out bytes.Buffer
	d := NewJSON(&out, Options{})
	for _, e := range session("/logs/app.log") {
		d.Handle(e)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("want 6 JSON lines, got %d:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("not one JSON object: %s", l)
		}
	}
	if want := `"event":"element-not-started","element":"top.toml","text":"dependency app.toml failed"`; !strings.Contains(lines[4], want) {
		t.Errorf("line 5 = %s, want the never-started element's event (%s)", lines[4], want)
	}
	var end map[string]any
	if err := json.Unmarshal([]byte(lines[3]), &end); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"event": "job-end", "action": "build", "element": "app.toml", "result": "failure", "duration": 3.0, "log": "/logs/app.log", "key": key} {
		if end[k] != v {
			t.Errorf("job-end %s = %v, want %v", k, end[k], v)
		}
	}
	var last struct {
		Event   string
		Summary struct {
			OK         bool
			Queues     []map[string]any
			NotStarted []map[string]any `json:"not-started"`
		}
	}
	if err := json.Unmarshal([]byte(lines[5]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Event != "session-end" || last.Summary.OK || len(last.Summary.Queues) != 2 || len(last.Summary.NotStarted) != 1 {
		t.Errorf("bad session-end: %s", lines[5])
	}
}

// Durations are seconds to the millisecond: 5.048, not 5.0475346739999996.
func TestJSONDurationsHaveMillisecondPrecision(t *testing.T) {
	var out bytes.Buffer
	d := NewJSON(&out, Options{})
	d.Handle(queues.JobEnd{Base: queues.Base{Time: t0}, Action: queues.Build, Element: "app.toml", Result: queues.ResultSuccess,
		Duration: 5047534673 * time.Nanosecond})
	if want := `"duration":5.048}`; !strings.Contains(out.String(), want) {
		t.Errorf("job-end = %s, want %s", out.String(), want)
	}
}

// An element waiting for another builder shows in every display, and so does the
// end of its wait without --verbose; other skips stay quiet.
func TestDisplaysShowAWaitForAnotherBuilder(t *testing.T) {
	reason := "waiting for another builder of lib.toml (its build lock is held by another gantry process on the cache /c)"
	events := []queues.Event{
		queues.SessionStart{Base: queues.Base{Time: t0}, Project: "demo", Queues: []queues.Action{queues.Build}, Elements: 2, NameLen: len("lib.toml")},
		queues.ElementWaiting{Base: queues.Base{Time: t0.Add(time.Second)}, Action: queues.Build, Element: "lib.toml", Key: key, Reason: reason},
		queues.ElementSkipped{Base: queues.Base{Time: t0.Add(2 * time.Second)}, Action: queues.Build, Element: "lib.toml", Key: key,
			Reason: "built by another gantry process on this cache: reused", Waited: true},
		queues.ElementSkipped{Base: queues.Base{Time: t0.Add(2 * time.Second)}, Action: queues.Build, Element: "app.toml", Key: key, Reason: "cached"},
	}
	var plain, js bytes.Buffer
	p, j := NewPlain(&plain, Options{}), NewJSON(&js, Options{})
	h := &history{}
	var tui []string
	for _, e := range events {
		p.Handle(e)
		j.Handle(e)
		if line := h.text(e); line != "" {
			tui = append(tui, line)
		}
	}
	wantContains(t, "plain output", plain.String(),
		"[00:00:01][1a2b3c4d][build:lib.toml] WAITING  "+reason+"\n",
		"[00:00:02][1a2b3c4d][build:lib.toml] SKIPPED  built by another gantry process on this cache: reused\n")
	wantContains(t, "tui history", strings.Join(tui, "\n"), "build  lib.toml  waiting  "+reason, "lib.toml  skipped  built by another")
	wantContains(t, "json", js.String(), `"event":"element-waiting","action":"build","element":"lib.toml"`)
	if strings.Contains(plain.String()+strings.Join(tui, "\n"), "app.toml") {
		t.Errorf("a plain skip is shown without --verbose:\n%s\n%s", plain.String(), strings.Join(tui, "\n"))
	}
}

// A cleanup that kept artifacts other running sessions need says how many and how
// much, in plain and JSON output alike.
func TestCleanupSaysWhatItKeptForOtherSessions(t *testing.T) {
	e := queues.CacheCleanup{Base: queues.Base{Time: t0}, Quota: 4 << 20, CleanupResult: queues.CleanupResult{
		Before: 5 << 20, After: 3 << 20, Freed: 2 << 20, Artifacts: 4, Duration: time.Second, Live: 3, LiveBytes: 1 << 20}}
	var plain, js bytes.Buffer
	NewPlain(&plain, Options{}).Handle(e)
	NewJSON(&js, Options{}).Handle(e)
	wantContains(t, "plain output", plain.String(), "kept 3 artifacts (1.0 MiB) other running sessions need")
	wantContains(t, "json", js.String(), `"live":3,"live-bytes":1048576`)
}

// The ETA is what the scheduler estimated from learned build times, counted down;
// no guess when it does not know (Remaining 0: an element never built before is
// left), when the countdown has run out while builds go on, or when all is done.
func TestETATextSaysNothingRatherThanGuess(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     queues.Counts
		since time.Duration
		want  string
	}{
		{"learned", queues.Counts{Done: 1, Total: 4, Remaining: 90 * time.Second}, 0, "~1m30s left"},
		{"counted down", queues.Counts{Done: 1, Total: 4, Remaining: 90 * time.Second}, 30 * time.Second, "~1m0s left"},
		{"unknown at the start", queues.Counts{Done: 0, Total: 4}, 47 * time.Second, ""},
		{"estimate run out", queues.Counts{Done: 0, Total: 4, Remaining: 6 * time.Second}, 47 * time.Second, ""},
		{"under a second left", queues.Counts{Done: 3, Total: 4, Remaining: 2 * time.Second}, 1500 * time.Millisecond, ""},
		{"all done", queues.Counts{Done: 4, Total: 4, Remaining: time.Minute}, 0, ""},
	} {
		if got := etaText(tc.c, tc.since); got != tc.want {
			t.Errorf("%s: etaText(%+v, %v) = %q, want %q", tc.name, tc.c, tc.since, got, tc.want)
		}
	}
}

// A failed job's excerpt shows the last lines of the commands, the failing one's
// last, and never gantry's internal markers nor the log's header with the build
// environment's env lines.
func TestFailureExcerptShowsTheFailingCommand(t *testing.T) {
	log := filepath.Join(t.TempDir(), "build.log")
	text := `[10:00:00.000] [start] build bad.toml (job build-1, pid 1)
[10:00:00.000] element: bad.toml, key: 6f77, project: demo
[10:00:00.000] env: HOME=/tmp/home
[10:00:00.000] env: TZ=UTC
[10:00:00.001] [gate] opened after 1ms
[10:00:00.001] [status] build: echo one
[10:00:00.001] + echo one
[10:00:00.001] one
[10:00:00.002] [status] build: make
[10:00:00.002] + make
[10:00:00.003] cc -c a.c
[10:00:00.003] a.c:1: error
[10:00:00.004] [slot done]
[10:00:00.004] error: build-commands: command failed with exit code 2: make
`
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "    [status] build: echo one\n    + echo one\n    one\n    [status] build: make\n    + make\n    cc -c a.c\n    a.c:1: error\n    error: build-commands: command failed with exit code 2: make\n    (full log: " + log + ")\n"
	if got := logExcerpt(log, 20); got != want {
		t.Errorf("excerpt:\n%s\nwant:\n%s", got, want)
	}
	want = "    a.c:1: error\n    error: build-commands: command failed with exit code 2: make\n    (full log: " + log + ")\n"
	if got := logExcerpt(log, 2); got != want {
		t.Errorf("excerpt of 2 lines:\n%s\nwant:\n%s", got, want)
	}
	// Without a command: the last lines, but the environment and the markers.
	if err := os.WriteFile(log, []byte("[start] fetch\nenv: A=1\n[available]\nfetching failed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want = "    [start] fetch\n    fetching failed\n    (full log: " + log + ")\n"
	if got := logExcerpt(log, 20); got != want {
		t.Errorf("excerpt without a command:\n%s\nwant:\n%s", got, want)
	}
}

// For a CI, plain output folds each failed job's excerpt into a group and ends with one
// ::error line per failed element, its message and properties escaped as GitHub
// Actions' workflow commands need.
func TestPlainCIAnnotations(t *testing.T) {
	log := writeLog(t)
	var out bytes.Buffer
	d := NewPlain(&out, Options{ErrorLines: 5, CI: &CIAnnotations{File: func(e string) string { return "proj/elements/" + e }}})
	for _, e := range session(log) {
		if end, ok := e.(queues.SessionEnd); ok {
			end.Summary.Failed = append(end.Summary.Failed, queues.FailedElement{Element: "a,b:c.toml", Action: queues.Build, Error: "line one\nline 100%", Cached: true})
		}
		d.Handle(e)
	}
	got := out.String()
	wantContains(t, "plain output for a CI", got,
		"FAILURE  build-commands: `make` exited with status 2\n::group::build of app.toml failed: its log\n",
		"    make: *** [all] Error 2\n    (full log: "+log+")\n::endgroup::\n",
		"\n::error file=proj/elements/app.toml,title=build of app.toml failed::build-commands: `make` exited with status 2",
		"\n::error file=proj/elements/a%2Cb%3Ac.toml,title=build of a%2Cb%3Ac.toml failed::line one%0Aline 100%25\n")
	if n := strings.Count(got, "::error "); n != 2 {
		t.Errorf("%d ::error lines, want 2:\n%s", n, got)
	}
	// Without CI, none of it.
	out.Reset()
	d = NewPlain(&out, Options{ErrorLines: 5})
	for _, e := range session(log) {
		d.Handle(e)
	}
	if strings.Contains(out.String(), "::") {
		t.Errorf("plain output without CI has workflow commands:\n%s", out.String())
	}
}

// The summary says how long the session was suspended, beside its elapsed time
// (which, like the critical path, leaves it out); nothing when it was not.
func TestSummarySaysSuspendedTime(t *testing.T) {
	var out bytes.Buffer
	writeSummary(&out, &queues.Summary{Project: "demo", Elapsed: 35 * time.Second, Suspended: 6 * time.Second})
	if got := out.String(); !strings.HasPrefix(got, "\nSession summary: demo, 35s (suspended 6s, not counted)\n") {
		t.Errorf("summary:\n%s", got)
	}
	out.Reset()
	writeSummary(&out, &queues.Summary{Project: "demo", Elapsed: 35 * time.Second})
	if got := out.String(); !strings.HasPrefix(got, "\nSession summary: demo, 35s\n") {
		t.Errorf("summary of a session never suspended:\n%s", got)
	}
}

// Durations are written exactly to the millisecond: 1.118, not 1.1179999999999999
// (Duration.Seconds adds two floats), in job-end, the summary and its critical path.
func TestJSONDurationsAreExactMilliseconds(t *testing.T) {
	var out bytes.Buffer
	d := NewJSON(&out, Options{})
	d.Handle(queues.JobEnd{Base: queues.Base{Time: t0}, Action: queues.Build, Element: "app.toml", Result: queues.ResultSuccess,
		Duration: 1118 * time.Millisecond})
	d.Handle(queues.SessionEnd{Base: queues.Base{Time: t0}, Summary: &queues.Summary{Elapsed: 1122 * time.Millisecond,
		CriticalPath: []queues.PathLink{{Action: queues.Build, Element: "app.toml", Duration: 1128 * time.Millisecond, Wait: 1136 * time.Millisecond}}}})
	wantContains(t, "json", out.String(), `"duration":1.118`, `"elapsed":1.122`, `"duration":1.128,"wait":1.136`)
}

// A job that was skipped or waits says why under "reason": it is not an error.
func TestJSONSkipAndWaitReasonsAreNotErrors(t *testing.T) {
	var out bytes.Buffer
	d := NewJSON(&out, Options{})
	d.Handle(queues.JobEnd{Base: queues.Base{Time: t0}, Action: queues.Push, Element: "app.toml", Result: queues.ResultSkipped, Error: "the remotes have it already"})
	d.Handle(queues.JobEnd{Base: queues.Base{Time: t0}, Action: queues.Pull, Element: "app.toml", Result: queues.ResultWaiting, Error: "waiting for another builder"})
	d.Handle(queues.JobEnd{Base: queues.Base{Time: t0}, Action: queues.Build, Element: "app.toml", Result: queues.ResultFailure, Error: "exit status 1"})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	wantContains(t, "skipped job-end", lines[0], `"reason":"the remotes have it already"`)
	wantContains(t, "waiting job-end", lines[1], `"reason":"waiting for another builder"`)
	wantContains(t, "failed job-end", lines[2], `"error":"exit status 1"`)
	for _, l := range lines[:2] {
		if strings.Contains(l, `"error"`) {
			t.Errorf("a skip or a wait has an error member: %s", l)
		}
	}
}

// Every JSON line carries the format's schema version, events, notices and errors
// written outside a session alike.
func TestJSONEventsCarryTheSchemaVersion(t *testing.T) {
	var out bytes.Buffer
	d := NewJSON(&out, Options{})
	for _, e := range session("/logs/app.log") {
		d.Handle(e)
	}
	WriteJSONNotice(&out, "warning", "w")
	WriteJSONError(&out, "e", 2)
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.HasPrefix(l, `{"schema":2,`) {
			t.Errorf("a line without the schema version first: %s", l)
		}
	}
}
