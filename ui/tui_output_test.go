package ui

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/gantry-build/gantry/queues"
)

// reflowErase goes up over every row the last frame takes once the terminal has
// reflowed it to the new width (a line wider than that takes more than one), erases
// below, and comes back down as many lines as the frame had, where the renderer
// expects the cursor.
func TestReflowErase(t *testing.T) {
	header, counters := "[00:00:03] demo  0/5 elements  ? keys", "fetch 0 ok 5 skip 0 fail 0 run 0 wait │ build 0 ok 0 skip 0 fail 2 run 0 wait"
	for _, tc := range []struct {
		name  string
		frame string
		width int
		want  string
	}{
		{"one line", " ", 80, "\r" + ansi.EraseScreenBelow},
		{"nothing wider", header + "\n" + counters + "\n  build a.toml", 100,
			"\r" + ansi.CursorUp(2) + ansi.EraseScreenBelow + ansi.CursorDown(2)},
		// The counters (79 columns) take two rows at 50, three at 30; the header
		// (37) one at 50, two at 30.
		{"narrower", header + "\n" + counters + "\n  build a.toml", 50,
			"\r" + ansi.CursorUp(3) + ansi.EraseScreenBelow + ansi.CursorDown(2)},
		{"much narrower", header + "\n" + counters + "\n  build a.toml", 30,
			"\r" + ansi.CursorUp(5) + ansi.EraseScreenBelow + ansi.CursorDown(2)},
		{"escape codes take no room", "\x1b[32m" + header + "\x1b[0m\n  build a.toml", 37,
			"\r" + ansi.CursorUp(1) + ansi.EraseScreenBelow + ansi.CursorDown(1)},
		{"unknown width", header, 0, ""},
	} {
		if got := reflowErase(tc.frame, tc.width); got != tc.want {
			t.Errorf("%s: reflowErase = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Ctrl-Z erases the live area before gantry stops (the program draws the empty
// view as it gives the terminal up), and it is drawn again only once the program
// has the terminal back and knows its size, in either order.
func TestTUIStopErasesTheLiveArea(t *testing.T) {
	for _, order := range [][]tea.Msg{
		{tea.ResumeMsg{}, tea.WindowSizeMsg{Width: 60, Height: 20}},
		{tea.WindowSizeMsg{Width: 60, Height: 20}, tea.ResumeMsg{}},
	} {
		tt := newTester(t, TUIOptions{NoColor: true}, false)
		tt.events(start())
		tt.wantView("elements")
		tt.keys("ctrl+z")
		if v := tt.view(); v != "" {
			t.Fatalf("after Ctrl-Z the view is\n%s\nwant it empty", v)
		}
		tt.send(order[0])
		if v := tt.view(); v != "" {
			t.Errorf("after %T alone the view is\n%s\nwant it empty until %T", order[0], v, order[1])
		}
		tt.send(order[1])
		tt.wantView("elements")
	}
}

// liveOutput repairs the frame the renderer wrote last, which its write names by
// the view's mark: the renderer's ticker can write the view made before the latest
// one (it fires between the model's View and the renderer taking the view), and a
// second resize (the terminal sends two) must not take the latest view, not yet
// drawn, for the one on the screen. Nothing is repaired before a frame is drawn;
// an unchanged view keeps its mark; no mark reaches the terminal.
func TestLiveOutputRepairsTheFrameOnTheScreen(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "tty")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o := &liveOutput{File: f}
	header := "[00:00:03] demo  3/5 elements ██████████░░░░░░  ? keys"
	first := header + "\n> build  a.toml  00:00:00  env: HOME=/tmp\n  build  b.toml"
	wide := header + "\n> build  a.toml  00:00:00  " + strings.Repeat("make -j8 ", 8) + "\n  build  b.toml"
	short := header + "\n> build  a.toml  00:00:00  a 2\n  build  b.toml"
	o.resized(100) // the program's first size: nothing drawn yet
	io.WriteString(o, "<up>"+o.mark(first, first))
	wideMarked := o.mark(wide, wide)
	shortMarked := o.mark(short, short)
	if again := o.mark(short, short); again != shortMarked {
		t.Errorf("the same view marked again is %q, want %q as before", again, shortMarked)
	}
	io.WriteString(o, "<up>"+wideMarked) // the ticker wrote the view before the latest
	o.resized(50)
	o.resized(50)
	io.WriteString(o, "<frame at 50>")
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if want := "<up>" + first + "<up>" + wide + reflowErase(wide, 50) + "<frame at 50>"; string(b) != want {
		t.Errorf("written %q, want %q", b, want)
	}
	io.WriteString(o, shortMarked) // the latest view drawn: made again, it draws nothing new
	if again := o.mark(short, short); again != shortMarked {
		t.Errorf("the view on the screen marked again is %q, want %q as it was drawn", again, shortMarked)
	}
}

// The resize repair counts the rows each line of the frame takes once the terminal
// has reflowed it from the line's text, but a terminal (tmux) reflows a row as wide
// as the widest text it held since it was last erased whole: a job's line cut to
// the full width, later "a 2" on the same row, still takes two rows at half the
// width. So each line of the live area erases its row whole before it is drawn, and
// the repair erases every row of the frame. rows models such a terminal.
func TestLiveViewRowsAreAsWideAsTheirText(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "tty")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tt := newTester(t, TUIOptions{NoColor: true}, false) // 80 columns
	tt.m.live = &liveOutput{File: f}
	var rows []int // the widest text each row held since it was last erased whole
	draw := func() string {
		v := tt.view()
		for i, l := range strings.Split(v, "\n") {
			if i == len(rows) {
				rows = append(rows, 0)
			}
			if strings.HasPrefix(l, ansi.EraseEntireLine) {
				rows[i] = 0
			}
			rows[i] = max(rows[i], ansi.StringWidth(l))
		}
		return v
	}
	tt.events(start(), jobStart("b1", queues.Build, "a.toml", 0), status("b1", "build: "+strings.Repeat("make -j8 all ", 20), 0),
		jobStart("b2", queues.Build, "b.toml", 0), status("b2", "b 1", 0))
	draw()
	if rows[2] != 80 {
		t.Fatalf("the job's line takes %d columns, want the full 80:\n%s", rows[2], tt.view())
	}
	tt.events(queues.JobMessage{Base: at(time.Second), JobID: "b1", Kind: "log", Text: "a 2\n"})
	frame := draw()
	const narrower = 40
	lines := strings.Split(frame, "\n")
	up := 0
	for _, w := range rows[:len(lines)-1] {
		up += max(1, (w+narrower-1)/narrower)
	}
	want := "\r" + ansi.CursorUp(up) + ansi.EraseScreenBelow + ansi.CursorDown(len(lines)-1)
	if got := reflowErase(tt.m.live.made[len(tt.m.live.made)-1].drawn, narrower); got != want {
		t.Errorf("at %d columns the repair is %q, want %q: the terminal's rows %v, the frame:\n%q", narrower, got, want, rows, frame)
	}
}
