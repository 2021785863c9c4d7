package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/source"
)

// jobCommand is the hidden first argument with which gantry re-executes itself as a job
// worker (DESIGN.md §5, job.Workers): job specs arrive on stdin, one at a time.
const jobCommand = "__job"

func runJob() int {
	defer actions.DropSpareWorkDir()
	return job.RunChild(map[string]job.Handler{
		"build": actions.Assemble,
		"fetch": fetchJob,
		"track": trackJob,
		"pull":  pullJob,
		"push":  pushJob,

		string(queues.Cleanup): cleanupJob,
	})
}

// sourcesSpec is the payload of fetch and track jobs.
type sourcesSpec struct {
	CacheDir    string        `json:"cache-dir"`
	ProjectRoot string        `json:"project-root"`
	SourcesDir  string        `json:"sources-dir"`
	Sources     []source.Spec `json:"sources"`
}

func (sp *sourcesSpec) options(r *job.Reporter) (source.FetchOptions, error) {
	idle, err := netIdleTimeout()
	if err != nil {
		return source.FetchOptions{}, err
	}
	return source.FetchOptions{SourcesDir: sp.SourcesDir, ProjectRoot: sp.ProjectRoot, Log: r.Writer(), Progress: r.Progress,
		IdleTimeout: idle}, nil
}

// netIdleTimeout reads GANTRY_NET_IDLE_TIMEOUT (a Go duration, "500ms"): a download that
// receives nothing for that long fails and is retried. A knob for tests and CI; unset,
// 0 gives source's default (60s). Jobs inherit gantry's environment.
func netIdleTimeout() (time.Duration, error) {
	v := os.Getenv("GANTRY_NET_IDLE_TIMEOUT")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("GANTRY_NET_IDLE_TIMEOUT=%q: want a duration such as 30s", v)
	}
	return d, nil
}

// decodeSources reads a fetch or track job's spec and the options its sources are
// fetched with.
func decodeSources(spec job.Spec, r *job.Reporter) (*sourcesSpec, source.FetchOptions, error) {
	var sp sourcesSpec
	if err := json.Unmarshal(spec.Payload, &sp); err != nil {
		return nil, source.FetchOptions{}, fmt.Errorf("reading %s spec: %w", spec.Action, err)
	}
	o, err := sp.options(r)
	return &sp, o, err
}

// fetchJob downloads every source of an element into the source cache.
func fetchJob(ctx context.Context, spec job.Spec, r *job.Reporter) (job.Result, error) {
	sp, o, err := decodeSources(spec, r)
	if err != nil {
		return job.Result{}, err
	}
	for i := range sp.Sources {
		s := &sp.Sources[i]
		if source.Cached(sp.SourcesDir, s) {
			continue
		}
		r.Status("fetching " + s.Describe())
		if err := source.Fetch(ctx, s, o); err != nil {
			return job.Result{Temporary: source.IsTemporary(err)}, fmt.Errorf("source %d: %w", i+1, err)
		}
	}
	return job.Result{OK: true}, nil
}

// trackJob resolves each tracked source to a ref. Result.Data holds the refs by source
// index ("" for sources that are not tracked).
func trackJob(ctx context.Context, spec job.Spec, r *job.Reporter) (job.Result, error) {
	sp, o, err := decodeSources(spec, r)
	if err != nil {
		return job.Result{}, err
	}
	refs := make([]string, len(sp.Sources))
	for i := range sp.Sources {
		s := &sp.Sources[i]
		if !s.Trackable() {
			continue
		}
		r.Status("tracking " + s.Describe() + " " + s.Track)
		ref, err := source.Track(ctx, s, o)
		if err != nil {
			return job.Result{Temporary: source.IsTemporary(err)}, fmt.Errorf("source %d: %w", i+1, err)
		}
		refs[i] = ref
	}
	data, err := json.Marshal(refs)
	return job.Result{OK: true, Data: data}, err
}
