package ui

import (
	"bytes"
	"io"
	"os"
	"strings"

	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/gantry-build/gantry/job"
)

const (
	// logReadMax is the most one read of a log takes; the first read of a longer log
	// starts this far before its end.
	logReadMax = 1 << 20
	// logKeepMax is the most text the log view keeps; older lines are dropped.
	logKeepMax = 4 << 20
)

// logChunkMsg is what one read of a log found.
type logChunkMsg struct {
	path     string
	from, to int64 // the offsets read: from is the offset asked for
	text     string
	err      error
}

// logView shows one job's log in a scrollable viewport while the job may still be
// writing it: every tick reads what was added, and the view follows the end of the
// log while the user is at the bottom.
//
// Invariant: at most one read is under way (reading), and a chunk is taken only if it
// starts where the text so far ends, so a log is never shown twice or out of order.
type logView struct {
	open    bool
	title   string // "build app.toml"
	path    string
	vp      viewport.Model
	text    string // the log read so far, escape sequences and internal markers removed
	partial string // the last line read, not ended yet: shown once it is
	offset  int64  // where the next read starts
	reading bool
	err     error
}

// openLogView opens a view of path and returns the read of its beginning.
func openLogView(title, path string) (logView, tea.Cmd) {
	lv := logView{open: true, title: title, path: path, vp: viewport.New(0, 0)}
	return lv.poll()
}

// poll returns the read of what the log gained since the last one, if no read is under way.
func (lv logView) poll() (logView, tea.Cmd) {
	if !lv.open || lv.reading || lv.path == "" {
		return lv, nil
	}
	lv.reading = true
	path, from := lv.path, lv.offset
	return lv, func() tea.Msg { return readLog(path, from) }
}

// add takes a chunk that a read returned.
func (lv logView) add(c logChunkMsg) logView {
	if !lv.open || c.path != lv.path {
		return lv
	}
	lv.reading = false
	lv.err = c.err
	if c.from != lv.offset || c.text == "" {
		return lv
	}
	follow := lv.vp.AtBottom() || lv.text == ""
	lv.text += lv.shownLines(c.text)
	if len(lv.text) > logKeepMax {
		cut := len(lv.text) - logKeepMax
		if i := strings.IndexByte(lv.text[cut:], '\n'); i >= 0 {
			cut += i + 1
		}
		lv.text = lv.text[cut:]
	}
	lv.offset = c.to
	lv.vp.SetContent(strings.TrimSuffix(lv.text, "\n"))
	if follow {
		lv.vp.GotoBottom()
	}
	return lv
}

// shownLines is the ended lines of text, after what was held of the last read, without
// gantry's internal markers (job.IsInternalLogLine), which logs users read leave out;
// a line not ended yet is held for the next read.
func (lv *logView) shownLines(text string) string {
	text, lv.partial = lv.partial+text, ""
	if i := strings.LastIndexByte(text, '\n'); i < len(text)-1 {
		text, lv.partial = text[:i+1], text[i+1:]
	}
	var b strings.Builder
	for line := range strings.Lines(text) {
		if !job.IsInternalLogLine(strings.TrimSuffix(line, "\n")) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// resize gives the viewport its size; it stays at the bottom if it was there.
func (lv logView) resize(width, height int) logView {
	if !lv.open || (lv.vp.Width == width && lv.vp.Height == height) {
		return lv
	}
	bottom := lv.vp.AtBottom()
	lv.vp.Width, lv.vp.Height = width, height
	if bottom {
		lv.vp.GotoBottom()
	} else {
		lv.vp.SetYOffset(lv.vp.YOffset) // clamps to the new height
	}
	return lv
}

// readLog reads the log at path from offset from to its end (at most logReadMax). The
// first read of a long log skips to the first full line of its last logReadMax bytes.
func readLog(path string, from int64) logChunkMsg {
	c := logChunkMsg{path: path, from: from, to: from}
	f, err := os.Open(path)
	if err != nil {
		c.err = err
		return c
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		c.err = err
		return c
	}
	start := from
	if from == 0 && fi.Size() > logReadMax {
		start = fi.Size() - logReadMax
	}
	if fi.Size() <= start {
		return c
	}
	buf := make([]byte, min(fi.Size()-start, logReadMax))
	n, err := f.ReadAt(buf, start)
	if err != nil && err != io.EOF {
		c.err = err
		return c
	}
	data := buf[:n]
	if start != from {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	c.to = start + int64(n)
	c.text = ansi.Strip(string(data))
	return c
}
