package ui

import (
	"os"
	"strings"
	"sync"

	"github.com/charmbracelet/x/ansi"
)

// liveOutput is the terminal as the TUI's program writes to it (a *os.File, so
// that the program still finds the terminal's size). It exists for one repair:
// after the terminal got narrower, the terminal reflowed the lines of the live area
// that were wider than that onto more rows than the renderer knows of, and the
// renderer, moving up only over the lines it drew, left copies of the header and
// counters above its next frame. Before that frame, liveOutput writes what
// reflowErase made of the frame on the screen: up over every row of it, erase
// below, and back.
//
// The frame on the screen is the view the model made last when the renderer last
// wrote (its buffer always holds the latest view): the model tells each view it
// makes (latest), each write books it as shown.
type liveOutput struct {
	*os.File
	mu      sync.Mutex
	view    string // the latest view, as the renderer draws it (see tuiModel.drawn)
	shown   string // the view on the screen; "" until one is drawn
	pending string // written before the next write
}

// Write writes the pending repair, if any, then b, which draws the latest view.
func (o *liveOutput) Write(b []byte) (int, error) {
	o.mu.Lock()
	pending := o.pending
	o.pending, o.shown = "", o.view
	o.mu.Unlock()
	if pending != "" {
		if _, err := o.File.WriteString(pending); err != nil {
			return 0, err
		}
	}
	return o.File.Write(b)
}

// WriteString is Write: the embedded file's would bypass it.
func (o *liveOutput) WriteString(s string) (int, error) { return o.Write([]byte(s)) }

// latest books the view the model made last.
func (o *liveOutput) latest(view string) {
	o.mu.Lock()
	o.view = view
	o.mu.Unlock()
}

// resized books the repair of the frame on the screen, now that the terminal is
// width columns wide, for the next write: in place of one booked before, which was
// made of the same frame (nothing was written since) at an older width.
func (o *liveOutput) resized(width int) {
	o.mu.Lock()
	if o.shown != "" {
		o.pending = reflowErase(o.shown, width)
	}
	o.mu.Unlock()
}

// reflowErase is what erases frame, the live area last drawn (its lines, the cursor
// at the start of the last one, as the renderer leaves it), once the terminal is
// width columns wide and has reflowed it: each line takes as many rows as it needs
// at width. The cursor goes up over them all, the screen below is erased, and the
// cursor comes back down to where the renderer expects it — as many lines below as
// it drew — so that its next frame, drawn from there, starts where the old one did.
// A terminal that cuts lines instead of reflowing them loses as many lines above the
// live area as the frame's rows would have grown; none is shown twice.
func reflowErase(frame string, width int) string {
	if width <= 0 {
		return ""
	}
	lines := strings.Split(frame, "\n")
	up := 0
	for _, l := range lines[:len(lines)-1] {
		up += max(1, (ansi.StringWidth(l)+width-1)/width)
	}
	var b strings.Builder
	b.WriteByte('\r')
	if up > 0 {
		b.WriteString(ansi.CursorUp(up))
	}
	b.WriteString(ansi.EraseScreenBelow)
	if down := len(lines) - 1; down > 0 {
		b.WriteString(ansi.CursorDown(down))
	}
	return b.String()
}
