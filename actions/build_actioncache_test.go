package actions

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	rexec "github.com/gantry-build/gantry/remote/exec"
)

// The payload of a cache-only build carries the action cache and the
// element's platform and timeout (they are in its Action); a refusal is
// warned of once, and the builds whose payloads are made after it record
// nothing; other failures to record are warned of each time.
func TestActionCachePayloadAndWarnings(t *testing.T) {
	b := &Build{Remote: rexec.Config{ActionCache: remote.Spec{URL: "grpc://127.0.0.1:1"}}}
	it := &queues.Item{Element: &element.Element{}}
	it.Element.RemoteExecution.Platform = map[string]string{"ISA": "aarch64"}
	it.Element.RemoteExecution.Timeout = time.Hour
	payload := func() *buildSpec {
		spec := &buildSpec{}
		b.actionCachePayload(spec, it)
		return spec
	}
	spec := payload()
	if spec.ActionCache == nil || spec.ActionCacheReadOnly || spec.RemotePlatform["ISA"] != "aarch64" || spec.RemoteTimeout != time.Hour || spec.Remote != nil {
		t.Fatalf("cache-only payload: action cache %v, read-only %v, platform %v, timeout %v, remote %v", spec.ActionCache, spec.ActionCacheReadOnly, spec.RemotePlatform, spec.RemoteTimeout, spec.Remote)
	}
	report := func(r actionCacheReport) job.Result {
		data, _ := json.Marshal(r)
		return job.Result{OK: true, Data: data}
	}
	refused := report(actionCacheReport{Refused: true, ActionCacheWarning: "refused"})
	for i, want := range []string{"refused", "", ""} {
		if got := b.Warning(it, refused); got != want {
			t.Errorf("refusal %d: warning %q, want %q", i+1, got, want)
		}
	}
	if w := b.Warning(it, report(actionCacheReport{ActionCacheWarning: "unavailable"})); w != "unavailable" {
		t.Errorf("a record that failed otherwise: warning %q, want it", w)
	}
	if w := b.Warning(it, job.Result{OK: true}); w != "" {
		t.Errorf("a build that recorded: warning %q", w)
	}
	if !payload().ActionCacheReadOnly {
		t.Error("a payload made after a refusal would record again")
	}

	b.Remote.Execution.URL = "grpc://127.0.0.1:2"
	if spec := payload(); spec.ActionCache != nil {
		t.Error("with an execution service the build is remote, not cache-only")
	}
}

func TestRecordedOutputIsBounded(t *testing.T) {
	var o recordedOutput
	chunk := strings.Repeat("x", 1<<20)
	for i := 0; i < 17; i++ {
		fmt.Fprint(&o, chunk)
	}
	got := o.bytes()
	want := fmt.Sprintf("\n[gantry] the output's last %d bytes are not recorded\n", 1<<20)
	if len(got) != recordedOutputLimit+len(want) || !strings.HasSuffix(string(got), want) {
		t.Errorf("%d bytes recorded ending %q, want %d and %q", len(got), got[len(got)-60:], recordedOutputLimit+len(want), want)
	}
}
