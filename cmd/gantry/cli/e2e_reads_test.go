package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gantry-build/gantry/cache"
)

// Only the commands that use them read the project's outcome memo (build, and fetch
// planning what a build needs) and the learnt build durations (build): track, pull,
// push and fetch --deps all read neither. Each file here is a FIFO that nobody writes,
// whose read blocks for ever, so a command that reads it does not finish.
func TestE2EOnlyBuildReadsMemoAndStats(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{
		"project.toml":      projectTOML("app.toml"),
		"elements/app.toml": manualElement(nil, "true"),
	})
	if _, err := cache.Open(p.cache); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"stats", "loads/outcomes.e2e"} {
		path := filepath.Join(p.cache, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, stderr := p.mustRun(0, "track"); !strings.Contains(stderr, "all refs are up to date") {
		t.Errorf("track said:\n%s", stderr)
	}
	p.mustRun(0, "fetch", "--deps", "all")
	for _, cmd := range []string{"pull", "push"} {
		// No remote: the usage error comes once the pipeline is open.
		if _, stderr := p.mustRun(2, cmd); !strings.Contains(stderr, "no remote artifact cache") {
			t.Errorf("%s said:\n%s", cmd, stderr)
		}
	}
}
