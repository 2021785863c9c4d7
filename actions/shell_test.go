package actions

import (
	"testing"

	"github.com/gantry-build/gantry/sandbox"
)

// The shell's environment adds a prompt and TERM to the build's, unless the
// element's own environment sets them; no TERM is dumb.
func TestShellEnv(t *testing.T) {
	for _, tc := range []struct {
		name, term     string
		build          map[string]string
		wantPS1, wantT string
	}{
		{"defaults", "xterm", map[string]string{"HOME": "/h"}, "[p/e.toml:$PWD]$ ", "xterm"},
		{"no TERM", "", map[string]string{}, "[p/e.toml:$PWD]$ ", "dumb"},
		{"element's own", "xterm", map[string]string{"PS1": "> ", "TERM": "vt100"}, "> ", "vt100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, hadPS1 := tc.build["PS1"]
			env := shellEnv(tc.build, tc.term, "p", "e.toml")
			if env["PS1"] != tc.wantPS1 || env["TERM"] != tc.wantT {
				t.Errorf("PS1=%q TERM=%q, want %q %q", env["PS1"], env["TERM"], tc.wantPS1, tc.wantT)
			}
			if _, hasPS1 := tc.build["PS1"]; hasPS1 != hadPS1 {
				t.Errorf("shellEnv changed the build environment it was given")
			}
		})
	}
}

// A shell and a build see the same tree: the host's paths, or bwrap's mounts.
func TestTreePaths(t *testing.T) {
	tr := workTree("/w", "/ws/build")
	host := tr.paths(sandbox.Host, "4")
	if host.BuildRoot != "/ws/build" || host.InstallRoot != "/w/install" || host.Sysroot != "/w/sysroot" || host.MaxJobs != "4" {
		t.Errorf("host paths = %+v", host)
	}
	bwrap := tr.paths(sandbox.Bwrap, "4")
	if bwrap.BuildRoot != sandbox.DefaultSandboxBuildRoot || bwrap.InstallRoot != sandbox.DefaultSandboxInstallRoot || bwrap.Sysroot != "/" || bwrap.MaxJobs != "4" {
		t.Errorf("bwrap paths = %+v", bwrap)
	}
}
