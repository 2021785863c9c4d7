package sandbox

import "fmt"

// MachineError says that this machine or this sysroot cannot run the requested
// sandbox at all: a fault to fix before building, never the element's failure.
type MachineError struct{ Msg string }

func (e *MachineError) Error() string { return e.Msg }

// CheckAvailable reports, as a *MachineError naming the fix, why the kind of
// sandbox asked for cannot run on this machine: bwrap missing or not working.
// Host and Auto always can (Auto falls back to the host).
func CheckAvailable(k Kind) error {
	if k != Bwrap {
		return nil
	}
	if ok, why := probeBwrap(); !ok {
		return bwrapUnavailable(why)
	}
	return nil
}

// CheckAvailableNow is CheckAvailable asking again each time rather than once per
// process: for a long-lived `gantry worker`, whose machine may change under it.
func CheckAvailableNow(k Kind) error {
	if k != Bwrap {
		return nil
	}
	if ok, why := runProbe(); !ok {
		return bwrapUnavailable(why)
	}
	return nil
}

func bwrapUnavailable(why string) error {
	return &MachineError{Msg: fmt.Sprintf("--sandbox bwrap: bwrap does not work on this machine (%s): install bubblewrap, or use --sandbox host", why)}
}

// CheckSysroot reports, as a *MachineError naming the fix, why commands cannot
// run under kind k in the staged sysroot: under bwrap the sysroot must provide
// /bin/sh. It checks CheckAvailable too.
func CheckSysroot(k Kind, sysroot string) error {
	if err := CheckAvailable(k); err != nil || k != Bwrap {
		return err
	}
	if err := checkShell(sysroot); err != nil {
		return &MachineError{Msg: fmt.Sprintf("--sandbox bwrap: the sysroot has no usable /bin/sh (%v): add a base element that provides it, or use --sandbox host", err)}
	}
	return nil
}
