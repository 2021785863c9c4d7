package worker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-build/gantry/sandbox"
)

// actionIn is an actionSpec running script in a new input root.
func actionIn(t *testing.T, kind sandbox.Kind, script string) actionSpec {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return actionSpec{Sandbox: kind, InputRoot: root, Script: script, Env: map[string]string{"PATH": "/bin:/usr/bin"},
		Stdout: filepath.Join(dir, "stdout"), Stderr: filepath.Join(dir, "stderr")}
}

func TestRunActionOutcomes(t *testing.T) {
	ctx := context.Background()
	t.Run("ExitCodeAndOutput", func(t *testing.T) {
		s := actionIn(t, sandbox.Host, "echo out; echo err >&2; exit 3")
		out, err := runAction(ctx, s)
		if err != nil || out != (actionOutcome{ExitCode: 3}) {
			t.Fatalf("runAction: %+v, %v; want exit code 3", out, err)
		}
		for path, want := range map[string]string{s.Stdout: "out\n", s.Stderr: "err\n"} {
			if got, _ := os.ReadFile(path); string(got) != want {
				t.Errorf("%s holds %q, want %q", filepath.Base(path), got, want)
			}
		}
	})
	t.Run("Timeout", func(t *testing.T) {
		s := actionIn(t, sandbox.Host, "exec sleep 600")
		s.Timeout = 100 * time.Millisecond
		out, err := runAction(ctx, s)
		if err != nil || out != (actionOutcome{ExitCode: -1, TimedOut: true}) {
			t.Fatalf("runAction: %+v, %v; want timed out", out, err)
		}
	})
}
