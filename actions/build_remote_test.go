package actions

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/testtree"
	rexec "github.com/gantry-build/gantry/remote/exec"
	"github.com/gantry-build/gantry/resources"
)

func TestRunsRemotely(t *testing.T) {
	cfg := &rexec.Config{Execution: remote.Spec{URL: "grpc://127.0.0.1:1"}}
	for _, tc := range []struct {
		spec buildSpec
		want bool
	}{
		{buildSpec{Kind: "manual", Remote: cfg}, true},
		{buildSpec{Kind: "autotools", Remote: cfg}, true},
		{buildSpec{Kind: "manual"}, false},
		{buildSpec{Kind: "import", Remote: cfg}, false},
		{buildSpec{Kind: "compose", Remote: cfg}, false},
		{buildSpec{Kind: "stack", Remote: cfg}, false},
		{buildSpec{Kind: "manual", Remote: cfg, Workspace: &workspaceBuild{Dir: "w"}}, false},
	} {
		if got := tc.spec.runsRemotely(); got != tc.want {
			t.Errorf("%s (remote %v, workspace %v): runsRemotely = %v, want %v", tc.spec.Kind, tc.spec.Remote != nil, tc.spec.Workspace != nil, got, tc.want)
		}
	}
}

// With remote execution a build stages and caches on the builders, its gate a
// remote slot; without, it is a plain Gater of the builders.
func TestBuildPreparesOnTheBuilders(t *testing.T) {
	remoteBuilds := &Build{Remote: rexec.Config{Execution: remote.Spec{URL: "grpc://127.0.0.1:1"}}}
	if remoteBuilds.PrepareOn() != resources.Process || remoteBuilds.GateOn() != resources.Remote {
		t.Errorf("with remote execution: prepare on %q, gate on %q; want %q, %q", remoteBuilds.PrepareOn(), remoteBuilds.GateOn(), resources.Process, resources.Remote)
	}
	if local := (&Build{}); local.PrepareOn() != "" || local.GateOn() != resources.Process {
		t.Errorf("without: prepare on %q, gate on %q; want none, %q", local.PrepareOn(), local.GateOn(), resources.Process)
	}
}

func TestNeedsLocalSandbox(t *testing.T) {
	remoteCfg := &rexec.Config{Execution: remote.Spec{URL: "grpc://127.0.0.1:1"}}
	kind := func(name string) *element.Kind {
		k, ok := element.LookupKind(name)
		if !ok {
			t.Fatalf("no kind %s", name)
		}
		return k
	}
	for _, tc := range []struct {
		e      *element.Element
		remote bool
		want   bool
	}{
		{&element.Element{Kind: kind("manual")}, true, false},
		{&element.Element{Kind: kind("autotools")}, true, false},
		{&element.Element{Kind: kind("manual"), Workspace: "w"}, true, true},
		{&element.Element{Kind: kind("import")}, true, false},
		{&element.Element{Kind: kind("import"), Workspace: "w"}, true, false},
		{&element.Element{Kind: kind("stack")}, true, false},
		{&element.Element{Kind: kind("filter")}, true, false},
		{&element.Element{Kind: kind("manual")}, false, true},
		{&element.Element{Kind: kind("import")}, false, true},
	} {
		rx := &rexec.Config{}
		if tc.remote {
			rx = remoteCfg
		}
		if got := NeedsLocalSandbox(nil, tc.e, rx); got != tc.want {
			t.Errorf("%s (remote %v, workspace %q): NeedsLocalSandbox = %v, want %v", tc.e.Kind.Name, tc.remote, tc.e.Workspace, got, tc.want)
		}
	}
}

func TestRemoteBuildOfASpec(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := commitDep(t, c, "base.toml", "k1", "base")
	lib := commitDep(t, c, "lib.toml", "k2", "lib")
	spec := &buildSpec{Element: "app.toml", Kind: "manual",
		Stage: []stagedArtifact{{Element: "base.toml"}, {Element: "lib.toml", Name: "j.toml:lib.toml", Public: &stagedPublic{Bwrap: []string{"ldconfig"}}}},
		Bwrap: &element.Resolved{Env: map[string]string{"CFLAGS": "-O2", "LC_ALL": "en_US"},
			Commands: map[string][]string{"install-commands": {"make install"}, "build-commands": {"make"}}}}
	b := remoteBuild(context.Background(), c, spec, []*cache.Artifact{base, lib}, cache.Digest{Hash: "ab", Size: 1})
	if b.Element != "app.toml" || b.BuildRoot != "/gantry/build" || b.InstallRoot != "/gantry/install" || b.Sources.Hash != "ab" {
		t.Errorf("build %+v", b)
	}
	if len(b.Deps) != 2 || b.Deps[0] != (rexec.Layer{Name: "base.toml", Files: base.Files, At: "/"}) || b.Deps[1].Name != "j.toml:lib.toml" {
		t.Errorf("deps %+v", b.Deps)
	}
	var steps []string
	for _, s := range b.Steps {
		steps = append(steps, s.Name+" in "+s.Dir+": "+strings.Join(s.Commands, "; "))
	}
	want := []string{"integration-commands of j.toml:lib.toml in /: ldconfig", "build-commands in : make", "install-commands in : make install"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
	// The environment of a local bwrap build: fixed variables under the element's.
	if b.Env["CFLAGS"] != "-O2" || b.Env["LC_ALL"] != "en_US" || b.Env["HOME"] != "/tmp" || b.Env["SOURCE_DATE_EPOCH"] == "" {
		t.Errorf("environment %v", b.Env)
	}
}

func TestRemoteStagingReportsOverlapsAsALocalBuild(t *testing.T) {
	spec := &buildSpec{Element: "app.toml", Stage: []stagedArtifact{{Element: "a.toml"}, {Element: "b.toml", Whitelist: []string{"/etc/ok"}}}}
	s := remoteStaging(spec, []rexec.Overlap{{Path: "/etc/motd", By: 1, Over: 0}, {Path: "/etc/ok", By: 1, Over: 0}})
	n, text := s.report()
	if want := "1 path staged by more than one element, the later in staging order wins: /etc/motd (b.toml over a.toml)"; n != 1 || text != want {
		t.Errorf("report: %d, %q; want 1, %q", n, text, want)
	}
}

func TestApplyRemoteResult(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tree := func(files map[string]string) cache.Digest {
		dir := t.TempDir()
		testtree.Write(t, dir, files, nil)
		d, err := c.StoreTree(dir)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	work := t.TempDir()
	wt := workTree(work, filepath.Join(work, "build"))
	if err := wt.make(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(wt.build, "stale"), []byte("local"), 0o644)
	var log []string
	var out bytes.Buffer
	res := rexec.Result{ExitCode: 2, Worker: "bot-3", FailedCommand: "build-commands 1/2", Stdout: []byte("out\n"), Stderr: []byte("err\n"),
		Install: tree(map[string]string{"usr/half": "file:h"}), BuildTree: tree(map[string]string{"main.o": "file:o"}),
		Flagged: []string{"../install/usr/x -> /etc/x"}, Action: cache.Digest{Hash: "ab", Size: 3}, Message: "see http://grid/op/1"}
	err = applyRemoteResult(c, res, wt, func(s string) { log = append(log, s) }, &out)
	if want := "build-commands 1/2 failed on worker bot-3 with exit code 2"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
	if out.String() != "out\nerr\n" {
		t.Errorf("output %q", out.String())
	}
	wantLog := []string{"remote build: action ab/3 ran on worker bot-3", "remote build: the execution service says: see http://grid/op/1",
		"warning: remote build: an output symlink is absolute or leads out of its directory (kept as it is, never followed): ../install/usr/x -> /etc/x"}
	if !slices.Equal(log, wantLog) {
		t.Errorf("log %q, want %q", log, wantLog)
	}
	if data, err := os.ReadFile(filepath.Join(wt.build, "main.o")); err != nil || string(data) != "o" {
		t.Errorf("build directory main.o: %q, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(wt.build, "stale")); !os.IsNotExist(err) {
		t.Errorf("the local build directory was not replaced: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(wt.install, "usr", "half")); err != nil || string(data) != "h" {
		t.Errorf("install root usr/half: %q, %v", data, err)
	}
}
