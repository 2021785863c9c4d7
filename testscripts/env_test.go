package testscripts

import (
	"debug/elf"
	"slices"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gantry-build/gantry/sandbox"
)

// cmdSetenvStdout sets a variable to the last command's stdout, trimmed, or to its first
// N characters: `setenv-stdout KEY 8` after `exec gantry show --format '%{key}' app.toml`.
func cmdSetenvStdout(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: setenv-stdout NAME [N]")
	}
	v := strings.TrimSpace(ts.ReadFile("stdout"))
	if len(args) == 2 {
		n, err := strconv.Atoi(args[1])
		if err != nil || n > len(v) {
			ts.Fatalf("setenv-stdout: cannot take %s characters of %q", args[1], v)
		}
		v = v[:n]
	}
	ts.Setenv(args[0], v)
}

// haveBwrapSysroot reports whether bwrap works here and /bin/busybox is statically
// linked, so that a script can build under bwrap on a busybox sysroot.
func haveBwrapSysroot() bool {
	if sandbox.CheckAvailable(sandbox.Bwrap) != nil {
		return false
	}
	f, err := elf.Open("/bin/busybox")
	if err != nil {
		return false
	}
	defer f.Close()
	return !slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
}
