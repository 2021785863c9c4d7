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
	// build runs `gantry build --cache-quota 50%` at a terminal on a project whose
	// app.toml is app, and wants it to exit with code, shows on its screen.
	build := func(app string, code int, shows string) *e2eProject {
		t.Helper()
		p := newE2EProject(t, map[string]string{"project.toml": projectTOML("app.toml"), "elements/app.toml": app})
		got, screen := p.startInTmux("build", "--cache-quota", "50%", "--sandbox", "host").waitExit()
		if got != code || !strings.Contains(screen, shows) {
			t.Errorf("gantry exited with %d, want %d and %q on the screen; the screen:\n%s", got, code, shows, screen)
		}
		return p
	}
	broken := build("kind = \"manual\"\ndepends = [\"lib.toml\"\n", 2, "invalid TOML") // the load's error
	if _, err := os.Stat(broken.cache); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the cache directory of a project that does not load: %v, want it absent", err)
	}
	fine := build(manualElement(nil, "true"), 0, "Success.") // the summary
	if st := fine.state("app.toml"); st != "cached" {
		t.Errorf("app.toml is %q after the session, want cached", st)
	}
}
