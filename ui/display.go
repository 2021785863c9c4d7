// Package ui renders the scheduler's event stream: plain lines, JSON lines, or the
// interactive TUI, and prints the end-of-session summary.
package ui

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
)

// Display consumes events, one at a time, from one goroutine (the Publisher's).
type Display interface {
	Handle(e queues.Event)
}

// Options configure a display.
type Options struct {
	Verbose    bool
	ErrorLines int // lines of a failed job's log to show (default 20)
	// CI, when not nil, has plain output speak GitHub Actions' workflow commands: each
	// failed job's log excerpt in a ::group::, one ::error line per failed element.
	CI *CIAnnotations
}

// CIAnnotations say how plain output annotates failures for a CI.
type CIAnnotations struct {
	// File is the file of the element named, relative to the repository (or the
	// project), for an ::error line's file=.
	File func(element string) string
}

func (o Options) errorLines() int {
	if o.ErrorLines <= 0 {
		return 20
	}
	return o.ErrorLines
}

// clock formats a duration as BuildStream does: [hh:mm:ss].
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%02d:%02d:%02d", s/3600, s/60%60, s%60)
}

// Plural is "1 element", "3 elements": n and the noun, with an s unless n is 1.
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func shortKey(k string) string {
	if len(k) < 8 {
		return "????????"
	}
	return k[:8]
}

// excerptLines is what a failed job's log excerpt shows: its last n lines from its
// first "[status] " line on (the commands, the failing one last; not the header
// before, which lists the build environment), or, without one, its last n lines but
// the environment's "env: " lines; gantry's internal markers never
// (job.IsInternalLogLine). The log stamps are trimmed.
func excerptLines(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	command := false // a "[status] " line was seen
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := job.TrimLogStamp(sc.Text())
		switch {
		case job.IsInternalLogLine(l), !command && strings.HasPrefix(l, "env: "):
			continue
		case !command && strings.HasPrefix(l, "[status] "):
			lines, command = lines[:0], true
		}
		lines = append(lines, l)
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines
}

// logExcerpt is the excerpt of a failed job's log (excerptLines), indented, followed
// by where the whole log is; "" when there is no log.
func logExcerpt(logPath string, n int) string {
	if logPath == "" {
		return ""
	}
	var b strings.Builder
	for _, l := range excerptLines(logPath, n) {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	fmt.Fprintf(&b, "    (full log: %s)\n", logPath)
	return b.String()
}

// minShownWait is the shortest queue wait the summary's critical path shows: a
// shorter one is noise, not a wait for tokens worth reading.
const minShownWait = 10 * time.Millisecond

// writeSummary prints the end-of-session summary (plain and TUI displays).
func writeSummary(w io.Writer, s *queues.Summary) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nSession summary: %s, %s", s.Project, formatDuration(s.Elapsed))
	if s.Suspended >= time.Second/10 {
		fmt.Fprintf(&b, " (suspended %s, not counted)", formatDuration(s.Suspended))
	}
	b.WriteString("\n")
	for _, q := range s.Queues {
		fmt.Fprintf(&b, "  %-6s processed %d, skipped %d, failed %d\n", q.Action+":", q.Processed, q.Skipped, q.Failed)
	}
	if len(s.Failed) > 0 {
		fmt.Fprintf(&b, "Failed:\n")
		for _, f := range s.Failed {
			fmt.Fprintf(&b, "  %s (%s): %s\n", f.Element, f.Action, firstLine(f.Error))
			if f.LogPath != "" {
				fmt.Fprintf(&b, "    log: %s\n", f.LogPath)
			} else if f.Cached {
				fmt.Fprintf(&b, "    log: gantry artifact log %s\n", f.Element)
			}
		}
	}
	if len(s.NotStarted) > 0 {
		fmt.Fprintf(&b, "Not built:\n")
		for _, n := range s.NotStarted {
			fmt.Fprintf(&b, "  %s: %s\n", n.Element, n.Reason)
		}
	}
	if len(s.CriticalPath) > 0 {
		fmt.Fprintf(&b, "Critical path:")
		for i, l := range s.CriticalPath {
			if i > 0 {
				b.WriteString(" →")
			}
			fmt.Fprintf(&b, " %s %s %s", l.Action, l.Element, formatDuration(l.Duration))
			if l.Wait >= minShownWait {
				fmt.Fprintf(&b, " (queued %s)", formatDuration(l.Wait))
			}
		}
		b.WriteString("\n")
	}
	switch {
	case s.Interrupted:
		b.WriteString("Interrupted.\n")
	case s.OK():
		b.WriteString("Success.\n")
	}
	io.WriteString(w, b.String())
}

// etaText is what is left of a session's estimated build time, "~1m30s left", given
// how much session time passed since the Counts c. It is "" — no guess — when
// nothing is left to build, when the scheduler does not know (an element never
// built before is left: Counts.Remaining 0), and when the estimate has run out
// while builds go on (they take longer than they did before: nothing says how much).
func etaText(c queues.Counts, since time.Duration) string {
	left := c.Remaining - since
	if c.Remaining <= 0 || c.Done >= c.Total || left < time.Second {
		return ""
	}
	return "~" + left.Round(time.Second).String() + " left"
}

func formatDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
