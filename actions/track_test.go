package actions

import (
	"slices"
	"testing"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/source"
)

// mergeRefs takes each tracked ref into the lock, except for a pinned source or one
// track resolved to nothing, and names only the refs that changed.
func TestMergeRefs(t *testing.T) {
	e := &element.Element{Name: "app.toml", Sources: []source.Spec{
		{Kind: source.Git, URL: "https://example.com/a.git"},
		{Kind: source.Git, URL: "https://example.com/b.git", Pinned: true},
		{Kind: source.Tar, URL: "https://example.com/c.tar"},
		{Kind: source.Git, URL: "https://example.com/d.git"},
	}}
	for _, tc := range []struct {
		name            string
		locked, tracked []string
		want            []string
		changed         []int // sources (1-based)
	}{
		{"nothing locked", nil, []string{"a1", "b1", "c1", "d1"}, []string{"a1", "", "c1", "d1"}, []int{1, 3, 4}},
		{"unchanged", []string{"a1", "b0", "c1", "d1"}, []string{"a1", "b1", "c1", "d1"}, []string{"a1", "b0", "c1", "d1"}, nil},
		{"one moved", []string{"a1", "b0", "c1", "d1"}, []string{"a2", "b1", "c1", "d1"}, []string{"a2", "b0", "c1", "d1"}, []int{1}},
		{"not resolved keeps the lock", []string{"a1", "b0", "c1", "d1"}, []string{"", "", "c2"}, []string{"a1", "b0", "c2", "d1"}, []int{3}},
		{"lock shorter than the sources", []string{"a1"}, []string{"a1", "b1", "", "d1"}, []string{"a1", "", "", "d1"}, []int{4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			merged, changes := mergeRefs(e, tc.locked, tc.tracked)
			if !slices.Equal(merged, tc.want) {
				t.Errorf("merged = %q, want %q", merged, tc.want)
			}
			var changed []int
			for _, ch := range changes {
				changed = append(changed, ch.Source)
				old := ""
				if ch.Source-1 < len(tc.locked) {
					old = tc.locked[ch.Source-1]
				}
				if ch.Element != e.Name || ch.Old != old || ch.New != tc.tracked[ch.Source-1] || ch.Desc != e.Sources[ch.Source-1].Describe() {
					t.Errorf("change %+v does not match source %d", ch, ch.Source)
				}
			}
			if !slices.Equal(changed, tc.changed) {
				t.Errorf("changed sources = %v, want %v", changed, tc.changed)
			}
		})
	}
}

// The Track queue tracks an element with a source that has a track and is not pinned.
func TestTrackerStatus(t *testing.T) {
	tr := Sources{}.Tracker(nil, nil)
	for _, tc := range []struct {
		name    string
		sources []source.Spec
		want    queues.Status
	}{
		{"git", []source.Spec{{Kind: source.Local}, {Kind: source.Git, URL: "https://example.com/a.git"}}, queues.Ready},
		{"pinned", []source.Spec{{Kind: source.Git, URL: "https://example.com/a.git", Pinned: true}}, queues.Skip},
		{"local only", []source.Spec{{Kind: source.Local}}, queues.Skip},
		{"no sources", nil, queues.Skip},
	} {
		it := &queues.Item{Element: &element.Element{Name: "x.toml", Sources: tc.sources}}
		if st, why := tr.Status(it); st != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, st, why, tc.want)
		}
	}
}
