package actions

import (
	"testing"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/source"
)

// TestFetchAsksSourcesOnce: whether an element's sources are cached (a git run for
// git sources) is asked once per element, however many turns it waits for a
// download token (the loop asks its Status on each): an answer that changes
// meanwhile (here its workspace opens) is not seen.
func TestFetchAsksSourcesOnce(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fetch := Sources{Cache: c, Project: &element.Project{Root: t.TempDir()}}.FetchQueue()
	var items []*queues.Item
	for _, name := range []string{"a", "b", "c", "d"} {
		e := &element.Element{Name: name, Sources: []source.Spec{{Kind: source.Tar, URL: "https://example.com/" + name + ".tar"}}}
		items = append(items, &queues.Item{Element: e})
	}
	for turn := range 3 {
		for _, it := range items {
			if st, why := fetch.Status(it); st != queues.Ready {
				t.Errorf("turn %d: %s is %v (%s), want ready: its sources were asked again", turn, it.Name(), st, why)
			}
			it.Element.Workspace = "/workspace/" + it.Name() // needs no sources from now on
		}
	}
	if st, _ := (Sources{Cache: c}).FetchQueue().Status(items[0]); st != queues.Skip {
		t.Errorf("a new Fetch queue says %v about a, want skip: the answer did not change", st)
	}
}
