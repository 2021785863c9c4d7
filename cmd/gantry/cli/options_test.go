package cli

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Flag binding: each command's constructor takes the function that runs it, so a test
// gives one that keeps the options and runs nothing (no project, no cache, no build).

// testOptions are global options writing into buffers, with no terminal.
func testOptions() *globalOptions {
	return &globalOptions{ios: &IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}}
}

// execute runs cmd with args; the command's runF must record what it was given.
func execute(t *testing.T, cmd *cobra.Command, args ...string) error {
	t.Helper()
	cmd.SetArgs(args)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usagef("%v", err) })
	return cmd.Execute()
}

func TestBuildFlagsBind(t *testing.T) {
	t.Setenv("GANTRY_SANDBOX", "")
	var got *buildOptions
	cmd := newBuildCmd(testOptions(), func(o *buildOptions) error { got = o; return nil })
	err := execute(t, cmd, "--builders", "3", "--fetchers", "7", "--pushers", "2", "--max-jobs", "5",
		"--on-error", "continue", "--sandbox", "bwrap", "--cache-quota", "10G", "--retry-failed",
		"--track", "--explain", "--trace", "t.json", "--deps", "all",
		"--remote", "http://a", "--remote", "http://b", "app.toml", "lib/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := schedulerFlags{onError: "continue", builders: 3, fetchers: 7, pushers: 2, maxJobs: 5, sandbox: "bwrap", quota: "10G"}
	if got.schedulerFlags != want {
		t.Errorf("scheduler flags = %+v, want %+v", got.schedulerFlags, want)
	}
	if !got.retryFailed || !got.track || !got.explain || got.trace != "t.json" || got.deps != "all" {
		t.Errorf("build flags = retry %v track %v explain %v trace %q deps %q", got.retryFailed, got.track, got.explain, got.trace, got.deps)
	}
	if !slices.Equal(got.urls, []string{"http://a", "http://b"}) || got.none {
		t.Errorf("remote flags = %q none %v", got.urls, got.none)
	}
	if !slices.Equal(got.args, []string{"app.toml", "lib/*.toml"}) {
		t.Errorf("args = %q", got.args)
	}
}

func TestBuildFlagDefaults(t *testing.T) {
	t.Setenv("GANTRY_SANDBOX", "host")
	var got *buildOptions
	if err := execute(t, newBuildCmd(testOptions(), func(o *buildOptions) error { got = o; return nil })); err != nil {
		t.Fatal(err)
	}
	// 0 and "" leave the choice to the environment, the user configuration, the default.
	want := schedulerFlags{sandbox: "host"}
	if got.schedulerFlags != want || got.deps != "run" || got.retryFailed || got.track || len(got.args) != 0 {
		t.Errorf("defaults = %+v deps %q, want %+v deps run", got.schedulerFlags, got.deps, want)
	}
}

func TestPushAndPullFlagsBind(t *testing.T) {
	for _, c := range []struct {
		name    string
		new     func(*globalOptions, func(*transferOptions) error) *cobra.Command
		push    bool
		jobs    string // the flag of its jobs at once
		pushers int
	}{
		{"push", newPushCmd, true, "--pushers", 6},
		{"pull", newPullCmd, false, "--fetchers", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got *transferOptions
			cmd := c.new(testOptions(), func(o *transferOptions) error { got = o; return nil })
			if err := execute(t, cmd, "--remote", "https://cache.example", "--deps", "run", c.jobs, "6", "app.toml"); err != nil {
				t.Fatal(err)
			}
			if got.push != c.push || got.deps != "run" || got.pushers != c.pushers || !slices.Equal(got.urls, []string{"https://cache.example"}) ||
				!slices.Equal(got.args, []string{"app.toml"}) {
				t.Errorf("options = push %v deps %q pushers %d remotes %q args %q", got.push, got.deps, got.pushers, got.urls, got.args)
			}
		})
	}
}

// Each scheduler command has the scheduler flags it uses and no other: --help lists
// what changes something. --sandbox of a command that builds nothing picks which
// artifacts the keys name.
func TestSchedulerFlagsPerCommand(t *testing.T) {
	all := []string{"on-error", "builders", "fetchers", "pushers", "max-jobs", "sandbox", "cache-quota"}
	g := testOptions()
	for _, c := range []struct {
		cmd  *cobra.Command
		want []string
	}{
		{newBuildCmd(g, nil), all},
		{newFetchCmd(g, nil), []string{"on-error", "fetchers", "sandbox"}},
		{newTrackCmd(g, nil), []string{"on-error", "fetchers"}},
		{newPullCmd(g, nil), []string{"on-error", "fetchers", "sandbox"}},
		{newPushCmd(g, nil), []string{"on-error", "pushers", "sandbox"}},
	} {
		var has []string
		for _, f := range all {
			if c.cmd.Flags().Lookup(f) != nil {
				has = append(has, f)
			}
		}
		if !slices.Equal(has, c.want) {
			t.Errorf("%s has --%s, want --%s", c.cmd.Name(), strings.Join(has, " --"), strings.Join(c.want, " --"))
		}
	}
}

func TestCommandsWithoutSandboxFlagUseTheDefault(t *testing.T) {
	t.Setenv("GANTRY_SANDBOX", "bwrap")
	var got *trackOptions
	if err := execute(t, newTrackCmd(testOptions(), func(o *trackOptions) error { got = o; return nil })); err != nil {
		t.Fatal(err)
	}
	if got.sandbox != "bwrap" {
		t.Errorf("track's sandbox = %q, want $GANTRY_SANDBOX's bwrap", got.sandbox)
	}
}

func TestPushNoRemoteBinds(t *testing.T) {
	var got *transferOptions
	if err := execute(t, newPushCmd(testOptions(), func(o *transferOptions) error { got = o; return nil }), "--no-remote"); err != nil {
		t.Fatal(err)
	}
	if !got.none || len(got.urls) != 0 || got.deps != "none" {
		t.Errorf("options = none %v remotes %q deps %q", got.none, got.urls, got.deps)
	}
}

func TestFlagErrorsAreUsageErrors(t *testing.T) {
	ran := false
	err := execute(t, newBuildCmd(testOptions(), func(*buildOptions) error { ran = true; return nil }), "--builders", "many")
	var ue *usageError
	if ran || !errors.As(err, &ue) {
		t.Errorf("ran %v, err %v; want a usage error and nothing run", ran, err)
	}
}

func TestShellArgsBind(t *testing.T) {
	var got *shellOptions
	cmd := newShellCmd(testOptions(), func(o *shellOptions) error { got = o; return nil })
	if err := execute(t, cmd, "--build", "--sandbox", "host", "app.toml", "--", "make", "-k"); err != nil {
		t.Fatal(err)
	}
	if !got.build || got.sandbox != "host" || got.element != "app.toml" || !slices.Equal(got.command, []string{"make", "-k"}) {
		t.Errorf("options = build %v sandbox %q element %q command %q", got.build, got.sandbox, got.element, got.command)
	}
}

func TestGCFlagsBind(t *testing.T) {
	var got *gcOptions
	cmd := newCacheGCCmd(testOptions(), func(o *gcOptions) error { got = o; return nil })
	if err := execute(t, cmd, "--quota", "50%", "-n"); err != nil {
		t.Fatal(err)
	}
	if got.quota != "50%" || !got.dryRun || got.keepDays != 0 || got.globalOptions == nil {
		t.Errorf("options = quota %q dry-run %v keep-days %d", got.quota, got.dryRun, got.keepDays)
	}
}

// TestSessionLoadsNothingUntilAsked: making the session reads no project, no user
// configuration and no cache; a command that fails before asking leaves nothing loaded.
func TestSessionLoadsNothingUntilAsked(t *testing.T) {
	g := testOptions()
	g.dir = t.TempDir() + "/missing"
	s := g.session()
	if s != g.session() {
		t.Fatal("a second session: a command has one")
	}
	if s.projectLoaded || s.userLoaded || s.found != nil {
		t.Fatal("the session loaded something before it was asked")
	}
	err := s.loadProject()
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("loadProject in a missing -C = %v, want the usage error", err)
	}
	if again := s.loadProject(); again != err {
		t.Errorf("loadProject again = %v, want its first error", again)
	}
	if s.userLoaded {
		t.Error("the user configuration was read for a project that could not be found")
	}
}

func TestWorkspaceOpenFlagsBind(t *testing.T) {
	proj := t.TempDir() // no project.toml in it
	gone := filepath.Join(proj, "gone")
	for _, c := range []struct {
		name           string
		args           []string
		into, dir, err string // the workspace's directory, -C, what it says on stderr
	}{
		{"DIR argument", []string{"-C", proj, "app.toml", "ws/app"}, "ws/app", proj, ""},
		{"--directory is the global one", []string{"--directory", proj, "app.toml", "ws/app"}, "ws/app", proj, ""},
		{"-C to a directory without project.toml", []string{"-C", proj, "app.toml"}, "", proj,
			"-C/--directory " + proj + " is where the project is looked up from; to open the workspace in " + proj + ", give it as the second argument (`gantry workspace open app.toml " + proj + "`)\n"},
		{"old --directory of a directory to make", []string{"--directory", gone, "app.toml"}, gone, "",
			"gantry: warning: workspace open --directory " + gone + ": the workspace's directory is the second argument now (`gantry workspace open app.toml " + gone + "`); -C/--directory is where the project is looked up from, as for every command\n"},
		{"-C PROJECT, old --directory", []string{"--directory", gone, "app.toml", "-C", proj}, gone, proj,
			"gantry: warning: workspace open --directory " + gone + ": the workspace's directory is the second argument now (`gantry workspace open app.toml " + gone + "`); -C/--directory is where the project is looked up from, as for every command\n"},
		{"--chdir", []string{"--chdir", gone, "app.toml", "ws/app"}, "ws/app", gone, "Flag --chdir has been deprecated, use -C/--directory\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := testOptions()
			var got *workspaceOpenOptions
			root := &cobra.Command{Use: "gantry"}
			root.PersistentFlags().VarP(&dirFlag{&g.dir, &g.dirs}, "directory", "C", "")
			open := newWorkspaceOpenCmd(g, func(o *workspaceOpenOptions) error { got = o; return nil })
			root.AddCommand(open)
			if err := execute(t, root, append([]string{"open"}, c.args...)...); err != nil {
				t.Fatal(err)
			}
			// cobra prints a deprecated flag's notice to the command's output.
			stderr := open.OutOrStdout().(*bytes.Buffer).String() + g.ios.ErrOut.(*bytes.Buffer).String()
			if got.element != "app.toml" || got.into != c.into || g.dir != c.dir || stderr != c.err {
				t.Errorf("element %q DIR %q -C %q stderr %q, want DIR %q -C %q stderr %q", got.element, got.into, g.dir, stderr, c.into, c.dir, c.err)
			}
		})
	}
}

func TestArtifactCheckoutArgsBind(t *testing.T) {
	var got *artifactCheckoutOptions
	cmd := newArtifactCheckoutCmd(testOptions(), func(o *artifactCheckoutOptions) error { got = o; return nil })
	if err := execute(t, cmd, "--deps", "build", "-f", "app.toml@1234abcd", "out"); err != nil {
		t.Fatal(err)
	}
	if got.deps != "build" || !got.force || got.artifact != "app.toml@1234abcd" || got.into != "out" {
		t.Errorf("options = deps %q force %v artifact %q into %q", got.deps, got.force, got.artifact, got.into)
	}
}

func TestSourceCheckoutFlagsBind(t *testing.T) {
	var got *sourceCheckoutOptions
	run := func(o *sourceCheckoutOptions) error { got = o; return nil }
	if err := execute(t, newSourceCheckoutCmd(testOptions(), run), "--deps", "all", "--tar", "-", "-f", "app.toml"); err != nil {
		t.Fatal(err)
	}
	if got.deps != "all" || got.tar != "-" || !got.force || got.element != "app.toml" || got.into != "" {
		t.Errorf("options = deps %q tar %q force %v element %q into %q", got.deps, got.tar, got.force, got.element, got.into)
	}
	if err := execute(t, newSourceCheckoutCmd(testOptions(), run), "app.toml", "out"); err != nil {
		t.Fatal(err)
	}
	if got.deps != "none" || got.tar != "" || got.force || got.into != "out" {
		t.Errorf("defaults = deps %q tar %q force %v into %q, want none, no tar, no force, out", got.deps, got.tar, got.force, got.into)
	}
	var ue *usageError
	if err := execute(t, newSourceCheckoutCmd(testOptions(), run), "a", "b", "c"); !errors.As(err, &ue) {
		t.Errorf("three arguments: %v, want a usage error", err)
	}
}
