package ui

import (
	"fmt"
	"strings"
	"time"

	"github.com/gantry-build/gantry/queues"
)

// history turns events into the plain lines the TUI prints above its live area, where
// the terminal's scrollback keeps them: one per finished job, notice and pause, and with
// Verbose also job starts, status lines and skipped elements. Each line starts with the
// session time (suspended time excluded).
//
// It is owned by the goroutine that calls TUI.Handle, which sends the lines to the
// program right after the event: so they come out in the order of the events.
type history struct {
	opts  Options
	clock sessionClock
}

// text returns what to print for e: lines without a final newline, or "" for nothing.
func (h *history) text(e queues.Event) string {
	h.clock = h.clock.observe(e)
	switch e := e.(type) {
	case queues.JobStart:
		if h.opts.Verbose {
			what := "started"
			if e.Attempt > 1 {
				what = fmt.Sprintf("started (attempt %d)", e.Attempt)
			}
			return h.line(e.Time, e.Action, e.Element, what, e.LogPath)
		}
	case queues.JobMessage:
		if h.opts.Verbose && e.Kind == "status" {
			return h.line(e.Time, e.Action, e.Element, "status", e.Text)
		}
	case queues.ElementSkipped:
		if h.opts.Verbose || e.Waited {
			return h.line(e.Time, e.Action, e.Element, "skipped", e.Reason)
		}
	case queues.JobEnd:
		return h.jobEnd(e)
	case queues.ElementWaiting:
		return h.line(e.Time, e.Action, e.Element, "waiting", e.Reason)
	case queues.Notice:
		text := e.Text
		if e.Element != "" {
			text = e.Element + ": " + text
		}
		return fmt.Sprintf("[%s] %s: %s", clock(h.clock.elapsed(e.Time)), e.Level, text)
	case queues.Suspended:
		return fmt.Sprintf("[%s] all jobs suspended", clock(h.clock.elapsed(e.Time)))
	case queues.Resumed:
		return fmt.Sprintf("[%s] all jobs resumed", clock(h.clock.elapsed(e.Time)))
	}
	return ""
}

// jobEnd is a finished job: short for a success, with the error, the end of the log
// and where the log is for a failure.
func (h *history) jobEnd(e queues.JobEnd) string {
	took := formatDuration(e.Duration)
	switch e.Result {
	case queues.ResultSuccess:
		return h.line(e.Time, e.Action, e.Element, "ok", took)
	case queues.ResultSkipped:
		return h.line(e.Time, e.Action, e.Element, "skipped", joinNonEmpty(took, firstLine(e.Error)))
	case queues.ResultTerminated:
		return h.line(e.Time, e.Action, e.Element, "terminated", took)
	case queues.ResultWaiting:
		return h.line(e.Time, e.Action, e.Element, "waiting", firstLine(e.Error))
	}
	if e.WillRetry {
		return h.line(e.Time, e.Action, e.Element, "failed, will retry", joinNonEmpty(took, firstLine(e.Error)))
	}
	head := h.line(e.Time, e.Action, e.Element, "FAILED", joinNonEmpty(took, firstLine(e.Error)))
	if excerpt := logExcerpt(e.LogPath, h.opts.errorLines()); excerpt != "" {
		return head + "\n" + strings.TrimSuffix(excerpt, "\n")
	}
	return head
}

// line is one job's line: `[00:00:03] build  app.toml  ok  3.1s`.
func (h *history) line(at time.Time, action queues.Action, element, what, detail string) string {
	return joinNonEmpty(fmt.Sprintf("[%s] %-5s  %s  %s", clock(h.clock.elapsed(at)), action, element, what), detail)
}

// joinNonEmpty joins the non-empty parts with two spaces.
func joinNonEmpty(parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "  ")
}
