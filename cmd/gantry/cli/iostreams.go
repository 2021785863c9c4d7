package cli

import (
	"bytes"
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

// Note writes "gantry: text" to ErrOut, what gantry says while it waits or works
// (waiting for the cache lock), or under --ui json an info notice.
func (s *IOStreams) Note(text string) {
	if s.jsonErr {
		ui.WriteJSONNotice(s.ErrOut, "info", text)
		return
	}
	fmt.Fprintf(s.ErrOut, "gantry: %s\n", text)
}

// Lines is where a command's step writes what it prints as it works (patch's output):
// ErrOut, or under --ui json a writer that makes each line an info notice.
func (s *IOStreams) Lines() io.Writer {
	if !s.jsonErr {
		return s.ErrOut
	}
	return &noticeLines{ios: s}
}

// noticeLines writes each complete line as an info notice (IOStreams.Lines); a last
// line without its newline is dropped.
type noticeLines struct {
	ios     *IOStreams
	partial []byte
}

func (n *noticeLines) Write(p []byte) (int, error) {
	n.partial = append(n.partial, p...)
	for {
		i := bytes.IndexByte(n.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		n.ios.Info(string(n.partial[:i]))
		n.partial = n.partial[i+1:]
	}
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
