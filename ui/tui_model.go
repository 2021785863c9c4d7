package ui

import (
	"fmt"
	"os/exec"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/gantry-build/gantry/queues"
)

// tickEvery is how often the live area's clocks advance and an open log view is re-read.
const tickEvery = 250 * time.Millisecond

// The messages of the TUI's program besides bubbletea's own.
type (
	// eventMsg carries one scheduler event. ack, when not nil, is closed by the
	// program's filter as soon as its loop has received the message.
	eventMsg struct {
		event queues.Event
		ack   chan struct{}
	}
	// tickMsg is the ticker: the time it fired is the live area's "now".
	tickMsg time.Time
	// stopMsg ends the display although no SessionEnd came (TUI.Wait sends it).
	stopMsg struct{}
	// shellDoneMsg: the failure prompt's shell has exited.
	shellDoneMsg struct{ err error }
	// usageMsg: the cache's usage was measured.
	usageMsg struct{ used int64 }
)

// usageEvery is how often, at most, the cache's usage is measured again: after builds
// finished, not on a clock.
const usageEvery = 2 * time.Second

// prompt is a question the live area asks before anything else.
type prompt int

const (
	noPrompt        prompt = iota
	interruptPrompt        // after Ctrl-C: continue / quit / terminate?
	terminatePrompt        // after t: terminate running jobs? y/N
)

// tuiModel is the bubbletea model of the TUI. It is a value: Update returns a changed
// copy and never writes to memory that an earlier copy can see.
//
// Commands for the scheduler leave only from tea.Cmds (goroutines of the program),
// never from Update itself.
type tuiModel struct {
	st    sessionState
	ctl   Controller
	shell func(element string) *exec.Cmd // nil: the failure prompt offers no shell
	sty   tuiStyles
	ticks bool               // run the ticker (tests drive the clock themselves)
	hook  func(queues.Event) // tests only: runs before an event is applied
	// onResize tells the TUI the terminal's width, for the lines it prints above the
	// live area; nil: nobody asks.
	onResize func(width int)
	// live marks every view View makes (see liveOutput); nil: none.
	live *liveOutput

	width, height int    // the terminal's size; 0 until a WindowSizeMsg says
	sel           int    // index in st.jobs of the selected job
	selID         string // the selected job, followed while jobs before it end
	help          bool   // show the line of keys
	prompt        prompt
	resumeOnAns   bool   // the interrupt prompt suspended the jobs, so continue and quit resume them
	note          string // what the user asked for last ("quitting: …"), shown until replaced
	log           logView
	shellOpen     bool // the failure prompt's shell has the terminal: no live area
	// stopped: after Ctrl-Z no live area is drawn until the program has the
	// terminal back (tea.ResumeMsg) and knows its size (the WindowSizeMsg that
	// follows, in either order): the first frame after fg is drawn from where the
	// cursor is, at the size the terminal has then.
	stopped struct{ resume, size bool }

	quota      int64                 // cache quota; 0: usage is not shown
	usage      func() (int64, error) // measures the cache's usage
	used       int64                 // last measured usage; -1 until measured
	measuredAt time.Time             // when used was measured (zero: never)
	measuring  bool                  // a measurement is under way
	stale      bool                  // a build finished since the last measurement
}

func newTUIModel(ctl Controller, o TUIOptions, sty tuiStyles) tuiModel {
	m := tuiModel{
		ctl:   ctl,
		shell: o.Shell,
		sty:   sty,
		ticks: true,
		used:  -1,
	}
	if o.CacheQuota > 0 && o.CacheUsage != nil {
		m.quota, m.usage, m.stale = o.CacheQuota, o.CacheUsage, true
	}
	return m
}

// Init starts the ticker and the first measurement of the cache's usage.
func (m tuiModel) Init() tea.Cmd {
	m, measure := m.measure(time.Now())
	return tea.Batch(m.nextTick(), measure)
}

// measure starts measuring the cache's usage when it is stale and the last measurement
// is old enough; the result comes back as a usageMsg.
func (m tuiModel) measure(now time.Time) (tuiModel, tea.Cmd) {
	if m.usage == nil || m.measuring || !m.stale || now.Sub(m.measuredAt) < usageEvery {
		return m, nil
	}
	m.measuring, m.stale, m.measuredAt = true, false, now
	usage := m.usage
	return m, func() tea.Msg {
		used, err := usage()
		if err != nil {
			used = -1
		}
		return usageMsg{used: used}
	}
}

// Update handles one message, then sizes the log view to what the rest leaves.
func (m tuiModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	next, cmd := m.update(msg)
	return next.layout(), cmd
}

func (m tuiModel) update(msg tea.Msg) (tuiModel, tea.Cmd) {
	switch msg := msg.(type) {
	case eventMsg:
		return m.event(msg.event)
	case tickMsg:
		return m.tickAt(time.Time(msg))
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		if m.onResize != nil {
			m.onResize(msg.Width)
		}
		m.stopped.size = false
		return m, nil
	case tea.ResumeMsg:
		m.stopped.resume = false
		return m, nil
	case tea.KeyMsg:
		return m.key(msg)
	case logChunkMsg:
		m.log = m.log.add(msg)
		return m, nil
	case shellDoneMsg:
		m.shellOpen = false
		m.note = ""
		if msg.err != nil {
			m.note = "shell: " + msg.err.Error()
		}
		return m, nil
	case usageMsg:
		m.used, m.measuring = msg.used, false
		return m, nil

	case stopMsg:
		m.st.finished = true
		return m, tea.Quit
	}
	return m, nil
}

// event applies a scheduler event; SessionEnd ends the program.
func (m tuiModel) event(e queues.Event) (tuiModel, tea.Cmd) {
	if m.hook != nil {
		m.hook(e)
	}
	m.st = m.st.apply(e)
	m = m.reselect()
	if end, ok := e.(queues.JobEnd); ok && end.Result == queues.ResultSuccess {
		m.stale = true // an artifact or a source was stored
	}
	if m.st.finished {
		return m, tea.Quit
	}
	return m, nil
}

// tickAt moves the clocks to now and re-reads an open log.
func (m tuiModel) tickAt(now time.Time) (tuiModel, tea.Cmd) {
	if m.st.finished {
		return m, nil
	}
	m.st = m.st.at(now)
	var read, measure tea.Cmd
	m.log, read = m.log.poll()
	m, measure = m.measure(now)
	return m, tea.Batch(m.nextTick(), read, measure)
}

// nextTick arms the ticker once more. A tea.Tick command fires once: its timer is
// made when tea.Tick is called, so each tick needs a new one (running the same
// command again would wait forever on the spent timer).
func (m tuiModel) nextTick() tea.Cmd {
	if !m.ticks {
		return nil
	}
	return tea.Tick(tickEvery, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// order returns the model after the user gave command c, and the tea.Cmd that sends
// it. Continue, retry, quit and terminate answer a held failure, so its prompt goes.
func (m tuiModel) order(c queues.Command) (tuiModel, tea.Cmd) {
	switch c {
	case queues.CmdQuit:
		m.note = "quitting: no new jobs start; running jobs finish (t terminates them)"
	case queues.CmdTerminate:
		m.note = "terminating running jobs"
	}
	if answersHeld(c) {
		m.st.held = nil
	}
	return m, m.send(c)
}

// send is a tea.Cmd that gives c to the scheduler.
func (m tuiModel) send(c queues.Command) tea.Cmd {
	ctl := m.ctl
	return func() tea.Msg {
		ctl.Send(c)
		return nil
	}
}

// key handles a key press. Ctrl-C and Ctrl-Z work everywhere; otherwise an open
// prompt gets the key first, then the log view, then the failure prompt.
func (m tuiModel) key(msg tea.KeyMsg) (tuiModel, tea.Cmd) {
	k := msg.String()
	switch k {
	case "ctrl+c":
		return m.interrupt()
	case "ctrl+z":
		// The live area is erased before the program gives the terminal up: the
		// shell writes below where it began, and the area drawn again on fg starts
		// there, with no copy of it left above.
		m.stopped.resume, m.stopped.size = true, true
		return m, tea.Suspend
	}
	switch {
	case m.prompt == interruptPrompt:
		return m.answerInterrupt(k)
	case m.prompt == terminatePrompt:
		m.prompt = noPrompt
		if k == "y" || k == "Y" {
			return m.order(queues.CmdTerminate)
		}
		return m, nil
	case m.log.open:
		switch k {
		case "esc", "q":
			m.log = logView{}
			return m, nil
		case "g", "home":
			m.log.vp.GotoTop()
			return m, nil
		case "G", "end": // and the view follows the log again
			m.log.vp.GotoBottom()
			return m, nil
		}
		m.log.vp, _ = m.log.vp.Update(msg)
		return m, nil
	case m.st.held != nil:
		return m.answerHeld(k)
	}
	return m.plainKey(k)
}

// plainKey is a key while nothing asks a question.
func (m tuiModel) plainKey(k string) (tuiModel, tea.Cmd) {
	switch k {
	case "s":
		if m.st.clock.suspended() {
			return m, m.send(queues.CmdResume)
		}
		return m, m.send(queues.CmdSuspend)
	case "q":
		return m.order(queues.CmdQuit)
	case "t":
		m.prompt = terminatePrompt
	case "up", "k":
		m = m.selectJob(m.sel - 1)
	case "down", "j":
		m = m.selectJob(m.sel + 1)
	case "enter", "l":
		if m.sel < len(m.st.jobs) {
			j := m.st.jobs[m.sel]
			return m.openLog(string(j.action)+" "+j.element, j.logPath)
		}
	case "?":
		m.help = !m.help
	}
	return m, nil
}

// interrupt is Ctrl-C: suspend everything and ask; a second Ctrl-C terminates.
func (m tuiModel) interrupt() (tuiModel, tea.Cmd) {
	if m.prompt == interruptPrompt {
		m.prompt = noPrompt
		return m.order(queues.CmdTerminate)
	}
	m.prompt = interruptPrompt
	m.resumeOnAns = !m.st.clock.suspended()
	if !m.resumeOnAns {
		return m, nil
	}
	return m, m.send(queues.CmdSuspend)
}

// answerInterrupt answers `continue / quit / terminate? [C/q/t]`; other keys leave it open.
func (m tuiModel) answerInterrupt(k string) (tuiModel, tea.Cmd) {
	var resume tea.Cmd
	if m.resumeOnAns {
		resume = m.send(queues.CmdResume)
	}
	switch k {
	case "enter", "c", "C":
		m.prompt = noPrompt
		return m, resume
	case "q", "Q":
		m.prompt = noPrompt
		var quit tea.Cmd
		m, quit = m.order(queues.CmdQuit)
		return m, tea.Sequence(quit, resume)
	case "t", "T":
		m.prompt = noPrompt
		return m.order(queues.CmdTerminate)
	}
	return m, nil
}

// answerHeld answers the failure prompt. An answer takes the prompt down until the
// scheduler holds the next failure.
func (m tuiModel) answerHeld(k string) (tuiModel, tea.Cmd) {
	h := m.st.held
	switch k {
	case "c":
		return m.order(queues.CmdContinue)
	case "q":
		return m.order(queues.CmdQuit)
	case "t":
		return m.order(queues.CmdTerminate)
	case "r":
		return m.order(queues.CmdRetry)
	case "l", "enter":
		return m.openLog(string(h.Action)+" "+h.Element, h.LogPath)
	case "s":
		if m.shell != nil {
			m.shellOpen = true // the live area clears before the shell takes the terminal
			return m, m.runShell(h.Element)
		}
	case "?":
		m.help = !m.help
	}
	return m, nil
}

// runShell is a tea.Cmd that builds the shell command for element and hands the
// terminal to it; the program takes the terminal back when it exits.
func (m tuiModel) runShell(element string) tea.Cmd {
	shell := m.shell
	return func() tea.Msg {
		c := shell(element)
		if c == nil {
			return shellDoneMsg{fmt.Errorf("no shell for %s", element)}
		}
		return tea.ExecProcess(c, func(err error) tea.Msg { return shellDoneMsg{err} })()
	}
}

// openLog opens the log view on path and starts reading it.
func (m tuiModel) openLog(title, path string) (tuiModel, tea.Cmd) {
	var read tea.Cmd
	m.log, read = openLogView(title, path)
	return m, read
}

// selectJob moves the selection to job i (clamped).
func (m tuiModel) selectJob(i int) tuiModel {
	m.sel = max(0, min(i, len(m.st.jobs)-1))
	m.selID = ""
	if m.sel < len(m.st.jobs) {
		m.selID = m.st.jobs[m.sel].id
	}
	return m
}

// reselect keeps the selection on the same job while others start and end; when the
// selected job ends, the one that took its place is selected.
func (m tuiModel) reselect() tuiModel {
	if i := m.st.jobIndex(m.selID); i >= 0 {
		m.sel = i
		return m
	}
	return m.selectJob(m.sel)
}

// wrapLines breaks every line of text to fit in width-1 columns. The renderer clears
// the rest of a printed line only when it is narrower than the terminal; a longer one
// wraps, and its last row would keep what the live area had drawn there.
func wrapLines(text string, width int) string {
	return ansi.Hardwrap(text, max(width-1, 10), true)
}
