package ui

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/queues"
)

// A build from a workspace says so: plain's START line, JSON's job-start, the TUI's
// running job.
func TestDisplaysMarkWorkspaceBuilds(t *testing.T) {
	ws := queues.JobStart{Base: at(0), JobID: "b1", Action: queues.Build, Element: "app.toml", Key: key,
		LogPath: "/logs/app.log", Attempt: 1, Workspace: "/src/app"}

	var plain bytes.Buffer
	NewPlain(&plain, Options{}).Handle(ws)
	if !strings.Contains(plain.String(), "START    from workspace /src/app, /logs/app.log") {
		t.Errorf("plain START line does not name the workspace: %q", plain.String())
	}

	var js bytes.Buffer
	NewJSON(&js, Options{}).Handle(ws)
	var ev struct{ Event, Workspace string }
	if err := json.Unmarshal(js.Bytes(), &ev); err != nil || ev.Event != "job-start" || ev.Workspace != "/src/app" {
		t.Errorf("json job-start %s: want workspace /src/app (%v)", js.String(), err)
	}

	tt := newTester(t, TUIOptions{}, false)
	tt.events(start(), ws)
	tt.wantView("> build  app.toml (workspace)  00:00:00")
}
