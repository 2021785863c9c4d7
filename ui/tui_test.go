package ui

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/gantry-build/gantry/queues"
)

// fakeCtl records the commands a display sends, and passes them on to ch if set.
type fakeCtl struct {
	mu   sync.Mutex
	cmds []queues.Command
	ch   chan queues.Command
}

func (f *fakeCtl) Send(c queues.Command) {
	f.mu.Lock()
	f.cmds = append(f.cmds, c)
	f.mu.Unlock()
	if f.ch != nil {
		f.ch <- c
	}
}

// take returns the commands sent since the last take.
func (f *fakeCtl) take() []queues.Command {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cmds
	f.cmds = nil
	return c
}

// waitFor waits (at most 5s) until want arrives on f.ch.
func (f *fakeCtl) waitFor(t *testing.T, want queues.Command) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case c := <-f.ch:
			if c == want {
				return
			}
		case <-timeout:
			t.Fatalf("the controller never got %v", want)
		}
	}
}

// tester drives a tuiModel without a terminal: Update, then every tea.Cmd it returned.
type tester struct {
	t   *testing.T
	m   tuiModel
	ctl *fakeCtl
	out []tea.Msg // messages the Cmds returned that the model does not take back itself
}

// newTester returns a model 80×24 without ticker, with colours when colour is set.
func newTester(t *testing.T, o TUIOptions, colour bool) *tester {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	if colour {
		r.SetColorProfile(termenv.ANSI256)
	}
	ctl := &fakeCtl{}
	m := newTUIModel(ctl, o, newTUIStyles(r))
	if m.Init() == nil {
		t.Fatal("Init starts no ticker")
	}
	m.ticks = false
	tt := &tester{t: t, m: m, ctl: ctl}
	tt.send(tea.WindowSizeMsg{Width: 80, Height: 24})
	return tt
}

// send updates the model with msg and runs the Cmds it returns; log reads are fed back
// into the model, as the program would.
func (tt *tester) send(msg tea.Msg) *tester {
	tt.t.Helper()
	next, cmd := tt.m.Update(msg)
	tt.m = next.(tuiModel)
	for _, out := range runCmd(cmd) {
		switch out.(type) {
		case logChunkMsg, usageMsg:
			tt.send(out)
			continue
		}
		tt.out = append(tt.out, out)
	}
	return tt
}

// runCmd runs cmd and returns the messages it yields, Batch and Sequence flattened,
// in order.
func runCmd(cmd tea.Cmd) []tea.Msg {
	if cmd == nil {
		return nil
	}
	msg := cmd()
	if msg == nil {
		return nil
	}
	v := reflect.ValueOf(msg)
	if v.Kind() == reflect.Slice && v.Type().Elem() == reflect.TypeFor[tea.Cmd]() { // tea.BatchMsg, tea's sequenceMsg
		var msgs []tea.Msg
		for i := range v.Len() {
			msgs = append(msgs, runCmd(v.Index(i).Interface().(tea.Cmd))...)
		}
		return msgs
	}
	return []tea.Msg{msg}
}

func (tt *tester) events(es ...queues.Event) *tester {
	for _, e := range es {
		tt.send(eventMsg{event: e})
	}
	return tt
}

func (tt *tester) keys(ks ...string) *tester {
	for _, k := range ks {
		tt.send(keyMsg(k))
	}
	return tt
}

func (tt *tester) tick(at time.Time) *tester { return tt.send(tickMsg(at)) }

func keyMsg(k string) tea.KeyMsg {
	special := map[string]tea.KeyType{"up": tea.KeyUp, "down": tea.KeyDown, "enter": tea.KeyEnter, "esc": tea.KeyEsc,
		"ctrl+c": tea.KeyCtrlC, "ctrl+z": tea.KeyCtrlZ, "pgup": tea.KeyPgUp}
	if t, ok := special[k]; ok {
		return tea.KeyMsg{Type: t}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

func (tt *tester) view() string { return tt.m.View() }

func (tt *tester) wantView(want ...string) {
	tt.t.Helper()
	wantContains(tt.t, "view", tt.view(), want...)
}

// wantContains fails t for every string of want that got lacks.
func wantContains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func (tt *tester) wantNotView(unwanted ...string) {
	tt.t.Helper()
	v := tt.view()
	for _, w := range unwanted {
		if strings.Contains(v, w) {
			tt.t.Errorf("view has %q:\n%s", w, v)
		}
	}
}

func (tt *tester) wantCmds(want ...queues.Command) {
	tt.t.Helper()
	if got := tt.ctl.take(); !slices.Equal(got, want) {
		tt.t.Errorf("commands = %v, want %v", got, want)
	}
}

func at(d time.Duration) queues.Base { return queues.Base{Time: t0.Add(d)} }

func start() queues.SessionStart {
	return queues.SessionStart{Base: at(0), Project: "demo", Queues: []queues.Action{queues.Fetch, queues.Build}, Elements: 3}
}

func jobStart(id string, action queues.Action, element string, d time.Duration) queues.JobStart {
	return queues.JobStart{Base: at(d), JobID: id, Action: action, Element: element, Key: key, LogPath: "/logs/" + id + ".log", Attempt: 1}
}

func status(id, text string, d time.Duration) queues.JobMessage {
	return queues.JobMessage{Base: at(d), JobID: id, Kind: "status", Text: text}
}

func held(logPath string) queues.Held {
	return queues.Held{Base: at(3 * time.Second), JobID: "b1", Action: queues.Build, Element: "app.toml", Key: key,
		Error: "build-commands: `make` exited with status 2\nmore", LogPath: logPath}
}

func TestTUIHeaderShowsCountersPerQueueAndSuspended(t *testing.T) {
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start())
	tt.wantView("[00:00:00] demo  0/3 elements", "fetch 0 ok 0 skip 0 fail 0 run 0 wait │ build 0 ok 0 skip 0 fail 0 run 0 wait")
	tt.events(queues.Counts{Base: at(time.Second), Done: 1, Total: 3, Queues: []queues.QueueStats{
		{Action: queues.Fetch, Processed: 2, Skipped: 1, Running: 1, Waiting: 3},
		{Action: queues.Build, Processed: 1, Failed: 1, Running: 2, Waiting: 4},
	}})
	tt.wantView("[00:00:01] demo  1/3 elements", "fetch 2 ok 1 skip 0 fail 1 run 3 wait │ build 1 ok 0 skip 1 fail 2 run 4 wait")
	tt.wantNotView("SUSPENDED")
	tt.events(queues.Suspended{Base: at(2 * time.Second)})
	tt.wantView("SUSPENDED")
	tt.events(queues.Resumed{Base: at(3 * time.Second)})
	tt.wantNotView("SUSPENDED")

	tt.send(tea.WindowSizeMsg{Width: 50, Height: 24}) // one group a line
	if lines := strings.Split(tt.view(), "\n"); !strings.HasPrefix(lines[1], "fetch") || !strings.HasPrefix(lines[2], "build") {
		t.Errorf("at width 50 the groups should wrap:\n%s", tt.view())
	}
}

func TestTUIColoursCountersUnlessNoColor(t *testing.T) {
	busy := func(tt *tester) {
		tt.events(start(), jobStart("f1", queues.Fetch, "base.toml", 0),
			queues.JobMessage{Base: at(time.Second), JobID: "f1", Kind: "progress", Done: 10, Total: 20},
			queues.Counts{Base: at(time.Second), Done: 1, Total: 3, Queues: []queues.QueueStats{{Action: queues.Fetch, Processed: 2, Skipped: 1, Failed: 1}}},
			queues.Suspended{Base: at(2 * time.Second)}, held(""))
	}
	colour := newTester(t, TUIOptions{}, true)
	busy(colour)
	colour.wantView("\x1b[32m2 ok", "\x1b[31m1 fail")

	plain := newTester(t, TUIOptions{NoColor: true}, false)
	busy(plain)
	plain.wantView("2 ok", "SUSPENDED", "50%", "app.toml failed")
	plain.keys("?")
	plain.wantNotView("\x1b[")
	if p := newRenderer(io.Discard, true).ColorProfile(); p != termenv.Ascii {
		t.Errorf("NoColor renderer profile = %v, want Ascii", p)
	}
}

func TestTUIElapsedTimeLeavesOutSuspendedTime(t *testing.T) {
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start(), jobStart("b1", queues.Build, "app.toml", time.Second))
	tt.tick(t0.Add(5 * time.Second))
	tt.wantView("[00:00:05] demo", "build  app.toml  00:00:04")
	tt.events(queues.Suspended{Base: at(5 * time.Second)})
	tt.tick(t0.Add(50 * time.Second)) // the clocks stand still while suspended
	tt.wantView("[00:00:05] demo", "build  app.toml  00:00:04")
	tt.events(queues.Resumed{Base: at(65 * time.Second)})
	tt.tick(t0.Add(70 * time.Second))
	tt.wantView("[00:00:10] demo", "build  app.toml  00:00:09")
	tt.tick(t0.Add(60 * time.Second)) // an old tick does not turn the clock back
	tt.wantView("[00:00:10] demo")

	// A job started during a pause only counts from the resume.
	tt.events(queues.Suspended{Base: at(70 * time.Second)}, jobStart("b2", queues.Build, "lib.toml", 80*time.Second),
		queues.Resumed{Base: at(90 * time.Second)})
	tt.tick(t0.Add(93 * time.Second))
	tt.wantView("[00:00:13] demo", "lib.toml  00:00:03")
}

func TestTUIJobLinesFollowStatusAndFitTheWidth(t *testing.T) {
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start(), jobStart("b1", queues.Build, "app.toml", 0), status("b1", "build: configure", time.Second))
	tt.wantView("> build  app.toml  00:00:01  build: configure")
	tt.events(queues.JobMessage{Base: at(2 * time.Second), JobID: "b1", Kind: "log", Text: "checking for cc... yes\r\ncompiling main.c\n"})
	tt.wantView("app.toml  00:00:02  compiling main.c")

	tt.events(status("b1", "build: "+strings.Repeat("make -j8 all ", 20), 3*time.Second))
	tt.send(tea.WindowSizeMsg{Width: 40, Height: 24})
	for _, l := range strings.Split(tt.view(), "\n") {
		if w := ansi.StringWidth(l); w > 40 {
			t.Errorf("line wider than 40 (%d): %q", w, l)
		}
	}
	tt.wantView("> build  app.toml  00:00:03  build: mak…")

	tt.events(queues.JobStart{Base: at(4 * time.Second), JobID: "f1", Action: queues.Fetch, Element: "base.toml", Attempt: 2})
	tt.send(tea.WindowSizeMsg{Width: 120, Height: 24})
	tt.wantView("fetch  base.toml  00:00:00  attempt 2")

	tt.events(queues.JobEnd{Base: at(5 * time.Second), JobID: "b1", Result: queues.ResultSuccess})
	tt.wantNotView("app.toml")
	tt.events(queues.JobEnd{Base: at(5 * time.Second), JobID: "f1", Result: queues.ResultSuccess})
	tt.wantView("no jobs running")
}

func TestTUIProgressBarWhenTheTotalIsKnown(t *testing.T) {
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start(), jobStart("f1", queues.Fetch, "base.toml", 0),
		queues.JobMessage{Base: at(time.Second), JobID: "f1", Kind: "progress", Done: 3 << 20, Total: 12 << 20})
	tt.wantView("fetch  base.toml  00:00:01  ████░░░░░░░░░░░░  25% 3.0 MiB/12.0 MiB")
	tt.events(queues.JobMessage{Base: at(2 * time.Second), JobID: "f1", Kind: "progress", Done: 2048, Text: "downloading base.tar"})
	tt.wantView("base.toml  00:00:02  2.0 KiB  downloading base.tar")
	tt.wantNotView("%")
}

func TestTUIMoreJobsThanRows(t *testing.T) {
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start())
	for i := range 12 {
		tt.events(jobStart(fmt.Sprintf("b%d", i), queues.Build, fmt.Sprintf("e%02d.toml", i), 0))
	}
	tt.send(tea.WindowSizeMsg{Width: 80, Height: 10}) // 10 - 1 - 2 header lines: 7 rows, 6 jobs
	tt.wantView("e05.toml", "… and 6 more")
	tt.wantNotView("e06.toml")
	if n := strings.Count(tt.view(), "\n") + 1; n > 9 {
		t.Errorf("the live area has %d lines on a 10-line terminal:\n%s", n, tt.view())
	}
	tt.keys("down", "down", "down", "down", "down", "down", "j") // to e07: the window follows
	tt.wantView("> build  e07.toml", "… and 6 more")
	tt.wantNotView("e01.toml")
}

func TestTUISelectionMovesAndFollowsItsJob(t *testing.T) {
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start(), jobStart("a", queues.Build, "a.toml", 0), jobStart("b", queues.Build, "b.toml", 0), jobStart("c", queues.Build, "c.toml", 0))
	tt.wantView("> build  a.toml")
	tt.keys("down", "j")
	tt.wantView("> build  c.toml", "  build  a.toml")
	tt.keys("down") // stays on the last
	tt.wantView("> build  c.toml")
	tt.keys("up", "k", "up")
	tt.wantView("> build  a.toml")
	tt.keys("j")
	tt.events(queues.JobEnd{Base: at(time.Second), JobID: "a", Result: queues.ResultSuccess}) // b moves up, still selected
	tt.wantView("> build  b.toml")
	tt.events(queues.JobEnd{Base: at(time.Second), JobID: "b", Result: queues.ResultSuccess}) // c takes its place
	tt.wantView("> build  c.toml")
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

func TestTUILogViewFollowsTheLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "b1.log")
	writeFile(t, log, "configure: ok\nmake: entering\n")
	tt := newTester(t, TUIOptions{}, false)
	js := jobStart("b1", queues.Build, "app.toml", 0)
	js.LogPath = log
	tt.events(start(), jobStart("f1", queues.Fetch, "base.toml", 0), js)
	tt.keys("down", "enter")
	tt.wantView("log of build app.toml: "+log, "configure: ok", "make: entering", "esc back")
	tt.wantNotView("base.toml")

	// gantry's internal markers are left out, a line is shown once it is ended.
	writeFile(t, log, "[12:00:00.000] [slot done]\n[12:00:00.001] [available] x\nhalf a ")
	tt.tick(t0.Add(time.Second / 2))
	tt.wantNotView("[slot done]", "[available]", "half a")
	writeFile(t, log, "line\n")
	tt.tick(t0.Add(time.Second * 3 / 4))
	tt.wantView("half a line")

	writeFile(t, log, "cc -c main.c\n")
	tt.wantNotView("cc -c main.c")
	tt.tick(t0.Add(time.Second))
	tt.wantView("make: entering", "cc -c main.c")

	// A long log: the view follows its end while the user stays at the bottom.
	for i := range 40 {
		writeFile(t, log, fmt.Sprintf("line %d\n", i))
	}
	tt.tick(t0.Add(2 * time.Second))
	tt.wantView("line 39")
	tt.keys("pgup")
	writeFile(t, log, "after scrolling up\n")
	tt.tick(t0.Add(3 * time.Second))
	tt.wantNotView("after scrolling up", "line 39")
	tt.keys("g")
	tt.wantView("configure: ok")
	tt.keys("G") // the end, and following again
	tt.wantView("after scrolling up")
	// The job ends: the view stays, keeps reading and scrolling.
	tt.events(queues.JobEnd{Base: at(4 * time.Second), JobID: "b1", Action: queues.Build, Element: "app.toml", Result: queues.ResultSuccess, LogPath: log})
	writeFile(t, log, "[success]\n")
	tt.tick(t0.Add(5 * time.Second))
	tt.wantView("log of build app.toml", "[success]")
	tt.keys("g")
	tt.wantView("configure: ok")

	tt.keys("esc")
	tt.wantView("base.toml")
	tt.wantNotView("log of")
	tt.keys("up", "l")
	tt.wantView("log of fetch base.toml")
	tt.keys("q") // q leaves the log view, it does not quit
	tt.wantNotView("log of")
	tt.wantCmds()
}

func TestTUILogViewOfAMissingLogSaysWhy(t *testing.T) {
	tt := newTester(t, TUIOptions{}, false)
	js := jobStart("b1", queues.Build, "app.toml", 0)
	js.LogPath = filepath.Join(t.TempDir(), "none.log")
	tt.send(tea.WindowSizeMsg{Width: 300, Height: 24})
	tt.events(start(), js).keys("enter")
	tt.wantView("log of build app.toml", "no such file")
	if n := strings.Count(tt.view(), "\n") + 1; n > 23 {
		t.Errorf("the live area has %d lines on a 24-line terminal", n)
	}
}

func TestTUIKeysSteerTheSession(t *testing.T) {
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start(), jobStart("b1", queues.Build, "app.toml", 0))

	tt.keys("s")
	tt.wantCmds(queues.CmdSuspend)
	tt.keys("s") // the display only knows it is suspended from the event
	tt.wantCmds(queues.CmdSuspend)
	tt.events(queues.Suspended{Base: at(time.Second)})
	tt.keys("s")
	tt.wantCmds(queues.CmdResume)
	tt.events(queues.Resumed{Base: at(2 * time.Second)})

	tt.keys("t")
	tt.wantView("terminate running jobs? y/N")
	tt.wantCmds()
	tt.keys("n")
	tt.wantNotView("terminate running jobs?")
	tt.wantCmds()
	tt.keys("t", "y")
	tt.wantCmds(queues.CmdTerminate)
	tt.wantView("terminating running jobs")

	tt.keys("q")
	tt.wantCmds(queues.CmdQuit)
	tt.wantView("quitting: no new jobs start")

	tt.wantNotView("ctrl+z stop")
	tt.keys("?")
	tt.wantView("s suspend/resume · q quit · t terminate", "processed, skipped, failed, running, waiting")
	tt.keys("?")
	tt.wantNotView("ctrl+z stop")
	tt.wantCmds()

	tt.keys("ctrl+z")
	if len(tt.out) != 1 || tt.out[0] != (tea.SuspendMsg{}) {
		t.Errorf("ctrl+z gave %v, want tea.Suspend", tt.out)
	}
}

func TestTUICtrlCAsksWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		name      string
		suspended bool // jobs are suspended before Ctrl-C
		keys      []string
		want      []queues.Command
		view      string
	}{
		{"enter continues", false, []string{"enter"}, []queues.Command{queues.CmdSuspend, queues.CmdResume}, ""},
		{"c continues", false, []string{"c"}, []queues.Command{queues.CmdSuspend, queues.CmdResume}, ""},
		{"q quits, then resumes", false, []string{"q"}, []queues.Command{queues.CmdSuspend, queues.CmdQuit, queues.CmdResume}, "quitting"},
		{"t terminates", false, []string{"t"}, []queues.Command{queues.CmdSuspend, queues.CmdTerminate}, "terminating"},
		{"second ctrl+c terminates", false, []string{"ctrl+c"}, []queues.Command{queues.CmdSuspend, queues.CmdTerminate}, "terminating"},
		{"other keys wait", false, []string{"x", "s"}, []queues.Command{queues.CmdSuspend}, "continue / quit / terminate? [C/q/t]"},
		{"continue leaves suspended jobs so", true, []string{"c"}, nil, "SUSPENDED"},
		{"quit leaves suspended jobs so", true, []string{"q"}, []queues.Command{queues.CmdQuit}, "quitting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt := newTester(t, TUIOptions{}, false)
			tt.events(start(), jobStart("b1", queues.Build, "app.toml", 0))
			if tc.suspended {
				tt.events(queues.Suspended{Base: at(time.Second)})
			}
			tt.keys("ctrl+c")
			tt.wantView("continue / quit / terminate? [C/q/t]")
			tt.keys(tc.keys...)
			tt.wantCmds(tc.want...)
			if tc.view != "" {
				tt.wantView(tc.view)
			}
			if !strings.HasPrefix(tc.view, "continue") {
				tt.wantNotView("continue / quit / terminate?")
			}
		})
	}
}

func TestTUIHeldFailureAsksForAnAnswer(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want queues.Command
	}{
		{"c", queues.CmdContinue}, {"q", queues.CmdQuit}, {"t", queues.CmdTerminate}, {"r", queues.CmdRetry},
	} {
		t.Run(tc.key, func(t *testing.T) {
			tt := newTester(t, TUIOptions{}, false)
			tt.events(start(), jobStart("b1", queues.Build, "app.toml", 0), queues.Suspended{Base: at(3 * time.Second)}, held(""))
			tt.wantView("build of app.toml failed: build-commands: `make` exited with status 2",
				"c continue · q quit · t terminate · r retry · l log")
			tt.wantNotView("s shell", "more")
			tt.keys(tc.key)
			tt.wantCmds(tc.want)
			tt.wantNotView("failed:", "r retry")
		})
	}

	// Without a shell, s is not suspend while the question is up: it does nothing.
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start(), held("")).keys("s", "x", "?")
	tt.wantCmds()
	tt.wantView("r retry", "ctrl+z stop")
	// The next held failure comes after the answer.
	tt.keys("c").events(queues.Held{Base: at(4 * time.Second), Action: queues.Fetch, Element: "base.toml", Error: "404"})
	tt.wantCmds(queues.CmdContinue)
	tt.wantView("fetch of base.toml failed: 404")
}

func TestTUIHeldFailureShowsItsLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "b1.log")
	writeFile(t, log, "make: *** [all] Error 2\n")
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start(), held(log)).keys("l")
	tt.wantView("log of build app.toml", "make: *** [all] Error 2", "app.toml failed", "esc back to the question")
	tt.wantNotView("r retry")
	tt.keys("c") // keys other than esc and q scroll the log
	tt.wantCmds()
	tt.keys("esc")
	tt.wantView("c continue · q quit · t terminate · r retry · l log")
	tt.wantNotView("make: ***")
	tt.keys("r")
	tt.wantCmds(queues.CmdRetry)
}

func TestTUIHeldFailureOpensAShell(t *testing.T) {
	var asked []string
	shell := func(element string) *exec.Cmd {
		asked = append(asked, element)
		return exec.Command("true")
	}
	tt := newTester(t, TUIOptions{Shell: shell}, false)
	tt.events(start(), held(""))
	tt.wantView("l log · s shell")
	tt.keys("s")
	tt.wantCmds()
	if !slices.Equal(asked, []string{"app.toml"}) {
		t.Errorf("shell asked for %v, want [app.toml]", asked)
	}
	if len(tt.out) != 1 || fmt.Sprintf("%T", tt.out[0]) != "tea.execMsg" {
		t.Fatalf("s gave %#v, want tea.ExecProcess's message", tt.out)
	}
	tt.send(shellDoneMsg{fmt.Errorf("exit status 1")})
	tt.wantView("shell: exit status 1", "s shell") // back to the question
}

func TestTUISessionEndClearsTheLiveAreaAndQuits(t *testing.T) {
	tt := newTester(t, TUIOptions{}, false)
	tt.events(start(), jobStart("b1", queues.Build, "app.toml", 0))
	if tt.view() == "" {
		t.Fatal("empty view while the session runs")
	}
	tt.events(queues.SessionEnd{Base: at(time.Second), Summary: &queues.Summary{Project: "demo"}})
	if v := tt.view(); v != "" {
		t.Errorf("view after SessionEnd = %q, want empty", v)
	}
	if len(tt.out) != 1 || tt.out[0] != (tea.QuitMsg{}) {
		t.Errorf("SessionEnd gave %v, want tea.Quit", tt.out)
	}
	tt.out = nil
	tt.tick(t0.Add(2 * time.Second))
	if len(tt.out) != 0 {
		t.Errorf("a tick after the end gave %v", tt.out)
	}
}

func TestHistoryLinesForFinishedJobsAndNotices(t *testing.T) {
	log := writeLog(t)
	h := history{opts: Options{ErrorLines: 3}}
	for _, tc := range []struct {
		e    queues.Event
		want string
	}{
		{start(), ""},
		{jobStart("b1", queues.Build, "app.toml", 0), ""},
		{status("b1", "build: make", time.Second), ""},
		{queues.JobEnd{Base: at(3 * time.Second), Action: queues.Build, Element: "app.toml", Result: queues.ResultSuccess, Duration: 3100 * time.Millisecond},
			"[00:00:03] build  app.toml  ok  3.1s"},
		{queues.Suspended{Base: at(4 * time.Second)}, "[00:00:04] all jobs suspended"},
		{queues.Resumed{Base: at(10 * time.Second)}, "[00:00:04] all jobs resumed"},
		{queues.JobEnd{Base: at(11 * time.Second), Action: queues.Fetch, Element: "base.toml", Result: queues.ResultFailure, Error: "connection reset\nat ...", WillRetry: true, Duration: time.Second},
			"[00:00:05] fetch  base.toml  failed, will retry  1s  connection reset"},
		{queues.JobEnd{Base: at(12 * time.Second), Action: queues.Build, Element: "lib.toml", Result: queues.ResultTerminated, Duration: 2 * time.Second},
			"[00:00:06] build  lib.toml  terminated  2s"},
		{queues.JobEnd{Base: at(12 * time.Second), Action: queues.Pull, Element: "lib.toml", Result: queues.ResultSkipped, Error: "not in the remote", Duration: 200 * time.Millisecond},
			"[00:00:06] pull   lib.toml  skipped  200ms  not in the remote"},
		{queues.Notice{Base: at(13 * time.Second), Level: "warning", Element: "app.toml", Text: "no sources"}, "[00:00:07] warning: app.toml: no sources"},
		{queues.ElementSkipped{Base: at(13 * time.Second), Action: queues.Pull, Element: "x.toml", Reason: "cached"}, ""},
		{queues.JobEnd{Base: at(14 * time.Second), Action: queues.Build, Element: "app.toml", Result: queues.ResultFailure, Error: "exit status 2", LogPath: log, Duration: time.Second},
			"[00:00:08] build  app.toml  FAILED  1s  exit status 2\n    line d\n    line e\n    make: *** [all] Error 2\n    (full log: " + log + ")"},
	} {
		if got := h.text(tc.e); got != tc.want {
			t.Errorf("%T: got\n%q\nwant\n%q", tc.e, got, tc.want)
		}
	}

	v := history{opts: Options{Verbose: true}}
	v.text(start())
	for e, want := range map[queues.Event]string{
		queues.JobStart{Base: at(time.Second), Action: queues.Build, Element: "app.toml", LogPath: "/l", Attempt: 2}:          "[00:00:01] build  app.toml  started (attempt 2)  /l",
		queues.JobMessage{Base: at(2 * time.Second), Action: queues.Build, Element: "app.toml", Kind: "status", Text: "make"}: "[00:00:02] build  app.toml  status  make",
		queues.ElementSkipped{Base: at(3 * time.Second), Action: queues.Pull, Element: "x.toml", Reason: "cached"}:            "[00:00:03] pull   x.toml  skipped  cached",
	} {
		if got := v.text(e); got != want {
			t.Errorf("verbose %T: got %q, want %q", e, got, want)
		}
	}
}

// syncBuffer is a bytes.Buffer for a writer and a reader in different goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTUIProgramEndToEnd(t *testing.T) {
	log := writeLog(t)
	in, keys := io.Pipe()
	defer keys.Close()
	var out syncBuffer
	ctl := &fakeCtl{ch: make(chan queues.Command, 16)}
	d := NewTUI(TUIOptions{Options: Options{ErrorLines: 2}, In: in, Out: &out})
	d.Start(ctl)

	events := session(log)
	d.Handle(events[0])
	d.Handle(events[1])
	if _, err := keys.Write([]byte("s")); err != nil {
		t.Fatal(err)
	}
	ctl.waitFor(t, queues.CmdSuspend)
	for _, e := range events[2:] {
		d.Handle(e)
	}
	if err := d.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	got := out.String()
	// The history line, longer than the 80 columns assumed, is wrapped by gantry:
	// a line as wide as the terminal would leave the live area's tail on its last row.
	wantContains(t, "output", got,
		"[00:00:03] build  app.toml  FAILED  3s  build-commands: `make` exited with stat",
		"    make: *** [all] Error 2",
		"(full log: "+log+")",
		"\nSession summary: demo, 4s\n",
		"  top.toml: dependency app.toml failed\n")
	for _, l := range strings.Split(ansi.Strip(got), "\n") {
		if w := ansi.StringWidth(strings.TrimRight(l, "\r")); w >= 80 {
			t.Errorf("a line of %d columns on an 80-column terminal: %q", w, l)
		}
	}
	if i, j := strings.Index(got, "FAILED"), strings.Index(got, "Session summary"); i < 0 || j < i {
		t.Errorf("the summary should come after the history:\n%s", got)
	}
	d.Handle(queues.Notice{Base: at(5 * time.Second), Text: "late"}) // must not block
}

func TestTUIFallsBackToPlainWhenTheProgramPanics(t *testing.T) {
	var out syncBuffer
	ctl := &fakeCtl{ch: make(chan queues.Command, 16)}
	d := NewTUI(TUIOptions{In: nil, Out: &out})
	d.hook = func(e queues.Event) {
		if _, ok := e.(queues.Held); ok {
			panic("test: the display breaks on a held failure")
		}
	}
	d.Start(ctl)
	d.Handle(start())
	d.Handle(jobStart("b1", queues.Build, "app.toml", 0))
	d.Handle(jobStart("b2", queues.Build, "lib.toml", 0))
	d.Handle(queues.JobEnd{Base: at(time.Second), JobID: "b1", Action: queues.Build, Element: "app.toml", Key: key, Result: queues.ResultFailure, Error: "exit status 2"})
	d.Handle(held(""))
	ctl.waitFor(t, queues.CmdQuit) // nobody can answer any more: the default policy

	d.Handle(queues.JobEnd{Base: at(2 * time.Second), JobID: "b2", Action: queues.Build, Element: "lib.toml", Key: key, Result: queues.ResultSuccess, Duration: 2 * time.Second})
	d.Handle(queues.Held{Base: at(3 * time.Second), Action: queues.Fetch, Element: "base.toml"})
	ctl.waitFor(t, queues.CmdQuit)
	d.Handle(queues.SessionEnd{Base: at(4 * time.Second), Summary: &queues.Summary{Project: "demo", Elapsed: 4 * time.Second}})
	err := d.Wait()
	if err == nil || !strings.Contains(err.Error(), "panic") {
		t.Errorf("Wait = %v, want the panic", err)
	}
	got := out.String()
	wantContains(t, "output", got,
		"gantry: the terminal display failed (program was killed: program experienced a panic); showing plain progress\n",
		"[00:00:02][1a2b3c4d][build:lib.toml] SUCCESS",
		"fetch of base.toml failed and there is no terminal display to ask what to do: quitting")
	if n := strings.Count(got, "Session summary"); n != 1 {
		t.Errorf("summary printed %d times:\n%s", n, got)
	}
	if c := ctl.take(); len(c) != 2 {
		t.Errorf("commands = %v, want one quit per held failure", c)
	}
}

// With a quota, the header shows the cache's usage against it, measured at most every
// usageEvery and only after something was stored.
func TestTUICacheUsage(t *testing.T) {
	calls := 0
	o := TUIOptions{CacheQuota: 10 << 20, CacheUsage: func() (int64, error) { calls++; return 12 << 20, nil }}
	tt := newTester(t, o, false)
	tt.events(queues.SessionStart{Base: queues.Base{Time: t0}, Project: "demo", Queues: []queues.Action{queues.Build}})
	if strings.Contains(tt.m.View(), "cache") {
		t.Errorf("usage shown before it was measured:\n%s", tt.m.View())
	}
	tt.send(tickMsg(t0.Add(time.Second)))
	if !strings.Contains(tt.m.View(), "cache 12.0 MiB / 10.0 MiB") || calls != 1 {
		t.Fatalf("after the first tick (%d measurements):\n%s", calls, tt.m.View())
	}
	tt.send(tickMsg(t0.Add(5 * time.Second)))
	if calls != 1 {
		t.Errorf("measured again with nothing stored (%d measurements)", calls)
	}
	tt.events(queues.JobEnd{Base: queues.Base{Time: t0.Add(6 * time.Second)}, JobID: "b", Action: queues.Build, Element: "a", Result: queues.ResultSuccess})
	tt.send(tickMsg(t0.Add(6 * time.Second)))
	if calls != 2 {
		t.Errorf("not measured again after a build stored an artifact (%d measurements)", calls)
	}
	none := newTester(t, TUIOptions{CacheUsage: o.CacheUsage}, false)
	none.send(tickMsg(t0.Add(time.Minute)))
	if calls != 2 || strings.Contains(none.m.View(), "cache") {
		t.Errorf("usage measured or shown without a quota (%d measurements)", calls)
	}
}

// The header shows the session's progress as a bar and the ETA the scheduler
// estimated, counted down between counter changes (and not while suspended).
func TestTUIHeaderShowsProgressAndETA(t *testing.T) {
	tt := newTester(t, TUIOptions{NoColor: true}, false)
	tt.events(start(), queues.Counts{Base: at(time.Second), Done: 1, Total: 3, Remaining: 90 * time.Second})
	tt.wantView("1/3 elements ", "~1m30s left")
	if !strings.ContainsAny(strings.SplitN(tt.view(), "\n", 2)[0], "█░") {
		t.Errorf("no progress bar in the header:\n%s", tt.view())
	}
	tt.tick(t0.Add(31 * time.Second))
	tt.wantView("~1m0s left")
	tt.events(queues.Suspended{Base: at(31 * time.Second)})
	tt.tick(t0.Add(61 * time.Second))
	tt.wantView("~1m0s left")
	tt.events(queues.Counts{Base: at(61 * time.Second), Done: 3, Total: 3})
	tt.wantNotView("left")
}

// Plain output prints the progress and the ETA every half minute at most.
func TestPlainPeriodicStatusHasETA(t *testing.T) {
	var out bytes.Buffer
	d := NewPlain(&out, Options{})
	d.Handle(start())
	d.Handle(queues.Counts{Base: at(10 * time.Second), Done: 0, Total: 3, Remaining: 2 * time.Minute})
	d.Handle(queues.Counts{Base: at(40 * time.Second), Done: 1, Total: 3, Remaining: 90 * time.Second})
	d.Handle(queues.Counts{Base: at(50 * time.Second), Done: 2, Total: 3, Remaining: 80 * time.Second})
	got := out.String()
	if n := strings.Count(got, "STATUS"); n != 1 {
		t.Errorf("want one STATUS line, got %d:\n%s", n, got)
	}
	wantContains(t, "plain output", got, "[00:00:40][        ][session] STATUS   1/3 elements, ~1m30s left\n")
}
