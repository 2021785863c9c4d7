package queues

import (
	"slices"
	"testing"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/resources"
)

func TestBuildQueueTakesThePoolToken(t *testing.T) {
	it := &Item{Element: &element.Element{Name: "a.toml", Pool: "lic"}}
	req := BuildQueue{}.Resources(it)
	for _, r := range []resources.Resource{resources.Process, resources.Cache, resources.PoolResource("lic")} {
		if !slices.Contains(req.Shared, r) {
			t.Errorf("build request %v lacks %s", req, r)
		}
	}
	if req := (BuildQueue{}).Resources(&Item{Element: &element.Element{Name: "b.toml"}}); len(req.Shared) != 2 {
		t.Errorf("element without pool asks for %v", req)
	}
}
