package ui

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gantry-build/gantry/queues"
)

// Plain writes one line per event in BuildStream's shape, with no escape codes; the
// task column is padded so that the verbs and messages line up:
//
//	[00:00:00][        ][session]        START    demo: 3 elements, queues fetch → build
//	[00:00:01][1a2b3c4d][build:app.toml] START    /cache/logs/demo/app.1a2b3c4d-build.log
//	[00:00:03][1a2b3c4d][build:app.toml] SUCCESS  /cache/logs/demo/app.1a2b3c4d-build.log
type Plain struct {
	w     io.Writer
	opts  Options
	start time.Time
	width int // of the task column: "[action:element]" of the longest action and name

	lastStatus time.Time // when the last periodic STATUS line was printed
}

// statusEvery is how often, at most, plain output prints the session's progress and
// ETA: on the first counters change after that long.
const statusEvery = 30 * time.Second

// NewPlain returns a plain display writing to w.
func NewPlain(w io.Writer, opts Options) *Plain { return &Plain{w: w, opts: opts} }

func (p *Plain) line(at string, key string, action queues.Action, element, verb, msg string) {
	task := "[session]"
	if element != "" {
		task = "[" + string(action) + ":" + element + "]"
	}
	p.width = max(p.width, len(task)) // a longer task (a cleanup) pushes the column
	k := "        "
	if key != "" {
		k = shortKey(key)
	}
	line := fmt.Sprintf("[%s][%s]%-*s %-8s %s", at, k, p.width, task, verb, msg)
	fmt.Fprintln(p.w, strings.TrimRight(line, " "))
}

// Handle renders one event.
func (p *Plain) Handle(e queues.Event) {
	switch e := e.(type) {
	case queues.SessionStart:
		p.start = e.Time
		p.width = len("[session]")
		for _, a := range e.Queues {
			p.width = max(p.width, len("["+string(a)+":]")+e.NameLen)
		}
		p.line(clock(0), "", "", "", "START", fmt.Sprintf("%s: %s, queues %s", e.Project, Plural(e.Elements, "element"), joinActions(e.Queues)))
	case queues.JobStart:
		msg := e.LogPath
		if e.Attempt > 1 {
			msg = fmt.Sprintf("attempt %d, %s", e.Attempt, e.LogPath)
		}
		if e.Workspace != "" {
			msg = "from workspace " + e.Workspace + ", " + msg
		}
		p.line(clock(e.Time.Sub(p.start)), e.Key, e.Action, e.Element, "START", msg)
	case queues.JobMessage:
		if p.opts.Verbose && e.Kind == "status" {
			p.line(clock(e.Time.Sub(p.start)), e.Key, e.Action, e.Element, "STATUS", e.Text)
		}
	case queues.JobEnd:
		switch e.Result {
		case queues.ResultSuccess:
			p.line(clock(e.Duration), e.Key, e.Action, e.Element, "SUCCESS", e.LogPath)
		case queues.ResultSkipped:
			p.line(clock(e.Duration), e.Key, e.Action, e.Element, "SKIPPED", e.Error)
		case queues.ResultTerminated:
			p.line(clock(e.Duration), e.Key, e.Action, e.Element, "TERMINATED", "")
		case queues.ResultWaiting:
			p.line(clock(e.Duration), e.Key, e.Action, e.Element, "WAITING", e.Error)
		default:
			verb := "FAILURE"
			if e.WillRetry {
				verb = "RETRY"
			}
			p.line(clock(e.Duration), e.Key, e.Action, e.Element, verb, firstLine(e.Error))
			if !e.WillRetry {
				p.failureDetail(e)
			}
		}
	case queues.ElementSkipped:
		if p.opts.Verbose || e.Waited {
			p.line(clock(e.Time.Sub(p.start)), e.Key, e.Action, e.Element, "SKIPPED", e.Reason)
		}
	case queues.ElementWaiting:
		p.line(clock(e.Time.Sub(p.start)), e.Key, e.Action, e.Element, "WAITING", e.Reason)
	case queues.Notice:
		p.line(clock(e.Time.Sub(p.start)), "", "", e.Element, strings.ToUpper(e.Level), e.Text)
	case queues.CacheCleanup:
		p.line(clock(e.Duration), "", queues.Cleanup, "cache", "CLEANUP", cleanupText(e))
	case queues.Suspended:
		p.line(clock(e.Time.Sub(p.start)), "", "", "", "SUSPEND", "all jobs suspended")
	case queues.Resumed:
		p.line(clock(e.Time.Sub(p.start)), "", "", "", "RESUME", "all jobs resumed")
	case queues.Counts:
		if e.Time.Sub(p.lastStatus) < statusEvery || e.Time.Sub(p.start) < statusEvery {
			return
		}
		p.lastStatus = e.Time
		msg := fmt.Sprintf("%d/%d elements", e.Done, e.Total)
		if eta := etaText(e, 0); eta != "" {
			msg += ", " + eta
		}
		p.line(clock(e.Time.Sub(p.start)), "", "", "", "STATUS", msg)
	case queues.SessionEnd:
		writeSummary(p.w, e.Summary)
		if p.opts.CI != nil {
			p.annotate(e.Summary)
		}
	}
}

// failureDetail prints the tail of a failed job's log, indented, and where the log is;
// for a CI, in a group that its log folds.
func (p *Plain) failureDetail(e queues.JobEnd) {
	excerpt := logExcerpt(e.LogPath, p.opts.errorLines())
	if p.opts.CI == nil || excerpt == "" {
		io.WriteString(p.w, excerpt)
		return
	}
	fmt.Fprintf(p.w, "::group::%s of %s failed: its log\n%s::endgroup::\n", e.Action, e.Element, excerpt)
}

// annotate prints one ::error line per failed element, which a CI shows on the
// element's file and on the run's page.
func (p *Plain) annotate(s *queues.Summary) {
	for _, f := range s.Failed {
		fmt.Fprintf(p.w, "::error file=%s,title=%s::%s\n", ciProperty(p.opts.CI.File(f.Element)),
			ciProperty(fmt.Sprintf("%s of %s failed", f.Action, f.Element)), ciMessage(f.Error))
	}
}

// ciMessage escapes a workflow command's message; ciProperty one of its properties.
func ciMessage(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func ciProperty(s string) string {
	return strings.NewReplacer(":", "%3A", ",", "%2C").Replace(ciMessage(s))
}

func joinActions(a []queues.Action) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = string(x)
	}
	return strings.Join(s, " → ")
}
