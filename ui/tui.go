package ui

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/gantry-build/gantry/queues"
)

// Controller steers the session a display shows (the scheduler's Send).
type Controller interface{ Send(queues.Command) }

// TUIOptions configure the interactive display.
type TUIOptions struct {
	Options
	In      io.Reader // terminal input
	Out     io.Writer // the terminal (gantry's stderr)
	NoColor bool      // NO_COLOR is set: no colours at all
	// Shell returns the command the failure prompt's "shell" runs, `gantry shell
	// --build ELEMENT`; nil offers no shell.
	Shell func(element string) *exec.Cmd
	// CacheQuota > 0 shows the cache's usage against it in the header; CacheUsage
	// measures the usage (off the program's loop: it walks the cache).
	CacheQuota int64
	CacheUsage func() (int64, error)
}

// TUI is the interactive display: a bubbletea program drawing a live area of the
// session (header, running jobs, prompts) under the lines of finished jobs, which
// scroll above it.
//
// Events reach the program from the goroutine that calls Handle (the Publisher's);
// nothing here ever blocks the scheduler. If the program fails before the session
// ends (a panic, a terminal error), the terminal is restored, one line says why, and
// the rest of the session is shown by a Plain display.
type TUI struct {
	opts   TUIOptions
	ctl    Controller         // set by Start, before any goroutine that uses it
	prog   *tea.Program       // set by Start
	exited chan struct{}      // closed once the program has returned and the terminal is restored
	runErr error              // why the program ended before the session did; set before exited closes
	hook   func(queues.Event) // tests only: given to the model, runs before it applies an event
	width  atomic.Int64       // the terminal's width as the program last saw it; 0: unknown
	live   *liveOutput        // the terminal the program draws on; nil when Out is no file

	// Owned by the goroutine that calls Handle.
	hist  history
	plain *Plain // the fallback, once the program has failed

	mu           sync.Mutex
	heldOpen     bool // a Held was shown and not answered yet
	summary      *queues.Summary
	summaryShown bool // the fallback display printed the summary
}

// NewTUI returns a TUI for the terminal o.Out; Start runs it.
func NewTUI(o TUIOptions) *TUI {
	return &TUI{opts: o, exited: make(chan struct{}), hist: history{opts: o.Options}}
}

// Start runs the program in its own goroutine; commands from keys go to ctl. It is
// called once, before the first Handle.
func (t *TUI) Start(ctl Controller) {
	t.ctl = ctl
	m := newTUIModel(answerWatch{t}, t.opts, newTUIStyles(newRenderer(t.opts.Out, t.opts.NoColor)))
	m.hook = t.hook
	m.onResize = func(w int) { t.width.Store(int64(w)) }
	out := t.opts.Out
	if f, ok := out.(*os.File); ok {
		t.live = &liveOutput{File: f}
		m.live, out = t.live, t.live
	}
	t.prog = tea.NewProgram(m,
		tea.WithInput(t.opts.In),
		tea.WithOutput(out),
		tea.WithoutSignalHandler(), // the CLI turns SIGINT, SIGTERM and SIGTSTP into commands
		tea.WithFPS(10),
		tea.WithFilter(t.filter),
	)
	go t.run()
}

// filter runs in the program's loop as soon as it has received a message, before
// the renderer and the model see it. An event: it tells Handle that the event got
// there. A new terminal size: it books the repair of the live area drawn at the old
// one (see liveOutput), before the renderer draws at the new one.
func (t *TUI) filter(_ tea.Model, msg tea.Msg) tea.Msg {
	switch msg := msg.(type) {
	case eventMsg:
		if msg.ack != nil {
			close(msg.ack)
		}
	case tea.WindowSizeMsg:
		if t.live != nil {
			t.live.resized(msg.Width)
		}
	}
	return msg
}

// run runs the program. If it ends before the session does, the display has failed:
// say so, and answer a failure that waits for the user, since nobody can any more.
func (t *TUI) run() {
	defer close(t.exited)
	final, err := t.prog.Run()
	if m, _ := final.(tuiModel); err == nil && m.st.finished {
		return
	}
	if err == nil {
		err = errors.New("it stopped before the session ended")
	}
	t.runErr = err
	fmt.Fprintf(t.opts.Out, "gantry: the terminal display failed (%v); showing plain progress\n", err)
	t.quitHeld()
}

// quitHeld answers a failure that waits for the user with quit, the default policy,
// once the display that would ask is gone.
func (t *TUI) quitHeld() {
	t.mu.Lock()
	open := t.heldOpen
	t.heldOpen = false
	t.mu.Unlock()
	if open {
		t.ctl.Send(queues.CmdQuit)
	}
}

// Handle shows one event. It is called from one goroutine; it may wait for the
// program to take the event, never for the scheduler.
func (t *TUI) Handle(e queues.Event) {
	text := t.hist.text(e)
	t.note(e)
	if t.plain == nil {
		msg := eventMsg{event: e, ack: make(chan struct{})}
		t.prog.Send(msg)
		select {
		case <-msg.ack:
			if text != "" {
				w := int(t.width.Load())
				if w <= 0 {
					w = defaultWidth
				}
				t.prog.Send(tea.Println(wrapLines(text, w))())
			}
			return
		case <-t.exited: // the program ended without taking e
		}
		t.plain = NewPlain(t.opts.Out, t.opts.Options)
		t.plain.start = t.hist.clock.start
	}
	t.plain.Handle(e)
	switch e := e.(type) {
	case queues.Held:
		fmt.Fprintf(t.opts.Out, "gantry: %s of %s failed and there is no terminal display to ask what to do: quitting\n", e.Action, e.Element)
		t.quitHeld()
	case queues.SessionEnd:
		t.mu.Lock()
		t.summaryShown = true
		t.mu.Unlock()
	}
}

// note books what Wait and a failing program need to know of e.
func (t *TUI) note(e queues.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e := e.(type) {
	case queues.Held:
		t.heldOpen = true
	case queues.SessionEnd:
		t.summary = e.Summary
	}
}

// answerWatch is the Controller the model sends to: it books answers to held failures
// on their way to the scheduler.
type answerWatch struct{ t *TUI }

func (a answerWatch) Send(c queues.Command) {
	if answersHeld(c) {
		a.t.mu.Lock()
		a.t.heldOpen = false
		a.t.mu.Unlock()
	}
	a.t.ctl.Send(c)
}

// Wait is called once the SessionEnd event has been handled. It waits until the program
// has ended and the terminal is restored, then prints the summary. The error says why
// the display failed, if it did; the session was shown to its end anyway.
func (t *TUI) Wait() error {
	t.prog.Send(stopMsg{}) // in case no SessionEnd reached the program
	<-t.exited
	t.mu.Lock()
	summary, shown := t.summary, t.summaryShown
	t.mu.Unlock()
	if summary != nil && !shown {
		writeSummary(t.opts.Out, summary)
	}
	if t.runErr != nil {
		return fmt.Errorf("terminal display: %w", t.runErr)
	}
	return nil
}
