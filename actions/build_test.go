package actions

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	rexec "github.com/gantry-build/gantry/remote/exec"
	"github.com/gantry-build/gantry/resources"
)

// importDirs makes a build root, an install root and an outside directory that nothing
// may touch, side by side.
func importDirs(t *testing.T) (build, install, outside string) {
	t.Helper()
	root := t.TempDir()
	build, install, outside = filepath.Join(root, "w", "build"), filepath.Join(root, "w", "install"), filepath.Join(root, "outside")
	for _, d := range []string{build, install, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	return build, install, outside
}

func outsideUntouched(t *testing.T, outside string) {
	t.Helper()
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 || entries[0].Name() != "secret" {
		t.Errorf("the outside directory changed: %v", entries)
	}
}

// TestImportConfinedAtStaging: even with a config that load would refuse (defence in
// depth), import writes only inside the install root and reads only inside the build
// root, whatever links the sources staged.
func TestImportConfinedAtStaging(t *testing.T) {
	for _, tt := range []struct {
		name, source, target string
		links                map[string]string // build-root link -> target ("OUT" is the outside dir)
	}{
		{name: "target climbs out", source: ".", target: "../../../outside/x"},
		{name: "source through a staged link", source: "d", target: "/", links: map[string]string{"d": "OUT"}},
		{name: "source through a relative link", source: "up/outside", target: "/", links: map[string]string{"up": "../.."}},
		{name: "source climbs out", source: "../../outside", target: "/"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			build, install, outside := importDirs(t)
			for l, target := range tt.links {
				if target == "OUT" {
					target = outside
				}
				if err := os.Symlink(target, filepath.Join(build, l)); err != nil {
					t.Fatal(err)
				}
			}
			os.WriteFile(filepath.Join(build, "f"), []byte("f"), 0o644)
			r := &element.Resolved{Source: tt.source, Target: tt.target}
			spec := &buildSpec{Host: r, Bwrap: r}
			err := importFiles(spec, build, install)
			if err == nil {
				t.Fatal("the import succeeded")
			}
			if !strings.Contains(err.Error(), "config.") {
				t.Errorf("the error does not name the config key: %v", err)
			}
			outsideUntouched(t, outside)
			if _, err := os.Stat(filepath.Join(install, "secret")); err == nil {
				t.Error("a file from outside the build root was imported")
			}
		})
	}
}

// TestImportKeepsLinks: links in the build root, absolute ones too, are imported as they
// are (a sysroot's lib64 -> /lib), never followed.
func TestImportKeepsLinks(t *testing.T) {
	build, install, outside := importDirs(t)
	os.Symlink(outside, filepath.Join(build, "abs"))
	os.Symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", filepath.Join(build, "ld.so"))
	r := &element.Resolved{Source: ".", Target: "/usr"}
	if err := importFiles(&buildSpec{Host: r, Bwrap: r}, build, install); err != nil {
		t.Fatal(err)
	}
	for link, want := range map[string]string{"abs": outside, "ld.so": "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"} {
		if got, err := os.Readlink(filepath.Join(install, "usr", link)); err != nil || got != want {
			t.Errorf("usr/%s -> %q, %v; want -> %q", link, got, err, want)
		}
	}
	outsideUntouched(t, outside)
}

func TestBuildQueueTakesThePoolToken(t *testing.T) {
	it := &queues.Item{Element: &element.Element{Name: "a.toml", Pool: "lic"}}
	req := (&Build{}).Resources(it)
	for _, r := range []resources.Resource{resources.Process, resources.Cache, resources.PoolResource("lic")} {
		if !slices.Contains(req.Shared, r) {
			t.Errorf("build request %v lacks %s", req, r)
		}
	}
	if req := (&Build{}).Resources(&queues.Item{Element: &element.Element{Name: "b.toml"}}); len(req.Shared) != 2 {
		t.Errorf("element without pool asks for %v", req)
	}
}

// With remote execution a build holds a remote slot, not a builder, and waits at its
// gate for one; the action-cache-only mode builds here, with builders.
func TestBuildQueueTakesARemoteSlotWithRemoteExecution(t *testing.T) {
	it := &queues.Item{Element: &element.Element{Name: "a.toml", Pool: "lic"}}
	b := &Build{Remote: rexec.Config{Execution: remote.Spec{URL: "grpc://cluster:8980"}}}
	req := b.Resources(it)
	if want := []resources.Resource{resources.Remote, resources.Cache, resources.PoolResource("lic")}; !slices.Equal(req.Shared, want) {
		t.Errorf("remote build request %v, want %v", req.Shared, want)
	}
	if b.GateOn() != resources.Remote {
		t.Errorf("remote builds gate on %q, want the remote slots", b.GateOn())
	}
	b = &Build{Remote: rexec.Config{ActionCache: remote.Spec{URL: "grpc://ac:9092"}}}
	if req := b.Resources(it); req.Shared[0] != resources.Process || b.GateOn() != resources.Process {
		t.Errorf("action-cache-only build request %v, gate %q: want a builder", req, b.GateOn())
	}
}

// The Build queue builds an element once every staged dependency is cached, parks it
// on the first that is not, and books a success (or the artifact said available) as
// cached and built here; its builds wait at their gates for a builder.
func TestBuildQueueStatus(t *testing.T) {
	b := &Build{}
	dep := &queues.Item{Element: &element.Element{Name: "dep.toml"}}
	it := &queues.Item{Element: &element.Element{Name: "app.toml"}, Stage: []*queues.Item{dep}}
	if st, why := b.Status(it); st != queues.Wait || b.WaitsOn(it) != dep {
		t.Errorf("dependency uncached: %v (%s), waits on %v; want wait on dep.toml", st, why, b.WaitsOn(it))
	}
	b.Done(dep, job.Result{OK: true})
	if !dep.Cached || !dep.Built {
		t.Errorf("after its build dep.toml is cached %v, built %v; want both", dep.Cached, dep.Built)
	}
	if st, _ := b.Status(it); st != queues.Ready || b.WaitsOn(it) != nil {
		t.Errorf("dependency cached: %v, waits on %v; want ready", st, b.WaitsOn(it))
	}
	if st, why := b.Status(dep); st != queues.Skip || why != "cached" {
		t.Errorf("cached element: %v (%s), want skipped as cached", st, why)
	}
	if b.GateOn() != resources.Process {
		t.Errorf("builds gate on %q, want the builders", b.GateOn())
	}
}
