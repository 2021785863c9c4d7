package ui

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gantry-build/gantry/queues"
)

// Plain writes one line per event in BuildStream's shape, with no escape codes:
//
//	[00:00:03][1a2b3c4d][build:app.toml] SUCCESS built in 3.1s
type Plain struct {
	w     io.Writer
	opts  Options
	start time.Time
}

// NewPlain returns a plain display writing to w.
func NewPlain(w io.Writer, opts Options) *Plain { return &Plain{w: w, opts: opts} }

func (p *Plain) line(at string, key string, action queues.Action, element, verb, msg string) {
	task := "--"
	if element != "" {
		task = string(action) + ":" + element
	}
	fmt.Fprintf(p.w, "[%s][%s][%s] %-8s %s\n", at, shortKey(key), task, verb, msg)
}

// Handle renders one event.
func (p *Plain) Handle(e queues.Event) {
	switch e := e.(type) {
	case queues.SessionStart:
		p.start = e.Time
		fmt.Fprintf(p.w, "[--:--:--][--------][--] START    %s: %d elements, queues %s\n", e.Project, e.Elements, joinActions(e.Queues))
	case queues.JobStart:
		msg := e.LogPath
		if e.Attempt > 1 {
			msg = fmt.Sprintf("attempt %d, %s", e.Attempt, e.LogPath)
		}
		if e.Workspace != "" {
			msg = "from workspace " + e.Workspace + ", " + msg
		}
		p.line("--:--:--", e.Key, e.Action, e.Element, "START", msg)
	case queues.JobMessage:
		if p.opts.Verbose && e.Kind == "status" {
			p.line(clock(e.Time.Sub(p.start)), e.Key, e.Action, e.Element, "STATUS", e.Text)
		}
	case queues.JobEnd:
		switch e.Result {
		case queues.ResultSuccess:
			p.line(clock(e.Duration), e.Key, e.Action, e.Element, "SUCCESS", "")
		case queues.ResultSkipped:
			p.line(clock(e.Duration), e.Key, e.Action, e.Element, "SKIPPED", e.Error)
		case queues.ResultTerminated:
			p.line(clock(e.Duration), e.Key, e.Action, e.Element, "TERMINATED", "")
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
		if p.opts.Verbose {
			p.line(clock(e.Time.Sub(p.start)), e.Key, e.Action, e.Element, "SKIPPED", e.Reason)
		}
	case queues.Notice:
		p.line(clock(e.Time.Sub(p.start)), "", "", e.Element, strings.ToUpper(e.Level), e.Text)
	case queues.CacheCleanup:
		p.line(clock(e.Duration), "", queues.Cleanup, "cache", "CLEANUP", cleanupText(e))
	case queues.Suspended:
		p.line(clock(e.Time.Sub(p.start)), "", "", "", "SUSPEND", "all jobs suspended")
	case queues.Resumed:
		p.line(clock(e.Time.Sub(p.start)), "", "", "", "RESUME", "all jobs resumed")
	case queues.SessionEnd:
		WriteSummary(p.w, e.Summary)
	}
}

// failureDetail prints the tail of a failed job's log, indented, and where the log is.
func (p *Plain) failureDetail(e queues.JobEnd) {
	io.WriteString(p.w, logExcerpt(e.LogPath, p.opts.errorLines()))
}

func joinActions(a []queues.Action) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = string(x)
	}
	return strings.Join(s, " → ")
}
