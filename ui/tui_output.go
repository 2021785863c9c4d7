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
// reflowErase made: up over every row of the old frame, erase below, and back.
type liveOutput struct {
	*os.File
	mu      sync.Mutex
	pending string // written before the next write
}

// Write writes the pending repair, if any, then b.
func (o *liveOutput) Write(b []byte) (int, error) {
	o.mu.Lock()
	pending := o.pending
	o.pending = ""
	o.mu.Unlock()
	if pending != "" {
		if _, err := o.File.WriteString(pending); err != nil {
			return 0, err
		}
	}
	return o.File.Write(b)
}

// before books seq to be written before the next write, in place of any booked
// earlier (a later resize knows better).
func (o *liveOutput) before(seq string) {
	o.mu.Lock()
	o.pending = seq
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
