package testscripts

import (
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
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
