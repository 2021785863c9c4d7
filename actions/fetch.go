package actions

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/resources"
	"github.com/gantry-build/gantry/source"
)

// sourcesSpec is the payload of fetch and track jobs.
type sourcesSpec struct {
	CacheDir    string        `json:"cache-dir"`
	ProjectRoot string        `json:"project-root"`
	SourcesDir  string        `json:"sources-dir"`
	Sources     []source.Spec `json:"sources"`
	// TrackWithMirrors: track asks the mirrors too, not upstream alone.
	TrackWithMirrors bool `json:"track-with-mirrors,omitempty"`
	// Remotes keep sources ([[remote]] sources = true): fetch asks them first.
	Remotes []remote.Spec `json:"source-remotes,omitempty"`
}

func (sp *sourcesSpec) options(r *job.Reporter) (source.FetchOptions, error) {
	idle, err := NetIdleTimeout()
	if err != nil {
		return source.FetchOptions{}, err
	}
	return source.FetchOptions{SourcesDir: sp.SourcesDir, ProjectRoot: sp.ProjectRoot, Log: r.Writer(), Progress: r.Progress,
		IdleTimeout: idle, TrackWithMirrors: sp.TrackWithMirrors}, nil
}

// NetIdleTimeout reads GANTRY_NET_IDLE_TIMEOUT (a Go duration, "500ms"): a download that
// receives nothing for that long fails and is retried. A knob for tests and CI; unset,
// 0 gives source's default (60s). Jobs inherit gantry's environment.
func NetIdleTimeout() (time.Duration, error) {
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
	idle, _ := NetIdleTimeout() // decodeSources checked it
	for _, spec := range withIdleTimeout(sp.Remotes, idle) {
		a, err := remote.OpenAssets(spec)
		if err != nil {
			return job.Result{}, err
		}
		defer a.Close()
		o.Remotes = append(o.Remotes, a)
	}
	for i := range sp.Sources {
		s := &sp.Sources[i]
		if source.Cached(sp.SourcesDir, s) {
			continue
		}
		r.Status("fetching " + s.Describe())
		o.Served = servedBy(r, "fetched", i)
		if err := source.Fetch(ctx, s, o); err != nil {
			return job.Result{Temporary: source.IsTemporary(err)}, fmt.Errorf("source %d: %w", i+1, err)
		}
	}
	return job.Result{OK: true}, nil
}

// Sources makes the payloads of a project's fetch and track jobs, and its Fetch and Track queues.
type Sources struct {
	Cache          *cache.Cache
	Project        *element.Project
	NetworkRetries int
	// TrackWithMirrors: track jobs ask the mirrors too (--track-with-mirrors).
	TrackWithMirrors bool
	// Remotes are the session's remotes; those with sources = true keep sources.
	Remotes []remote.Spec
}

// Payload is the payload of a fetch or track job for e.
func (s Sources) Payload(e *element.Element) (json.RawMessage, error) {
	return json.Marshal(sourcesSpec{CacheDir: s.Cache.Root, ProjectRoot: projectRoot(s.Project.Root, e), SourcesDir: s.Cache.SourcesDir(), Sources: e.Sources,
		TrackWithMirrors: s.TrackWithMirrors, Remotes: slices.DeleteFunc(slices.Clone(s.Remotes), func(r remote.Spec) bool { return !r.Sources })})
}

// servedBy reports, as the job's status, which URL served source i (0-based) of a job:
// "fetched source 1 from http://mirror.internal/gnu/hello-2.12.tar.gz".
func servedBy(r *job.Reporter, verb string, i int) func(url string) {
	return func(url string) { r.Status(fmt.Sprintf("%s source %d from %s", verb, i+1, url)) }
}

// FetchQueue is the Fetch queue of a session: it downloads the sources of elements
// that will be built. Whether an element's sources are cached is asked once per
// session: the answer may cost a git run, and Status is asked often. Sources fetched
// meanwhile for another element with the same source make its fetch job find them
// in place. Its methods run on the scheduler goroutine.
type FetchQueue struct {
	sourceJobs
	cached map[*queues.Item]bool // whether its sources are cached, as first asked
}

// FetchQueue is the Fetch queue of the project's elements.
func (s Sources) FetchQueue() *FetchQueue {
	return &FetchQueue{sourceJobs: sourceJobs{s}, cached: map[*queues.Item]bool{}}
}

func (*FetchQueue) Action() queues.Action { return queues.Fetch }

func (q *FetchQueue) Status(it *queues.Item) (queues.Status, string) {
	if it.Cached {
		return queues.Skip, "cached"
	}
	if localJunction(it.Element) {
		return queues.Skip, "a local junction has nothing to fetch: its project is the directory itself"
	}
	cached, asked := q.cached[it]
	if !asked { // asked once: it may run git
		cached = SourcesCached(q.sources.Cache.SourcesDir(), it.Element)
		q.cached[it] = cached
	}
	if cached {
		return queues.Skip, "sources cached"
	}
	return queues.Ready, ""
}

func (*FetchQueue) Done(*queues.Item, job.Result) {}

// sourceJobs is what the Fetch and Track queues share: each job downloads, with
// an element's sources for payload, and network failures are retried.
type sourceJobs struct{ sources Sources }

// Resources: a download slot.
func (sourceJobs) Resources(*queues.Item) resources.Request {
	return resources.Request{Shared: []resources.Resource{resources.Download}}
}

func (q sourceJobs) Payload(it *queues.Item) (job.Input, error) {
	return jsonInput(q.sources.Payload(it.Element))
}

func (q sourceJobs) Retries() int { return q.sources.NetworkRetries }

// SourcesCached says whether every source of e is in the source cache at sourcesDir;
// an element with an open workspace needs none.
func SourcesCached(sourcesDir string, e *element.Element) bool {
	if e.Workspace != "" {
		return true // it builds from its workspace
	}
	for i := range e.Sources {
		if !source.Cached(sourcesDir, &e.Sources[i]) {
			return false
		}
	}
	return true
}
