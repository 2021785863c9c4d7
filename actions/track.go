package actions

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/source"
)

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
		o.Served = servedBy(r, "tracked", i)
		ref, err := source.Track(ctx, s, o)
		if err != nil {
			return job.Result{Temporary: source.IsTemporary(err)}, fmt.Errorf("source %d: %w", i+1, err)
		}
		refs[i] = ref
	}
	data, err := json.Marshal(refs)
	return job.Result{OK: true, Data: data}, err
}

// RefChange is one source whose ref track changed.
type RefChange struct {
	Element string
	Source  int    // 1-based
	Desc    string // the source, described
	Old     string // "" when it had none
	New     string
}

// Tracker is the Track queue of a session, with what it found: it resolves each
// source's track (branch, tag, URL) to a ref, and the new refs go into the graph (so
// keys can be computed from them) and into the lock. Its methods run on the
// scheduler goroutine: the lock and the graph are touched by nobody else meanwhile.
type Tracker struct {
	sourceJobs
	graph   *element.Graph
	lock    *element.Lock
	changed []*element.Lock // the locks a ref changed in, to write
	changes []RefChange
	err     error
}

// Tracker is the Track queue of the elements of g, whose refs are kept in lock.
func (s Sources) Tracker(g *element.Graph, lock *element.Lock) *Tracker {
	return &Tracker{sourceJobs: sourceJobs{s}, graph: g, lock: lock}
}

func (*Tracker) Action() queues.Action { return queues.Track }

// Status: an element is tracked if one of its sources has a track, unless its project
// is staged from a tar or git junction (its lock is not the user's to write there).
func (t *Tracker) Status(it *queues.Item) (queues.Status, string) {
	if _, _, staged := t.lockOf(it.Element); staged != "" {
		return queues.Skip, fmt.Sprintf("its project is staged from junction %s: `gantry track %s` moves it", staged, staged)
	}
	for i := range it.Element.Sources {
		if it.Element.Sources[i].Trackable() {
			return queues.Ready, ""
		}
	}
	if localJunction(it.Element) {
		return queues.Skip, "a local junction has nothing to track: its project is the directory itself"
	}
	return queues.Skip, "nothing to track"
}

// Done merges the refs the job found (its Result.Data) into the lock and the graph.
func (t *Tracker) Done(it *queues.Item, res job.Result) {
	var refs []string
	if json.Unmarshal(res.Data, &refs) != nil {
		return
	}
	e := it.Element
	lock, name, _ := t.lockOf(e)
	merged, changes := mergeRefs(e, lock.Refs(name), refs)
	t.changes = append(t.changes, changes...)
	if slices.ContainsFunc(merged, func(r string) bool { return r != "" }) {
		lock.Set(name, merged)
	}
	if len(changes) > 0 && !slices.Contains(t.changed, lock) {
		t.changed = append(t.changed, lock)
	}
	if err := t.graph.SetRefs(e, refs); err != nil && t.err == nil {
		t.err = fmt.Errorf("%s: keying the tracked sources: %w", e.Name, err)
	}
}

// localJunction says whether e is a junction whose project is a local directory.
func localJunction(e *element.Element) bool {
	return e.IsJunction() && !slices.ContainsFunc(e.Sources, func(s source.Spec) bool { return s.Kind != source.Local })
}

// mergeRefs is the lock's new refs for e: each source's tracked ref, except for a
// source pinned in the element or one track resolved to nothing ("" in tracked), which
// keep their locked ref. changes are the sources whose ref changed.
func mergeRefs(e *element.Element, locked, tracked []string) (merged []string, changes []RefChange) {
	merged = make([]string, len(e.Sources))
	for i, src := range e.Sources {
		old := ""
		if i < len(locked) {
			old = locked[i]
		}
		merged[i] = old
		if i < len(tracked) && tracked[i] != "" && !src.Pinned {
			merged[i] = tracked[i]
			if tracked[i] != old {
				changes = append(changes, RefChange{Element: e.Name, Source: i + 1, Desc: src.Describe(), Old: old, New: tracked[i]})
			}
		}
	}
	return merged, changes
}

// lockOf is the lock e's refs are kept in and e's name there: t's for an element of
// the graph's project, its own project's for an element of a junction's
// (element.Graph.LockOf).
func (t *Tracker) lockOf(e *element.Element) (lock *element.Lock, name string, staged string) {
	if t.graph == nil || e.Project() == nil || e.Project() == t.graph.Project {
		return t.lock, e.Name, ""
	}
	return t.graph.LockOf(e)
}

// Finish writes each gantry.lock in which a ref changed, and returns the changes.
func (t *Tracker) Finish() ([]RefChange, error) {
	for _, lock := range t.changed {
		if err := lock.Write(); err != nil {
			return t.changes, err
		}
	}
	return t.changes, t.err
}
