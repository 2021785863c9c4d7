package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/ui"
)

// Exit codes (DESIGN.md §8).
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitHangup      = 129 // 128 + SIGHUP
	exitInterrupted = 130 // 128 + SIGINT, and the user's own interruption (TUI keys)
	exitTerminated  = 143 // 128 + SIGTERM
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

// errHangup ends a session that SIGHUP (its terminal or connection closed) terminated:
// exit code 129.
var errHangup = fmt.Errorf("%w by SIGHUP", errInterrupted)

// errTerminated ends a session that SIGTERM (a CI runner's cancel, a service
// manager) terminated: exit code 143.
var errTerminated = fmt.Errorf("%w by SIGTERM", errInterrupted)

// exitCode maps an error to the process exit code and reports it once, as a line or,
// under --ui json, as an error event.
func exitCode(err error, ios *IOStreams) int {
	if err == nil {
		return exitOK
	}
	code, text := classify(err)
	if text == "" {
		return code
	}
	if ios.jsonErr {
		ui.WriteJSONError(ios.ErrOut, text, code)
	} else {
		fmt.Fprintf(ios.ErrOut, "gantry: %s\n", text)
	}
	return code
}

// classify returns err's exit code and the text to report ("" when it was reported
// already).
func classify(err error) (int, string) {
	var ue *usageError
	var pe *element.ProjectError
	var fe *failedError
	var xe *exitStatusError
	switch {
	case errors.As(err, &xe):
		return xe.code, ""
	case errors.Is(err, errHangup):
		return exitHangup, errHangup.Error()
	case errors.Is(err, errTerminated):
		return exitTerminated, errTerminated.Error()
	case errors.Is(err, errInterrupted) || errors.Is(err, context.Canceled):
		return exitInterrupted, "interrupted"
	case errors.As(err, &fe):
		return exitFailure, fe.msg
	case errors.As(err, &ue), errors.As(err, &pe):
		return exitUsage, err.Error()
	}
	return exitFailure, err.Error()
}
