package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hermeticProject is an element that records its build environment, on a busybox
// sysroot (so that it builds under bwrap too).
func hermeticProject(t *testing.T) *e2eProject {
	t.Helper()
	return sysrootProject(t, []string{
		`for v in HOME TZ LC_ALL SOURCE_DATE_EPOCH; do eval "echo $v=\$$v"; done > %{install-root}/env.txt`,
		`test -d "$HOME" && ls -A "$HOME" | wc -l | tr -d ' ' > %{install-root}/home-entries.txt`,
	}, "sh", "echo", "ls", "wc", "tr", "test")
}

// builtEnv checks out app.toml's artifact and returns what its build recorded.
func builtEnv(t *testing.T, p *e2eProject) (env map[string]string, homeEntries string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	p.mustRun(0, "artifact", "checkout", "app.toml", out)
	env = map[string]string{}
	b, err := os.ReadFile(filepath.Join(out, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	h, err := os.ReadFile(filepath.Join(out, "home-entries.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return env, strings.TrimSpace(string(h))
}

// A host (non-hermetic) artifact never satisfies a hermetic (--sandbox bwrap) build,
// locally or from a remote: the sandbox is in the key of every element that runs
// commands, explain says so, and the host build ran with the fixed environment.
func TestE2EHostArtifactNeverSatisfiesBwrap(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	p := hermeticProject(t)
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host")

	env, entries := builtEnv(t, p)
	want := map[string]string{"TZ": "UTC", "LC_ALL": "C", "SOURCE_DATE_EPOCH": "315532800"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("the host build ran with %s=%q, want %q (all: %v)", k, env[k], v, env)
		}
	}
	if home := env["HOME"]; home == "" || strings.HasPrefix(home, filepath.Dir(p.root)+"/home") || entries != "0" {
		t.Errorf("the host build's HOME is %q with %s entries, want a new empty directory", home, entries)
	}

	// `gantry shell` opens the build's environment.
	if out, _ := p.mustRun(0, "shell", "--build", "--sandbox", "host", "app.toml", "--", "sh", "-c", "echo $TZ $LC_ALL $SOURCE_DATE_EPOCH"); out != "UTC C 315532800\n" {
		t.Errorf("the shell's environment: %q, want the build's fixed one", out)
	}

	out, _ := p.mustRun(0, "explain", "--sandbox", "bwrap")
	if !strings.Contains(out, "app.toml: its sandbox changed: host or auto (not hermetic) → bwrap (hermetic)") {
		t.Errorf("explain --sandbox bwrap does not name the sandbox:\n%s", out)
	}
	if strings.Contains(out, "sysroot.toml") {
		t.Errorf("explain says the import element (which runs no commands) needs building:\n%s", out)
	}

	_, stderr := p.mustRun(0, "build", "--ui", "json", "--sandbox", "bwrap")
	evs := parseEvents(stderr)
	if _, built := findEvent(evs, "job-start", "build", "app.toml"); !built {
		t.Fatalf("--sandbox bwrap took the host artifact of app.toml from the cache:\n%s", stderr)
	}
	if _, built := findEvent(evs, "job-start", "build", "sysroot.toml"); built {
		t.Errorf("the import element was built again; it runs no commands, its artifact is the same:\n%s", stderr)
	}
	// The commands without --sandbox see the artifacts of $GANTRY_SANDBOX.
	hostEnv := p.env
	p.env = append(p.env, "GANTRY_SANDBOX=bwrap")
	log, _ := p.mustRun(0, "artifact", "log", "app.toml")
	if !strings.Contains(log, "sandbox: bwrap") {
		t.Errorf("the hermetic build did not run under bwrap:\n%s", log)
	}
	if env, entries := builtEnv(t, p); env["HOME"] != "/tmp" || env["TZ"] != "UTC" || env["LC_ALL"] != "C" || entries != "0" {
		t.Errorf("the bwrap build ran with %v, HOME holding %s entries", env, entries)
	}
	p.env = hostEnv
	// Both artifacts stay: each request finds its own.
	_, stderr = p.mustRun(0, "build", "--ui", "json", "--sandbox", "host")
	if _, built := findEvent(parseEvents(stderr), "job-start", "build", "app.toml"); built {
		t.Errorf("the host artifact was not kept beside the hermetic one:\n%s", stderr)
	}
}

// On a shared remote too: a host artifact pushed by one runner is not pulled by a
// runner building with --sandbox bwrap (it builds), and is pulled by one building on the host.
func TestE2ERemoteHostArtifactNeverSatisfiesBwrap(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	srv := startServe(t)
	remote := "http://ci-user:" + serveTestPassword + "@" + srv.http
	p := hermeticProject(t)
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host")
	p.mustRun(0, "push", "--ui", "plain", "--sandbox", "host", "--remote", remote, "app.toml", "sysroot.toml")

	p.cache = filepath.Join(t.TempDir(), "runner-bwrap")
	_, stderr := p.mustRun(0, "build", "--ui", "json", "--sandbox", "bwrap", "--remote", remote)
	evs := parseEvents(stderr)
	if _, built := findEvent(evs, "job-start", "build", "app.toml"); !built {
		t.Fatalf("--sandbox bwrap took app.toml's host artifact from the remote:\n%s", stderr)
	}
	if _, built := findEvent(evs, "job-start", "build", "sysroot.toml"); built {
		t.Errorf("the import element was built, not pulled:\n%s", stderr)
	}

	p.cache = filepath.Join(t.TempDir(), "runner-host")
	_, stderr = p.mustRun(0, "build", "--ui", "json", "--sandbox", "host", "--remote", remote)
	if _, built := findEvent(parseEvents(stderr), "job-start", "build", "app.toml"); built {
		t.Errorf("a host build did not pull the host artifact from the remote:\n%s", stderr)
	}
}

// TestE2EHostHomeIsEmptyForEveryBuild: a host build's HOME is kept between a worker's
// builds (a new directory per build cost 5% of a no-op build of 2,000 elements), and
// emptied: what one build leaves in it never reaches the next.
func TestE2EHostHomeIsEmptyForEveryBuild(t *testing.T) {
	files := map[string]string{"project.toml": projectTOML()}
	var names []string
	for i := range 4 {
		name := fmt.Sprintf("e%d.toml", i)
		names = append(names, name)
		files["elements/"+name] = `kind = "manual"
[config]
build-commands = ` + tomlList(
			`ls -A "$HOME" | wc -l | tr -d ' ' > %{install-root}/entries.txt`,
			`stat -c %i "$HOME" > %{install-root}/inode.txt`,
			`mkdir -p "$HOME/.cache/tool" && touch "$HOME/.leak" "$HOME/.cache/tool/state" && chmod -w "$HOME/.cache/tool"`,
		) + "\n"
	}
	p := newE2EProject(t, files)
	p.mustRun(0, append([]string{"build", "--ui", "plain", "--sandbox", "host", "--builders", "1"}, names...)...)
	inodes := map[string]bool{}
	for _, name := range names {
		if got := p.checkoutFile(name, "entries.txt"); strings.TrimSpace(got) != "0" {
			t.Errorf("%s's build found %s entries in HOME, want it empty", name, strings.TrimSpace(got))
		}
		inodes[strings.TrimSpace(p.checkoutFile(name, "inode.txt"))] = true
	}
	if len(inodes) == len(names) {
		t.Errorf("every build had a HOME of its own (%d inodes): the worker keeps none between builds", len(inodes))
	}
	p.verifyCache()
}

// Every command that reads artifact keys refuses a --sandbox (default $GANTRY_SANDBOX)
// other than auto, host or bwrap: a misspelt bwrap would have it read the keys
// of host builds. (track reads none: it has no --sandbox.)
func TestE2EUnknownSandboxIsRefused(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("a.toml"), "elements/a.toml": manualElement(nil, "true")})
	for _, args := range [][]string{{"build"}, {"fetch"}, {"pull"}, {"push"}, {"explain"}, {"shell", "a.toml", "--", "true"}} {
		_, stderr := p.mustRun(exitUsage, append([]string{args[0], "--sandbox", "bwarp"}, args[1:]...)...)
		if !strings.Contains(stderr, `--sandbox "bwarp": use auto, host or bwrap`) {
			t.Errorf("gantry %s --sandbox bwarp: %s", args[0], stderr)
		}
	}
}
