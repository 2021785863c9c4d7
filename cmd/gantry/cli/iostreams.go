package cli

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/gantry-build/gantry/ui"
)

// IOStreams is the one way commands reach the terminal. Data goes to Out, progress and
// errors to ErrOut. Tests override the TTY detection.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdinTTY, stderrTTY bool
	// jsonErr: stderr carries JSON lines only (--ui json), so messages and the final
	// error are written as events. Set once the display mode is known.
	jsonErr bool
}

// Info writes an informational line to ErrOut, or under --ui json an info notice.
func (s *IOStreams) Info(text string) {
	if s.jsonErr {
		ui.WriteJSONNotice(s.ErrOut, "info", text)
		return
	}
	fmt.Fprintln(s.ErrOut, text)
}

// Message writes a message for the user that is not command output to ErrOut:
// "gantry: LEVEL: text" (just "gantry: text" for level "error"), or under --ui json a
// notice event, so that stderr stays JSON lines only.
func (s *IOStreams) Message(level, text string) {
	if s.jsonErr {
		ui.WriteJSONNotice(s.ErrOut, level, text)
		return
	}
	if level == "error" {
		fmt.Fprintf(s.ErrOut, "gantry: %s\n", text)
		return
	}
	fmt.Fprintf(s.ErrOut, "gantry: %s: %s\n", level, text)
}

// System returns the process's streams with TTY detection.
func System() *IOStreams {
	return &IOStreams{
		In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		stdinTTY:  term.IsTerminal(int(os.Stdin.Fd())),
		stderrTTY: term.IsTerminal(int(os.Stderr.Fd())),
	}
}

// IsStderrTTY reports whether progress goes to a terminal.
func (s *IOStreams) IsStderrTTY() bool { return s.stderrTTY }

// IsStdinTTY reports whether the user can answer prompts.
func (s *IOStreams) IsStdinTTY() bool { return s.stdinTTY }
