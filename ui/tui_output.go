package ui

import (
	"bytes"
	"os"
	"slices"
	"strconv"
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
// The frame on the screen is the one the renderer wrote last, and the renderer's
// writes say which it is: each view the model makes is marked (mark), and a write
// that draws it carries the mark, which Write books and takes out. The renderer
// may write the view made before the latest one — when its ticker fires between
// the model's View and the renderer taking the view — so "the latest view" would
// be the wrong frame, one with other lines.
type liveOutput struct {
	*os.File
	mu      sync.Mutex
	made    []markedView // the view on the screen and those made since, the latest last (at most three)
	next    int          // the number of the next view made
	shown   string       // the view on the screen; "" until one is drawn
	pending string       // written before the next write
}

// markedView is a view as the renderer draws it, and its number in its mark.
type markedView struct {
	n     int
	drawn string
}

// A view's mark is an APC string, of no width to the renderer and never written to
// the terminal: markPrefix, the view's number, markEnd.
const markPrefix, markEnd = "\x1b_gantry-frame ", "\x1b\\"

// mark books the view v the model made, drawn as the renderer draws it, and returns
// v marked: its last line (the renderer draws it whenever it draws the frame, and
// never cuts it) starts with the mark, which differs from the last view's only when
// the view does, so an unchanged view still draws nothing.
func (o *liveOutput) mark(v, drawn string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.made) == 0 || o.made[len(o.made)-1].drawn != drawn {
		o.made = append(o.made, markedView{n: o.next, drawn: drawn})
		o.next++
		if len(o.made) > 3 { // the renderer writes the latest view or the one before, or again the one it wrote
			o.made = o.made[len(o.made)-3:]
		}
	}
	m := markPrefix + strconv.Itoa(o.made[len(o.made)-1].n) + markEnd
	i := strings.LastIndexByte(v, '\n') + 1
	return v[:i] + m + v[i:]
}

// Write writes the pending repair, if any, then b without its mark; a mark books
// the view it draws as the one on the screen.
func (o *liveOutput) Write(b []byte) (int, error) {
	o.mu.Lock()
	pending := o.pending
	o.pending = ""
	out := b
	if i := bytes.Index(b, []byte(markPrefix)); i >= 0 {
		if j := bytes.Index(b[i:], []byte(markEnd)); j >= 0 {
			n, err := strconv.Atoi(string(b[i+len(markPrefix) : i+j]))
			out = slices.Concat(b[:i], b[i+j+len(markEnd):])
			for k, v := range o.made {
				if err == nil && v.n == n {
					o.shown, o.made = v.drawn, o.made[k:]
					break
				}
			}
		}
	}
	o.mu.Unlock()
	if pending != "" {
		if _, err := o.File.WriteString(pending); err != nil {
			return 0, err
		}
	}
	if _, err := o.File.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// WriteString is Write: the embedded file's would bypass it.
func (o *liveOutput) WriteString(s string) (int, error) { return o.Write([]byte(s)) }

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
