package actions

import (
	"strings"
	"testing"

	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/queues/queuestest"
)

// TestDecodeResult: a job that sent no data leaves the result empty; data that does
// not decode is an error, never a silently empty result.
func TestDecodeResult(t *testing.T) {
	var pr pushResult
	if err := decodeResult(nil, &pr); err != nil || pr.Warning != "" {
		t.Errorf("no data: %v, %+v", err, pr)
	}
	if err := decodeResult([]byte(`{"warning":"w"}`), &pr); err != nil || pr.Warning != "w" {
		t.Errorf("data: %v, %+v", err, pr)
	}
	if err := decodeResult([]byte(`{"warning":`), &pr); err == nil {
		t.Error("damaged data decoded without an error")
	}
}

// TestPushWarningSaysTheResultWasUnreadable: a push whose result does not decode says
// so instead of reporting nothing.
func TestPushWarningSaysTheResultWasUnreadable(t *testing.T) {
	g := queuestest.Graph(t, "app")
	it := &queues.Item{Element: g.Order[0]}
	if w := (&PushQueue{}).Warning(it, job.Result{Data: []byte("{")}); !strings.Contains(w, "reading what the push of app reported") {
		t.Errorf("warning %q", w)
	}
	if w := (&PushQueue{}).Warning(it, job.Result{}); w != "" {
		t.Errorf("no data: warning %q", w)
	}
}
