package cli

import (
	"errors"
	"io/fs"
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

// At a terminal, with a cache quota (the display shows the cache's usage against it), a
// project that does not load leaves no cache behind either; one that loads makes it,
// and a quota of a share of the disk is taken from the filesystem it is made on.
func TestE2ETUIQuotaMakesTheCacheOnlyOnceLoaded(t *testing.T) {
	t.Parallel()
	requireTmux(t)
	broken := newE2EProject(t, map[string]string{
		"project.toml":      projectTOML("app.toml"),
		"elements/app.toml": "kind = \"manual\"\ndepends = [\"lib.toml\"\n",
	})
	code, screen := broken.startInTmux("build", "--cache-quota", "50%").waitExit()
	if code != 2 || !strings.Contains(screen, "invalid TOML") {
		t.Errorf("gantry exited with %d, want 2 and the load's error; the screen:\n%s", code, screen)
	}
	if _, err := os.Stat(broken.cache); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the cache directory of a project that does not load: %v, want it absent", err)
	}
	fine := newE2EProject(t, map[string]string{
		"project.toml":      projectTOML("app.toml"),
		"elements/app.toml": manualElement(nil, "true"),
	})
	code, screen = fine.startInTmux("build", "--cache-quota", "50%", "--sandbox", "host").waitExit()
	if code != 0 || !strings.Contains(screen, "Success.") {
		t.Errorf("gantry exited with %d, want 0 and a summary; the screen:\n%s", code, screen)
	}
	if st := fine.state("app.toml"); st != "cached" {
		t.Errorf("app.toml is %q after the session, want cached", st)
	}
}
