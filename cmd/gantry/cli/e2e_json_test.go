package cli

// --ui json: everything on stderr is a JSON line, whatever happens.

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
)

// jsonLines decodes every line of stderr as a JSON event, failing the test on a line
// that is not one.
func jsonLines(t *testing.T, stderr string) []e2eEvent {
	t.Helper()
	var out []e2eEvent
	for i, line := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
		var e e2eEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Event == "" {
			t.Errorf("stderr line %d is not a JSON event: %q\nstderr:\n%s", i+1, line, stderr)
			continue
		}
		e.Raw = line
		out = append(out, e)
	}
	return out
}

// lastEvent is the last JSON event of stderr, every line of which must be one.
func lastEvent(t *testing.T, stderr string) e2eEvent {
	t.Helper()
	evs := jsonLines(t, stderr)
	if len(evs) == 0 {
		t.Fatalf("no JSON event on stderr:\n%s", stderr)
	}
	return evs[len(evs)-1]
}

func TestE2EJSONOutputIsJSONOnly(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{
		"project.toml":       projectTOML("ok.toml"),
		"elements/ok.toml":   manualElement(nil, "echo ok > %{install-root}/ok.txt"),
		"elements/fail.toml": manualElement(nil, "exit 3"),
		"elements/bad.toml":  "kind = = \"manual\"\n",
		"elements/long.toml": manualElement(nil, "sleep 300"),
	})
	errorEvent := func(t *testing.T, stderr string, code int, text string) {
		t.Helper()
		last := lastEvent(t, stderr)
		if last.Event != "error" || last.ExitCode == nil || *last.ExitCode != code || !strings.Contains(last.Text, text) {
			t.Errorf("last event %q, want an error event with exit-code %d naming %q", last.Raw, code, text)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		text string // in the final error event; "" when the session-end says it all
	}{
		{"success", []string{"build", "--sandbox", "host", "ok.toml"}, 0, ""},
		{"failure", []string{"build", "--sandbox", "host", "fail.toml"}, 1, ""},
		{"cached failure", []string{"build", "--sandbox", "host", "fail.toml"}, 1, ""},
		{"bad element file", []string{"build", "--sandbox", "host", "bad.toml"}, 2, "bad.toml"},
		{"unknown element", []string{"build", "--sandbox", "host", "nosuch.toml"}, 2, "nosuch.toml"},
		{"unknown flag", []string{"build", "--sandbox", "host", "--nosuch"}, 2, "--nosuch"},
		{"unknown command", []string{"nosuch"}, 2, "nosuch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := p.mustRun(tc.code, append([]string{"--ui", "json"}, tc.args...)...)
			if tc.text != "" {
				errorEvent(t, stderr, tc.code, tc.text)
				return
			}
			end := lastEvent(t, stderr)
			if end.Event != "session-end" || end.Summary == nil {
				t.Fatalf("last event %q, want session-end", end.Raw)
			}
			// Counters agree with the failure list, a cached failure included.
			failed := 0
			for _, q := range end.Summary.Queues {
				failed += q.Failed
			}
			if failed != len(end.Summary.Failed) {
				t.Errorf("queues count %d failures, the summary lists %d: %s", failed, len(end.Summary.Failed), end.Raw)
			}
		})
	}
	t.Run("interrupt", func(t *testing.T) {
		g := p.start("--ui", "json", "--sandbox", "host", "build", "long.toml")
		g.waitEvent("job-start", "build", "long.toml")
		g.signal(syscall.SIGTERM)
		g.wait(e2eTimeout)
		errorEvent(t, g.output(), exitTerminated, "interrupted by SIGTERM")
	})
	t.Run("GANTRY_UI", func(t *testing.T) {
		p.env = append(p.env, "GANTRY_UI=json")
		_, stderr := p.mustRun(2, "build", "bad.toml")
		errorEvent(t, stderr, 2, "bad.toml")
	})
}
