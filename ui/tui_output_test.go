package ui

import (
	"io"
	"os"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
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

// liveOutput repairs the frame on the screen — the view the model made last when
// the renderer last wrote — however many sizes come before the next write: a second
// resize (the terminal sends two) must not take the new view, not yet drawn, for
// the old one. Nothing is repaired before a frame is drawn.
func TestLiveOutputRepairsTheFrameOnTheScreen(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "tty")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o := &liveOutput{File: f}
	wide := "[00:00:03] demo  3/5 elements ██████████░░░░░░  ? keys\n  build a.toml"
	o.resized(100) // the program's first size: nothing drawn yet
	o.latest(wide)
	io.WriteString(o, "<frame at 100>")
	o.latest("[00:00:03] demo  3/5 elements ██████░░░░  ? keys\n  build a.toml") // made at 50, not drawn
	o.resized(50)
	o.resized(50)
	io.WriteString(o, "<frame at 50>")
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if want := "<frame at 100>" + reflowErase(wide, 50) + "<frame at 50>"; string(b) != want {
		t.Errorf("written %q, want %q", b, want)
	}
}
