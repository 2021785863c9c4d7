package actions

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/sandbox"
	"github.com/gantry-build/gantry/source"
)

// stageArtifact commits an artifact of element holding files (path → content; a
// content starting with "->" is a symlink to the rest) and returns what a buildSpec
// stages for it.
func stageArtifact(t *testing.T, c *cache.Cache, element string, files map[string]string) stagedArtifact {
	t.Helper()
	src := t.TempDir()
	for p, content := range files {
		full := filepath.Join(src, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(content), 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	tree, err := c.StoreTree(src)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("a", 64)
	now := time.Now()
	if err := c.Commit(&cache.Artifact{Project: "p", Element: element, Key: key, Success: true, Files: tree,
		Started: now, Finished: now}); err != nil {
		t.Fatal(err)
	}
	return stagedArtifact{Element: element, Key: key}
}

func TestCheckStagedShell(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	busybox := stageArtifact(t, c, "busybox.toml", map[string]string{"bin/busybox": "elf", "bin/sh": "->busybox"})
	mergedUsr := stageArtifact(t, c, "usr.toml", map[string]string{"bin": "->usr/bin", "usr/bin/sh": "elf"})
	noShell := stageArtifact(t, c, "lib.toml", map[string]string{"usr/lib/libx.so": "elf", "bin/true": "elf"})
	for _, tc := range []struct {
		name    string
		sandbox string
		kind    string
		stage   []stagedArtifact
		ok      bool
	}{
		{"busybox", "bwrap", "manual", []stagedArtifact{noShell, busybox}, true},
		{"merged /usr", "bwrap", "manual", []stagedArtifact{mergedUsr}, true},
		{"no shell", "bwrap", "manual", []stagedArtifact{noShell}, false},
		{"nothing staged", "bwrap", "manual", nil, false},
		{"host sandbox", "host", "manual", nil, true},
		{"auto falls back to the host", "auto", "manual", nil, true},
		{"import runs no command", "bwrap", "import", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &buildSpec{Project: "p", Element: "app.toml", Kind: tc.kind, Sandbox: tc.sandbox, Stage: tc.stage}
			err := spec.checkStagedShell(c)
			if tc.ok != (err == nil) {
				t.Fatalf("checkStagedShell = %v, want ok %v", err, tc.ok)
			}
			if err == nil {
				return
			}
			if _, ok := err.(*sandbox.MachineError); !ok || !strings.Contains(err.Error(), "add a base element") || !strings.Contains(err.Error(), "app.toml") {
				t.Errorf("error %q (%T) must be a MachineError naming the element and the fix", err, err)
			}
		})
	}
}

func TestMachineFault(t *testing.T) {
	dir := t.TempDir() // on a filesystem with room
	said := func(chunks ...string) *faultWatcher {
		w := &faultWatcher{w: io.Discard}
		for _, c := range chunks {
			_, _ = w.Write([]byte(c))
		}
		return w
	}
	exit1 := &sandbox.ExitError{Command: "make", ExitCode: 1}
	for _, tc := range []struct {
		name  string
		err   error
		out   *faultWatcher
		fault bool
	}{
		{"success", nil, said(), false},
		{"the element's failure", exit1, said("error: undefined reference\n"), false},
		{"ENOSPC met by gantry", fmt.Errorf("caching: %w", &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}), said(), true},
		{"EDQUOT met by gantry", fmt.Errorf("staging: %w", syscall.EDQUOT), said(), true},
		{"a command that said ENOSPC, split across writes", exit1, said("cc: write: No space le", "ft on device\n"), true},
		{"a command that said EDQUOT", exit1, said("Disk quota exceeded\n"), true},
		{"a corrupt source-cache file", fmt.Errorf("source 1: %w", &source.CorruptError{Path: "f", Got: "00"}), said(), true},
		{"a sandbox that cannot run", &infraError{&sandbox.MachineError{Msg: "no bwrap"}}, said(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := machineFault(tc.err, dir, tc.out)
			if (got != nil) != tc.fault {
				t.Fatalf("machineFault = %v, want a fault: %v", got, tc.fault)
			}
			if got != nil && !errors.Is(got, tc.err) {
				t.Errorf("machineFault = %v does not wrap %v", got, tc.err)
			}
		})
	}
}
