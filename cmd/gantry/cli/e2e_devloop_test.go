package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// build --trace writes a Chrome trace: JSON, one span per job, and never more build
// spans at once than there are builders; the summary names the critical path.
func TestE2EBuildTrace(t *testing.T) {
	t.Parallel()
	files := map[string]string{"project.toml": projectTOML("top.toml")}
	var leaves []string
	for i := range 5 {
		name := fmt.Sprintf("leaf%d.toml", i)
		leaves = append(leaves, name)
		files["elements/"+name] = manualElement(nil, "sleep 0.1", "echo "+name+" > %{install-root}/"+name)
	}
	files["elements/top.toml"] = manualElement(leaves, "echo top > %{install-root}/top")
	p := newE2EProject(t, files)
	trace := p.scratch("trace.json")
	_, stderr := p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "--builders", "2", "--trace", trace)
	if !strings.Contains(stderr, "Critical path: build leaf") || !strings.Contains(stderr, "→ build top.toml") {
		t.Errorf("summary names no critical path ending in top.toml's build:\n%s", stderr)
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			Ts, Dur       int64
			Pid, Tid      int
			Args          map[string]any
		}
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the trace is not JSON: %v\n%s", err, data)
	}
	type edge struct {
		t     int64
		delta int
	}
	var edges []edge
	jobs := map[string]int{}
	for _, e := range doc.TraceEvents {
		if e.Ph != "X" || e.Cat != "build" {
			continue
		}
		jobs[e.Name]++
		if e.Tid < 1 || e.Tid > 2 {
			t.Errorf("%s built on slot %d, with 2 builders", e.Name, e.Tid)
		}
		edges = append(edges, edge{e.Ts, +1}, edge{e.Ts + e.Dur, -1})
	}
	if len(jobs) != 6 {
		t.Errorf("build spans for %v, want the 6 elements", jobs)
	}
	for name, n := range jobs {
		if n != 1 {
			t.Errorf("%d build spans for %s, want 1", n, name)
		}
	}
	// Ends before starts at the same instant: touching spans do not overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if a.t != b.t {
			return int(a.t - b.t)
		}
		return a.delta - b.delta
	})
	running, most := 0, 0
	for _, e := range edges {
		running += e.delta
		most = max(most, running)
	}
	if most > 2 {
		t.Errorf("%d build spans overlap, with 2 builders", most)
	}
}
