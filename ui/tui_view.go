package ui

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/charmbracelet/bubbles/progress"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/gantry-build/gantry/internal/units"
	"github.com/gantry-build/gantry/queues"
)

// The size assumed until the terminal tells its own (it never does when the output is
// not a terminal).
const (
	defaultWidth  = 80
	defaultHeight = 24
)

// tuiStyles are the colours of the live area, made by one renderer: with the Ascii
// profile (NoColor) every style renders its text unchanged.
type tuiStyles struct {
	ok, skipped, failed lipgloss.Style // the per-queue counters
	suspended, selected lipgloss.Style
	dim                 lipgloss.Style
	bar                 progress.Model
}

func newTUIStyles(r *lipgloss.Renderer) tuiStyles {
	return tuiStyles{
		ok:        r.NewStyle().Foreground(lipgloss.Color("2")),
		skipped:   r.NewStyle().Foreground(lipgloss.Color("3")),
		failed:    r.NewStyle().Foreground(lipgloss.Color("1")),
		suspended: r.NewStyle().Bold(true).Foreground(lipgloss.Color("3")),
		selected:  r.NewStyle().Reverse(true),
		dim:       r.NewStyle().Faint(true),
		bar:       progress.New(progress.WithSolidFill("4"), progress.WithoutPercentage(), progress.WithColorProfile(r.ColorProfile())),
	}
}

// newRenderer renders for out; noColor forces the Ascii profile (no escape sequences).
func newRenderer(out io.Writer, noColor bool) *lipgloss.Renderer {
	r := lipgloss.NewRenderer(out)
	if noColor {
		r.SetColorProfile(termenv.Ascii)
	}
	return r
}

func (m tuiModel) size() (width, height int) {
	width, height = m.width, m.height
	if width <= 0 {
		width = defaultWidth
	}
	if height <= 0 {
		height = defaultHeight
	}
	return width, height
}

// View draws the live area: header, running jobs or a log, then notes, prompts and
// help. Every line is cut to the terminal's width. After SessionEnd, while the
// failure prompt's shell runs and while gantry is stopped (Ctrl-Z), it is empty.
//
// On a terminal (live set), each line starts by erasing its whole row, for the
// resize repair (see liveOutput): a terminal reflows a row as wide as the widest
// text it held since it was last erased whole — tmux does — not as the text on it
// now, so a row where a job's line once took the full width and now shows "a 2"
// would take two rows after the terminal got half as wide, one more than
// reflowErase counts, and the header's first row was left above the live area.
// Erased whole before each line is drawn, every row is as wide as its text.
func (m tuiModel) View() string {
	v := m.view()
	if m.live != nil {
		v = eraseRows(v)
		v = m.live.mark(v, m.drawn(v))
	}
	return v
}

// eraseRows starts each line of v by erasing the whole row it is drawn on; ""
// stays "" (the renderer draws the empty view as a blank).
func eraseRows(v string) string {
	if v == "" {
		return v
	}
	return ansi.EraseEntireLine + strings.ReplaceAll(v, "\n", "\n"+ansi.EraseEntireLine)
}

// view is View's text.
func (m tuiModel) view() string {
	if m.st.finished || m.shellOpen || m.stopped.resume || m.stopped.size {
		return ""
	}
	w, h := m.size()
	head, foot := m.header(w), m.footer()
	var body []string
	if m.log.open {
		body = m.logLines()
	} else {
		body = m.jobLines(w, h-1-len(head)-len(foot))
	}
	lines := slices.Concat(head, body, foot)
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, w, "…")
	}
	return strings.Join(lines, "\n")
}

// drawn is the view v as the renderer draws it: no more lines than the terminal's
// height (the renderer drops those at the top), and a blank for an empty view.
func (m tuiModel) drawn(v string) string {
	if v == "" {
		return " "
	}
	if lines := strings.Split(v, "\n"); m.height > 0 && len(lines) > m.height {
		v = strings.Join(lines[len(lines)-m.height:], "\n")
	}
	return v
}

// layout gives the log view the rows that the header and footer leave.
func (m tuiModel) layout() tuiModel {
	w, h := m.size()
	rows := h - 1 - len(m.header(w)) - len(m.footer()) - len(m.logHead())
	m.log = m.log.resize(w, max(3, rows))
	return m
}

// header is the session line and the queues' counters, as many groups a line as fit.
func (m tuiModel) header(width int) []string {
	c := m.st.counts
	elapsed := m.st.clock.elapsed(m.st.now)
	first := fmt.Sprintf("[%s] %s  %d/%d elements", clock(elapsed), m.st.project, c.Done, c.Total)
	if c.Total > 0 {
		bar := m.sty.bar
		bar.Width = max(10, min(24, width/6))
		first += " " + bar.ViewAs(float64(c.Done)/float64(c.Total))
	}
	if eta := etaText(c, elapsed-m.st.clock.elapsed(c.Time)); eta != "" {
		first += "  " + eta
	}
	if m.quota > 0 && m.used >= 0 {
		cache := fmt.Sprintf("cache %s / %s", units.Bytes(m.used), units.Bytes(m.quota))
		if m.used > m.quota {
			cache = m.sty.failed.Render(cache)
		}
		first += "  " + cache
	}
	if c := m.st.cleanup; c != nil {
		first += "  " + m.sty.dim.Render("cleanup "+cleanupText(*c))
	}
	if m.st.clock.suspended() {
		first += "  " + m.sty.suspended.Render("SUSPENDED")
	}
	if !m.help {
		first += "  " + m.sty.dim.Render("? keys")
	}
	lines := []string{first}
	line := ""
	for _, q := range m.queueStats() {
		group := fmt.Sprintf("%s %s %s %s %d run %d wait", q.Action,
			m.sty.ok.Render(fmt.Sprintf("%d ok", q.Processed)),
			m.sty.skipped.Render(fmt.Sprintf("%d skip", q.Skipped)),
			m.sty.failed.Render(fmt.Sprintf("%d fail", q.Failed)),
			q.Running, q.Waiting)
		switch {
		case line == "":
			line = group
		case ansi.StringWidth(line)+3+ansi.StringWidth(group) <= width:
			line += " │ " + group
		default:
			lines = append(lines, line)
			line = group
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// queueStats are the latest counters, or zeros for the queues of the session until the
// first Counts.
func (m tuiModel) queueStats() []queues.QueueStats {
	if len(m.st.counts.Queues) > 0 {
		return m.st.counts.Queues
	}
	stats := make([]queues.QueueStats, len(m.st.queues))
	for i, a := range m.st.queues {
		stats[i].Action = a
	}
	return stats
}

// jobLines is a line per running job, at most rows lines; the jobs that do not fit are
// counted in a last line. The selected job is always among those shown.
func (m tuiModel) jobLines(width, rows int) []string {
	jobs := m.st.jobs
	if len(jobs) == 0 {
		return []string{m.sty.dim.Render("no jobs running")}
	}
	shown := len(jobs)
	if shown > max(rows, 1) {
		shown = max(rows-1, 1)
	}
	first := max(0, m.sel-shown+1)
	nameWidth := 0
	for _, j := range jobs[first : first+shown] {
		nameWidth = max(nameWidth, min(ansi.StringWidth(j.label()), 32))
	}
	lines := make([]string, 0, shown+1)
	for i, j := range jobs[first : first+shown] {
		lead := fmt.Sprintf("  %-5s  %-*s", j.action, nameWidth, j.label())
		if first+i == m.sel {
			lead = m.sty.selected.Render(">" + lead[1:])
		}
		lines = append(lines, lead+"  "+clock(j.elapsed(m.st.clock, m.st.now))+"  "+m.jobDetail(j, width))
	}
	if more := len(jobs) - shown; more > 0 {
		lines = append(lines, fmt.Sprintf("  … and %d more", more))
	}
	return lines
}

// jobDetail is what a job line ends with: its attempt, its progress (a bar when the
// total is known, else the amount done) and its last status or log line.
func (m tuiModel) jobDetail(j runningJob, width int) string {
	var parts []string
	if j.attempt > 1 {
		parts = append(parts, fmt.Sprintf("attempt %d", j.attempt))
	}
	if j.progress {
		if j.total > 0 {
			pct := min(float64(j.done)/float64(j.total), 1)
			bar := m.sty.bar
			bar.Width = max(10, min(30, width/5))
			parts = append(parts, fmt.Sprintf("%s %3.0f%% %s/%s", bar.ViewAs(pct), pct*100, units.Bytes(j.done), units.Bytes(j.total)))
		} else {
			parts = append(parts, units.Bytes(j.done))
		}
	}
	if j.last != "" {
		parts = append(parts, ansi.Strip(j.last))
	}
	return strings.Join(parts, "  ")
}

// logLines is the log view: its head and the viewport.
func (m tuiModel) logLines() []string {
	return append(m.logHead(), strings.Split(m.log.vp.View(), "\n")...)
}

// logHead is the title of the log view and, if reading failed, why.
func (m tuiModel) logHead() []string {
	lines := []string{"log of " + m.log.title + ": " + m.log.path}
	if m.log.err != nil {
		lines = append(lines, m.sty.failed.Render(m.log.err.Error()))
	}
	return lines
}

// footer is the note, the question asked (if any) and the keys.
func (m tuiModel) footer() []string {
	var lines []string
	if m.note != "" {
		lines = append(lines, m.sty.dim.Render(m.note))
	}
	held := m.st.held
	switch {
	case m.prompt == interruptPrompt:
		lines = append(lines, m.sty.suspended.Render("continue / quit / terminate? [C/q/t]"))
	case m.prompt == terminatePrompt:
		lines = append(lines, m.sty.failed.Render("terminate running jobs? y/N"))
	case held != nil:
		lines = append(lines, m.sty.failed.Render(fmt.Sprintf("%s of %s failed: %s", held.Action, held.Element, firstLine(held.Error))))
		if !m.log.open {
			lines = append(lines, m.heldKeys())
		}
	}
	switch {
	case m.log.open && held != nil:
		lines = append(lines, "↑/↓ pgup/pgdn scroll · g top · G end (follow) · esc back to the question")
	case m.log.open:
		lines = append(lines, "↑/↓ pgup/pgdn scroll · g top · G end (follow) · esc back")
	case m.help && held == nil:
		lines = append(lines, "s suspend/resume · q quit · t terminate · ↑/↓ select · enter log")
		fallthrough
	case m.help:
		lines = append(lines, "ctrl+c interrupt · ctrl+z stop gantry · ? hide these keys",
			"counters per queue: processed, skipped, failed, running, waiting",
			"time left: learned build times along the critical path, shared among the builders")
	}
	return lines
}

// heldKeys are the answers to a held failure.
func (m tuiModel) heldKeys() string {
	keys := "c continue · q quit · t terminate · r retry · l log"
	if m.shell != nil {
		keys += " · s shell"
	}
	return keys
}
