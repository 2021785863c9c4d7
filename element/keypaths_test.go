package element

import (
	"testing"

	"github.com/gantry-build/gantry/sandbox"
)

// TestKeyPathsAreTheSandboxPaths: keys are computed with the paths the bwrap sandbox
// shows the commands; were they to differ, a bwrap build would run with paths its key
// does not say.
func TestKeyPathsAreTheSandboxPaths(t *testing.T) {
	p := keyPaths()
	if p.BuildRoot != sandbox.DefaultSandboxBuildRoot || p.InstallRoot != sandbox.DefaultSandboxInstallRoot {
		t.Errorf("key paths build %q install %q, sandbox %q %q", p.BuildRoot, p.InstallRoot,
			sandbox.DefaultSandboxBuildRoot, sandbox.DefaultSandboxInstallRoot)
	}
}
