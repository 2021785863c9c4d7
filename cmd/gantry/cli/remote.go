package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
)

// remoteFlags are --remote and --no-remote, on build, pull and push.
type remoteFlags struct {
	urls []string
	none bool
}

func (f *remoteFlags) register(cmd *cobra.Command, what string) {
	cmd.Flags().StringArrayVar(&f.urls, "remote", nil, "use this remote artifact cache instead of the configured ones ("+what+"; repeatable)")
	cmd.Flags().BoolVar(&f.none, "no-remote", false, "use no remote artifact cache")
}

// remotes resolves the session's remotes: --no-remote, else --remote (pushed to only
// by the push command), else the user config's [[remote]] then project.toml's.
func (s *session) remotes(f *remoteFlags, push bool) ([]remote.Spec, error) {
	switch {
	case f.none && len(f.urls) > 0:
		return nil, usagef("--remote and --no-remote cannot be used together")
	case f.none:
		return nil, nil
	case len(f.urls) > 0:
		var specs []remote.Spec
		for _, u := range f.urls {
			if err := element.CheckRemoteURL(u); err != nil {
				return nil, usagef("--remote: %v", err)
			}
			specs = append(specs, remote.Spec{URL: u, Push: push})
		}
		return specs, nil
	}
	return append(append([]remote.Spec{}, s.user.Remotes...), s.project.Remotes...), nil
}

// remoteSet is a session's remotes and which of them are down. The plan's lookups use
// it before the scheduler runs; afterwards only the queues' callbacks do, on the
// scheduler goroutine.
type remoteSet struct {
	s       *session
	specs   []remote.Spec
	down    map[string]bool // by spec.Display()
	warn    func(string)    // a warning before the session starts
	mu      sync.Mutex      // guards down and stores during the plan's parallel lookups
	stores  map[string]remote.Store
	retries int
	from    map[*queues.Item]string // the remote each item was pulled from
	// lease is the push remote that grants build-once leases (probeLeases); nil: none.
	lease    *remote.Spec
	leases   map[string]*heldLease // the leases this session holds, by cache key
	waits    map[string]int        // how often each key's pull waited for another session's lease
	renewing sync.WaitGroup        // their renew goroutines
	// wrong is, by cache key, the push remotes that served wrong bytes for its
	// artifact and the blobs they were wrong about (none: its entry): a push
	// repairs them (pullSpec.Repair).
	wrong map[string]map[string][]cache.Digest
	// wrongPulls are the elements pulled intact from a remote after another served
	// wrong bytes for them: the pull command fails.
	wrongPulls []string
}

func (s *session) remoteSet(specs []remote.Spec, warn func(string)) (*remoteSet, error) {
	idle, err := netIdleTimeout()
	if err != nil {
		return nil, err
	}
	specs = withIdleTimeout(specs, idle)
	return &remoteSet{s: s, specs: specs, down: map[string]bool{}, warn: warn, stores: map[string]remote.Store{}, retries: s.networkRetries(),
		from: map[*queues.Item]string{}, leases: map[string]*heldLease{}, waits: map[string]int{}, wrong: map[string]map[string][]cache.Digest{}}, nil
}

func (rs *remoteSet) hasPush() bool {
	for _, r := range rs.specs {
		if r.Push {
			return true
		}
	}
	return false
}

// up lists the remotes not marked down, push remotes only with push.
func (rs *remoteSet) up(push bool) []remote.Spec {
	var out []remote.Spec
	for _, r := range rs.specs {
		if !rs.down[r.Display()] && (r.Push || !push) {
			out = append(out, r)
		}
	}
	return out
}

func (rs *remoteSet) close() {
	for key := range rs.leases {
		rs.release(key)
	}
	rs.renewing.Wait()
	for _, st := range rs.stores {
		st.Close()
	}
}

// lookup says which of es some remote has (queues.PlanOptions.OnRemote): bounded
// parallel entry reads, remotes in order. A remote that stays unavailable after the
// network retries, or refuses the credentials, is marked down with one warning.
func (rs *remoteSet) lookup(es []*element.Element) []bool {
	hits := make([]bool, len(es))
	if len(es) == 0 {
		return hits
	}
	backoff := rs.s.retryBackoff()
	if backoff == nil {
		backoff = func(attempt int) time.Duration { return time.Second << min(attempt-1, 5) }
	}
	var g errgroup.Group
	g.SetLimit(16)
	for i, e := range es {
		g.Go(func() error {
			for _, spec := range rs.specs {
				store := rs.store(spec)
				if store == nil {
					continue
				}
				for attempt := 1; ; attempt++ {
					_, err := store.GetEntry(context.Background(), e.Key)
					switch {
					case err == nil:
						hits[i] = true
						return nil
					case errors.Is(err, cache.ErrNotFound) || remote.IsKind(err, remote.Corrupt):
					case remote.IsKind(err, remote.Unavailable) && attempt <= rs.retries:
						time.Sleep(backoff(attempt))
						continue
					default:
						rs.markDown(spec, err)
					}
					break
				}
			}
			return nil
		})
	}
	g.Wait()
	return hits
}

// store opens spec's store once; nil when it is down or cannot be opened.
func (rs *remoteSet) store(spec remote.Spec) remote.Store {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	name := spec.Display()
	if rs.down[name] {
		return nil
	}
	if st := rs.stores[name]; st != nil {
		return st
	}
	st, err := remote.Open(spec)
	if err != nil {
		rs.down[name] = true
		rs.warn(fmt.Sprintf("%v: not used in this session", err))
		return nil
	}
	rs.stores[name] = st
	return st
}

// markDown marks a remote down once, with a warning (before the session) saying why.
func (rs *remoteSet) markDown(spec remote.Spec, err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.down[spec.Display()] {
		return
	}
	rs.down[spec.Display()] = true
	rs.warn(downWarning(err.Error()))
}

func downWarning(why string) string {
	return why + "; the remote is not used for the rest of this session: elements are fetched and built instead, and nothing is pushed to it"
}

// pullSpec is the payload of pull and push jobs. It carries the remotes' settings
// (token-file paths, never tokens); it travels to the job on a pipe, never on disk.
type pullSpec struct {
	CacheDir string        `json:"cache-dir"`
	Project  string        `json:"project"`
	Element  string        `json:"element"`
	Key      string        `json:"key"`
	Remotes  []remote.Spec `json:"remotes"`
	// Lease: a pull asks this remote for the build-once lease first; a push carries
	// Fence, the token of the lease the session holds, to it.
	Lease *remote.Spec `json:"lease,omitempty"`
	Fence uint64       `json:"fence,omitempty"`
	Waits int          `json:"waits,omitempty"` // how often the pull waited already (askLease)
	// Repair: a push sends the artifact again in full to these remotes (by
	// Display), which served wrong bytes for it: the blobs named, or its entry.
	Repair map[string][]cache.Digest `json:"repair,omitempty"`
}

// pullResult is a pull job's Result.Data.
type pullResult struct {
	From    string       `json:"from,omitempty"`    // the remote it was pulled from
	Down    []string     `json:"down,omitempty"`    // remotes that were unavailable or refused the credentials
	Reasons []string     `json:"reasons,omitempty"` // why, for each
	Warning string       `json:"warning,omitempty"` // a remote sent bad bytes
	Wrong   []wrongBytes `json:"wrong,omitempty"`   // which remotes, about which blobs
	// Lease: this session holds the element's build-once lease and builds it.
	Lease *remote.LeaseReply `json:"lease,omitempty"`
	// NoLeases: the lease remote does not grant leases after all.
	NoLeases bool `json:"no-leases,omitempty"`
}

// wrongBytes is a remote that served wrong bytes for an artifact: for blob Blob, or,
// when it is zero, for the artifact's entry or tree.
type wrongBytes struct {
	Remote string       `json:"remote"`
	Blob   cache.Digest `json:"blob"`
}

// noteWrong remembers the push remotes that served wrong bytes for the artifact of it
// (pr.Wrong), for its push to repair. Scheduler goroutine only.
func (rs *remoteSet) noteWrong(it *queues.Item, pr pullResult) {
	for _, w := range pr.Wrong {
		if !slices.ContainsFunc(rs.specs, func(r remote.Spec) bool { return r.Push && r.Display() == w.Remote }) {
			continue
		}
		key := it.Element.Key
		if rs.wrong[key] == nil {
			rs.wrong[key] = map[string][]cache.Digest{}
		}
		blobs := rs.wrong[key][w.Remote]
		if !w.Blob.IsZero() && !slices.Contains(blobs, w.Blob) {
			blobs = append(blobs, w.Blob)
		}
		rs.wrong[key][w.Remote] = blobs
	}
}

func (rs *remoteSet) payload(c *cache.Cache, it *queues.Item, push bool) (json.RawMessage, error) {
	remotes := rs.up(push)
	if len(remotes) == 0 && push {
		return nil, fmt.Errorf("every push remote is down for this session")
	}
	ps := pullSpec{CacheDir: c.Root, Project: rs.s.project.Name, Element: it.Name(), Key: it.Element.Key, Remotes: remotes}
	if push {
		for _, r := range remotes {
			if blobs, ok := rs.wrong[it.Element.Key][r.Display()]; ok {
				if ps.Repair == nil {
					ps.Repair = map[string][]cache.Digest{}
				}
				ps.Repair[r.Display()] = blobs
			}
		}
	}
	if l := rs.leases[it.Element.Key]; push && l != nil {
		ps.Lease, ps.Fence = rs.lease, l.token
	} else if !push && rs.leasing(it) {
		ps.Lease, ps.Waits = rs.lease, rs.waits[it.Element.Key]
	}
	// A pull with every remote down runs and is skipped: the element is built.
	return json.Marshal(ps)
}

// recoverPull books a pull that did not pull (queues.PullQueue.RecoverFunc): the
// remotes it found down are marked so, with one warning each, and the element is
// built instead.
func (rs *remoteSet) recoverPull(it *queues.Item, res job.Result) (string, bool) {
	var pr pullResult
	json.Unmarshal(res.Data, &pr)
	rs.bookLease(it, pr)
	rs.noteWrong(it, pr)
	var warnings []string
	if pr.Warning != "" {
		w := pr.Warning + "; it is built here instead"
		if len(rs.wrong[it.Element.Key]) > 0 {
			w += ", then uploaded again to the push remote that served wrong bytes"
		}
		warnings = append(warnings, w)
	}
	for i, name := range pr.Down {
		if !rs.down[name] {
			rs.down[name] = true
			why := "remote " + name + " is unavailable"
			if i < len(pr.Reasons) {
				why = pr.Reasons[i]
			}
			warnings = append(warnings, downWarning(why))
		}
	}
	if len(pr.Down) == 0 && pr.Warning == "" && !res.OK {
		// Not a remote's fault (the local cache, say): the element fails.
		return "", false
	}
	msg := ""
	for i, w := range warnings {
		if i > 0 {
			msg += "; "
		}
		msg += w
	}
	return msg, true
}

// pullQueue and pushQueue are the session's remote queues.
func (rs *remoteSet) pullQueue(c *cache.Cache, found bool) queues.PullQueue {
	q := queues.PullQueue{Found: found, NetworkRetries: rs.retries,
		PayloadFunc: func(it *queues.Item) (json.RawMessage, error) { return rs.payload(c, it, false) },
		DoneFunc: func(it *queues.Item, res job.Result) {
			var pr pullResult
			if json.Unmarshal(res.Data, &pr) == nil {
				rs.from[it] = pr.From
				rs.bookLease(it, pr)
				rs.noteWrong(it, pr)
				if len(pr.Wrong) > 0 {
					rs.wrongPulls = append(rs.wrongPulls, it.Name())
				}
			}
		},
		WarningFunc: func(it *queues.Item, res job.Result) string {
			var pr pullResult
			if json.Unmarshal(res.Data, &pr) != nil || pr.Warning == "" {
				return ""
			}
			return pr.Warning + "; pulled from " + pr.From + " instead"
		}}
	if found {
		q.LeaseFunc = rs.leasing
		// Without it, a pull that fails (a remote served wrong bytes) fails the pull command.
		q.RecoverFunc = rs.recoverPull
	}
	return q
}

func (rs *remoteSet) pushQueue(c *cache.Cache, all bool) queues.PushQueue {
	return queues.PushQueue{All: all, NetworkRetries: rs.retries,
		PayloadFunc: func(it *queues.Item) (json.RawMessage, error) { return rs.payload(c, it, true) },
		WarningFunc: func(it *queues.Item, res job.Result) string {
			var pr pushResult
			json.Unmarshal(res.Data, &pr)
			return pr.Warning
		},
		SkipFunc: func(it *queues.Item) string {
			up := rs.up(true)
			if len(up) == 0 {
				return "every push remote is down for this session"
			}
			from := rs.from[it]
			if from == "" {
				return ""
			}
			for _, r := range up {
				if r.Display() != from {
					return ""
				}
			}
			return "pulled from the push remote"
		}}
}

// withIdleTimeout returns specs with the idle timeout of GANTRY_NET_IDLE_TIMEOUT (idle;
// 0 keeps the default). The pull and push jobs get it in their specs.
func withIdleTimeout(specs []remote.Spec, idle time.Duration) []remote.Spec {
	if idle <= 0 {
		return specs
	}
	out := slices.Clone(specs)
	for i := range out {
		out[i].IdleTimeout = idle
	}
	return out
}
