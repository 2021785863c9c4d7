package ui

import (
	"encoding/json"
	"io"
	"time"

	"github.com/gantry-build/gantry/queues"
)

// JSON writes one JSON object per event and line, for CI tools. Every object has
// "schema" (JSONSchema), "time" (RFC 3339) and "event"; job events carry "action",
// "element", "key" and "job"; job-end carries "result" (success, failure, terminated,
// skipped, waiting), "duration" in seconds to the millisecond (exactly: 1.118, never
// 1.1179999999999999), "error" when it failed and "reason" when it was skipped or
// waits; each element the session never started
// has an "element-not-started" event with the reason in "text". A job-start comes
// when the job holds its builder and runs: a build that staged while the builders
// were busy has "gated": true in it. A build's job-end comes when its artifact is
// available, before any job-start of what stages it, and a job-durable when its
// artifact is committed (its ref written and synced) and its job is over; nothing
// else of a job comes before its job-start or after its job-end (docs/usage.md,
// "What the log guarantees"). An element
// that waits for another gantry process's build of it on the same cache has an
// "element-waiting" event, what it waits for in "text"; its end is the
// element-skipped (reused) or the failure that follows. Under --ui json everything gantry writes to stderr is such
// a line: messages outside a session are "notice" events, and a command that fails
// outside a session's summary (a load error, an interruption) ends with an "error"
// event carrying "text" and "exit-code".
type JSON struct {
	enc  *json.Encoder
	opts Options
}

// JSONSchema is the version of the JSON events' format, in every event's "schema"; it
// changes when a member changes meaning or moves (docs/usage.md lists the versions).
//   - 1 (no "schema" member): job-end's skip or wait reason was in "error".
//   - 2: "schema"; job-end's skip or wait reason is in "reason"; durations are exact
//     to the millisecond; a warning that marks a push remote down names it in
//     "remote-down".
const JSONSchema = 2

// NewJSON returns a JSON-lines display writing to w.
func NewJSON(w io.Writer, opts Options) *JSON { return &JSON{enc: json.NewEncoder(w), opts: opts} }

type jsonEvent struct {
	Schema   int             `json:"schema"` // JSONSchema
	Time     time.Time       `json:"time"`
	Event    string          `json:"event"`
	Action   queues.Action   `json:"action,omitempty"`
	Element  string          `json:"element,omitempty"`
	Key      string          `json:"key,omitempty"`
	Job      string          `json:"job,omitempty"`
	Attempt  int             `json:"attempt,omitempty"`
	Result   string          `json:"result,omitempty"`
	Duration *float64        `json:"duration,omitempty"`
	Error    string          `json:"error,omitempty"`
	Reason   string          `json:"reason,omitempty"` // job-end: why it was skipped, what it waits for
	Log      string          `json:"log,omitempty"`
	Text     string          `json:"text,omitempty"`
	Level    string          `json:"level,omitempty"`
	Done     int64           `json:"done,omitempty"`
	Total    int64           `json:"total,omitempty"`
	Retry    bool            `json:"will-retry,omitempty"`
	Project  string          `json:"project,omitempty"`
	Elements int             `json:"elements,omitempty"`
	Queues   []queues.Action `json:"queues,omitempty"`
	Summary  *jsonSummary    `json:"summary,omitempty"`
	ExitCode *int            `json:"exit-code,omitempty"`
	Cleanup  *jsonCleanup    `json:"cleanup,omitempty"`
	// Workspace: a build from this open workspace.
	Workspace string `json:"workspace,omitempty"`
	// Gated, with job-start: the job staged, waiting for a free builder, before it.
	Gated bool `json:"gated,omitempty"`
	// RemoteDown, with a warning notice: the push remote it marked down for the session.
	RemoteDown string `json:"remote-down,omitempty"`
}

// WriteJSONNotice writes a notice event outside a session's event stream (a warning
// before or after it), so that stderr stays JSON lines only.
func WriteJSONNotice(w io.Writer, level, text string) {
	_ = json.NewEncoder(w).Encode(jsonEvent{Schema: JSONSchema, Time: time.Now(), Event: "notice", Level: level, Text: text})
}

// WriteJSONError writes the "error" event that ends a command which failed outside a
// session's summary (a project that does not load, an unknown element, an
// interruption), with the exit code gantry exits with.
func WriteJSONError(w io.Writer, text string, exitCode int) {
	_ = json.NewEncoder(w).Encode(jsonEvent{Schema: JSONSchema, Time: time.Now(), Event: "error", Level: "error", Text: text, ExitCode: &exitCode})
}

type jsonSummary struct {
	OK          bool                   `json:"ok"`
	Elapsed     float64                `json:"elapsed"`
	Suspended   float64                `json:"suspended,omitempty"` // seconds suspended, not in elapsed
	Queues      []jsonQueue            `json:"queues"`
	Failed      []queues.FailedElement `json:"failed"`
	NotStarted  []queues.NotStarted    `json:"not-started"`
	Interrupted bool                   `json:"interrupted"`
	// CriticalPath: the jobs that set the wall time; durations in seconds.
	CriticalPath []jsonLink `json:"critical-path,omitempty"`
}

type jsonLink struct {
	Action   queues.Action `json:"action"`
	Element  string        `json:"element"`
	Duration float64       `json:"duration"`
	Wait     float64       `json:"wait"`
}

type jsonQueue struct {
	Action    queues.Action `json:"action"`
	Processed int           `json:"processed"`
	Skipped   int           `json:"skipped"`
	Failed    int           `json:"failed"`
}

// JSONSeconds is a duration in seconds to the millisecond (3.142, not 3.1415926535),
// as the float nearest to that decimal, which JSON writes as the decimal: one
// division of the milliseconds (Duration.Seconds adds two floats:
// 1.1179999999999999). Every duration in gantry's JSON is one.
func JSONSeconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond).Milliseconds()) / 1000
}

// seconds is JSONSeconds for an optional member.
func seconds(d time.Duration) *float64 {
	s := JSONSeconds(d)
	return &s
}

// Handle renders one event.
func (j *JSON) Handle(e queues.Event) {
	var o jsonEvent
	switch e := e.(type) {
	case queues.SessionStart:
		o = jsonEvent{Time: e.Time, Event: "session-start", Project: e.Project, Elements: e.Elements, Queues: e.Queues}
	case queues.JobStart:
		o = jsonEvent{Time: e.Time, Event: "job-start", Action: e.Action, Element: e.Element, Key: e.Key, Job: e.JobID, Log: e.LogPath, Attempt: e.Attempt, Workspace: e.Workspace, Gated: e.Gated}
	case queues.JobMessage:
		if e.Kind == "log" && !j.opts.Verbose {
			return
		}
		o = jsonEvent{Time: e.Time, Event: "job-" + e.Kind, Action: e.Action, Element: e.Element, Key: e.Key, Job: e.JobID, Text: e.Text, Done: e.Done, Total: e.Total}
	case queues.JobEnd:
		o = jsonEvent{Time: e.Time, Event: "job-end", Action: e.Action, Element: e.Element, Key: e.Key, Job: e.JobID,
			Result: string(e.Result), Duration: seconds(e.Duration), Error: e.Error, Log: e.LogPath, Retry: e.WillRetry}
		if e.Result == queues.ResultSkipped || e.Result == queues.ResultWaiting {
			o.Error, o.Reason = "", e.Error // not an error: why nothing was done
		}
	case queues.JobDurable:
		o = jsonEvent{Time: e.Time, Event: "job-durable", Action: e.Action, Element: e.Element, Key: e.Key, Job: e.JobID}
	case queues.ElementSkipped:
		o = jsonEvent{Time: e.Time, Event: "element-skipped", Action: e.Action, Element: e.Element, Key: e.Key, Text: e.Reason}
	case queues.ElementWaiting:
		o = jsonEvent{Time: e.Time, Event: "element-waiting", Action: e.Action, Element: e.Element, Key: e.Key, Text: e.Reason}
	case queues.Notice:
		o = jsonEvent{Time: e.Time, Event: "notice", Level: e.Level, Element: e.Element, Text: e.Text, RemoteDown: e.RemoteDown}
	case queues.CacheCleanup:
		o = cleanupJSON(e)
	case queues.Suspended:
		o = jsonEvent{Time: e.Time, Event: "suspended"}
	case queues.Resumed:
		o = jsonEvent{Time: e.Time, Event: "resumed"}
	case queues.SessionEnd:
		s := e.Summary
		js := &jsonSummary{OK: s.OK(), Elapsed: *seconds(s.Elapsed), Suspended: *seconds(s.Suspended), Failed: s.Failed, NotStarted: s.NotStarted, Interrupted: s.Interrupted}
		if js.Failed == nil {
			js.Failed = []queues.FailedElement{}
		}
		if js.NotStarted == nil {
			js.NotStarted = []queues.NotStarted{}
		}
		for _, l := range s.CriticalPath {
			js.CriticalPath = append(js.CriticalPath, jsonLink{Action: l.Action, Element: l.Element, Duration: *seconds(l.Duration), Wait: *seconds(l.Wait)})
		}
		for _, q := range s.Queues {
			js.Queues = append(js.Queues, jsonQueue{Action: q.Action, Processed: q.Processed, Skipped: q.Skipped, Failed: q.Failed})
		}
		// An element the session never got to has its own event, as every other
		// element has, before the summary that lists them all.
		for _, ns := range s.NotStarted {
			j.enc.Encode(jsonEvent{Schema: JSONSchema, Time: e.Time, Event: "element-not-started", Element: ns.Element, Text: ns.Reason})
		}
		o = jsonEvent{Time: e.Time, Event: "session-end", Project: s.Project, Summary: js}
	default:
		return
	}
	o.Schema = JSONSchema
	j.enc.Encode(o)
}
