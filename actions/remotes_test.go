package actions

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
)

func testRemotes(t *testing.T, specs ...cache.RemoteSpec) *Remotes {
	t.Helper()
	rs, err := NewRemotes("p", specs, 2, func() func(int) time.Duration { return nil }, func(w string) { t.Errorf("warning before the session: %s", w) })
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func pullData(t *testing.T, pr pullResult) json.RawMessage {
	t.Helper()
	data, err := json.Marshal(pr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A pull that found a remote down marks it down once, with one warning, and the element
// is built instead; the next pull and push leave it out.
func TestRecoverPullMarksARemoteDownOnce(t *testing.T) {
	pull, push := cache.RemoteSpec{URL: "http://pull.example"}, cache.RemoteSpec{URL: "http://push.example", Push: true}
	rs := testRemotes(t, pull, push)
	it := &queues.Item{Element: &element.Element{Name: "x.toml", Key: "k1"}}
	res := job.Result{Temporary: true, Data: pullData(t, pullResult{Down: []string{pull.Display()}, Reasons: []string{"connection refused"}})}
	msg, ok := rs.recoverPull(it, res)
	if !ok || msg != downWarning("connection refused") {
		t.Errorf("recoverPull = %q, %v; want the down warning, true", msg, ok)
	}
	if msg, ok := rs.recoverPull(it, res); !ok || msg != "" {
		t.Errorf("recoverPull again = %q, %v; want no second warning, true", msg, ok)
	}
	if up := rs.up(false); len(up) != 1 || up[0].Display() != push.Display() {
		t.Errorf("up = %v, want only the push remote", up)
	}
	if msg, ok := rs.recoverPull(it, job.Result{Data: pullData(t, pullResult{})}); ok || msg != "" {
		t.Errorf("recoverPull of a failure no remote caused = %q, %v; want the element to fail", msg, ok)
	}
}

// A push remote that served wrong bytes for an artifact gets it again in full: the push's
// payload names the remote and the blob for repair; a pull-only remote is not repaired.
func TestWrongBytesRepairedByThePush(t *testing.T) {
	pull, push := cache.RemoteSpec{URL: "http://pull.example"}, cache.RemoteSpec{URL: "http://push.example", Push: true}
	rs := testRemotes(t, pull, push)
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	it := &queues.Item{Element: &element.Element{Name: "x.toml", Key: "k1"}}
	blob := cache.DigestOf([]byte("wrong"))
	pr := pullResult{Warning: "remote served wrong bytes", Wrong: []wrongBytes{{Remote: push.Display(), Blob: blob}, {Remote: pull.Display()}}}
	msg, ok := rs.recoverPull(it, job.Result{Data: pullData(t, pr)})
	if !ok || !strings.Contains(msg, "uploaded again to the push remote") {
		t.Errorf("recoverPull = %q, %v; want the warning with the repair, true", msg, ok)
	}
	data, err := rs.payload(c, it, true)
	if err != nil {
		t.Fatal(err)
	}
	var ps pullSpec
	if err := json.Unmarshal(data, &ps); err != nil {
		t.Fatal(err)
	}
	if len(ps.Remotes) != 1 || ps.Remotes[0].Display() != push.Display() {
		t.Errorf("push remotes = %v, want the push remote", ps.Remotes)
	}
	if got := ps.Repair[push.Display()]; len(ps.Repair) != 1 || len(got) != 1 || got[0] != blob {
		t.Errorf("repair = %v, want %s on the push remote only", ps.Repair, blob)
	}
	if data, err = rs.payload(c, it, false); err != nil {
		t.Fatal(err)
	}
	if ps = (pullSpec{}); json.Unmarshal(data, &ps) != nil || ps.Repair != nil || len(ps.Remotes) != 2 || ps.Project != "p" || ps.Key != "k1" {
		t.Errorf("pull payload = %+v, want both remotes, no repair", ps)
	}
}
