package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gantry-build/gantry/element"
)

// Exit codes (DESIGN.md §8).
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// usageError is bad command-line usage: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// failedError is a session in which something failed (already reported): exit code 1.
type failedError struct{ msg string }

func (e *failedError) Error() string { return e.msg }

// errInterrupted ends a session the user interrupted: exit code 130.
var errInterrupted = errors.New("interrupted")

// exitCode maps an error to the process exit code and prints it once.
func exitCode(err error, w io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	var pe *element.ProjectError
	var fe *failedError
	var xe *exitStatusError
	switch {
	case errors.As(err, &xe):
		return xe.code
	case errors.Is(err, errInterrupted) || errors.Is(err, context.Canceled):
		fmt.Fprintln(w, "gantry: interrupted")
		return exitInterrupted
	case errors.As(err, &fe):
		if fe.msg != "" {
			fmt.Fprintf(w, "gantry: %s\n", fe.msg)
		}
		return exitFailure
	case errors.As(err, &ue), errors.As(err, &pe):
		fmt.Fprintf(w, "gantry: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(w, "gantry: %v\n", err)
	return exitFailure
}
