package actions

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
)

// doneJob is a job that has sent its messages and ended with out.
type doneJob struct {
	queues.Running
	out job.Outcome
}

func (j doneJob) Wait() job.Outcome { return j.out }

// doneRunner starts jobs that end at once, with their messages and outcome.
type doneRunner struct {
	msgs []job.Message
	out  job.Outcome
}

func (r doneRunner) Start(_ job.Spec, onMessage func(job.Message)) (queues.Running, error) {
	for _, m := range r.msgs {
		onMessage(m)
	}
	return doneJob{out: r.out}, nil
}

// groupJob runs one build job through GroupCommits' runner: the job has stored an
// artifact's blobs (StoreBlobs, unless prepare removes some) and ends with its ref
// to place. It returns the messages the scheduler got and the outcome.
func groupJob(t *testing.T, c *cache.Cache, available bool, prepare func(cache.PendingRef)) ([]job.MessageType, job.Outcome) {
	t.Helper()
	log, err := c.PutBlob([]byte("a build log\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.StoreBlobs(&cache.Artifact{Project: "demo", Element: "app.toml", Key: "k1", Success: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(p)
	}
	data, err := json.Marshal(groupResult{Commit: &p, Recorded: json.RawMessage(`{"refused":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	r := doneRunner{out: job.Outcome{Result: job.Result{OK: true, Data: data, CacheBytes: 7}}}
	if available {
		r.msgs = []job.Message{{Type: job.MessageAvailable}}
	}
	var got []job.MessageType
	running, err := NewGroupCommits(c).Runner(r).Start(job.Spec{Action: string(queues.Build)}, func(m job.Message) { got = append(got, m.Type) })
	if err != nil {
		t.Fatal(err)
	}
	return got, running.Wait()
}

// A build job that leaves its ref to the session has it placed before its outcome
// reaches the scheduler, which is told its worker is done first
// (queues.MessageCommitting); the outcome's data is the job's own again.
func TestGroupCommitsPlaceTheRef(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	msgs, out := groupJob(t, c, true, nil)
	if !out.Result.OK || string(out.Result.Data) != `{"refused":true}` || out.Result.CacheBytes != 7 {
		t.Errorf("outcome %+v, want the job's success with its own data", out.Result)
	}
	if len(msgs) != 2 || msgs[0] != job.MessageAvailable || msgs[1] != queues.MessageCommitting {
		t.Errorf("messages %v, want available, committing", msgs)
	}
	if _, err := c.Lookup("demo", "app.toml", "k1"); err != nil {
		t.Errorf("no ref after the job's outcome: %v", err)
	}
	// The lock is let go: a cleanup can have it.
	lock, err := c.TryLock(cache.Exclusive)
	if err != nil || lock == nil {
		t.Fatalf("the session still holds the cache lock after its last commit: %v", err)
	}
	lock.Unlock()
}

// Where the session did not hold the cache lock since the job's artifact was
// available, it checks the blobs are still there before placing the ref: a blob a
// cleanup swept meanwhile fails the job, and no ref is written.
func TestGroupCommitsCheckBlobsNotCovered(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var record string
	_, out := groupJob(t, c, false, func(p cache.PendingRef) {
		record = p.Record.String()
		if err := os.Remove(c.BlobPath(p.Record)); err != nil {
			t.Fatal(err)
		}
	})
	want := "committing artifact demo/app.toml: its record: "
	if out.Result.OK || !strings.HasPrefix(out.Result.Error, want) || !strings.Contains(out.Result.Error, record) {
		t.Errorf("outcome %+v, want a failure %q… naming record %s", out.Result, want, record)
	}
	if _, err := c.Lookup("demo", "app.toml", "k1"); err == nil {
		t.Errorf("a ref was placed to a record that is gone")
	}
}
