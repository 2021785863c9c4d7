package cli

import (
	"io"
	"os"

	"golang.org/x/term"
)

// IOStreams is the one way commands reach the terminal. Data goes to Out, progress and
// errors to ErrOut. Tests override the TTY detection.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdinTTY, stderrTTY bool
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
