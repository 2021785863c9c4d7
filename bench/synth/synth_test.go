package synth

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/gantry-build/gantry/element"
)

func mustGenerate(t *testing.T, cfg Config) *Graph {
	t.Helper()
	g, err := Generate(cfg)
	if err != nil {
		t.Fatalf("Generate(%+v): %v", cfg, err)
	}
	return g
}

// readTree returns every regular file under dir keyed by slash path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestDeterministic(t *testing.T) {
	cfg := Config{N: 300, FanIn: 4, Seed: 7, SleepMS: 25}
	d1, d2 := t.TempDir(), t.TempDir()
	if err := mustGenerate(t, cfg).Write(d1, false); err != nil {
		t.Fatal(err)
	}
	if err := mustGenerate(t, cfg).Write(d2, false); err != nil {
		t.Fatal(err)
	}
	f1, f2 := readTree(t, d1), readTree(t, d2)
	// project.toml, build.ninja, Makefile, graph.json, all.toml + N elements.
	if want := cfg.N + 5; len(f1) != want {
		t.Fatalf("wrote %d files, want %d", len(f1), want)
	}
	if len(f1) != len(f2) {
		t.Fatalf("file count differs: %d vs %d", len(f1), len(f2))
	}
	for name, data := range f1 {
		if !bytes.Equal(data, f2[name]) {
			t.Errorf("%s differs between runs", name)
		}
	}

	// A different seed gives a different graph.
	other := mustGenerate(t, Config{N: 300, FanIn: 4, Seed: 8, SleepMS: 25})
	if bytes.Equal(other.Ninja(), f1[NinjaFile]) {
		t.Error("seeds 7 and 8 produced the same build.ninja")
	}
}

func TestShapeIndependentOfSleep(t *testing.T) {
	a := mustGenerate(t, Config{N: 500, FanIn: 3, Seed: 3})
	b := mustGenerate(t, Config{N: 500, FanIn: 3, Seed: 3, SleepMS: 40})
	if !slices.EqualFunc(a.Deps, b.Deps, slices.Equal) {
		t.Error("graph shape depends on -sleep-ms")
	}
	if a.TotalWorkMS() != 0 {
		t.Errorf("no-op graph has total work %d", a.TotalWorkMS())
	}
	for i, d := range b.DurMS {
		if d < 0 || d > 40 {
			t.Fatalf("element %d duration %d out of [0, 40]", i, d)
		}
	}
}

func TestAcyclicAndFanIn(t *testing.T) {
	for _, cfg := range []Config{
		{N: 2000, FanIn: 3, Seed: 1},
		{N: 1000, FanIn: 10, Seed: 2},
		{N: 50, FanIn: 50, Seed: 3}, // dense sampling path
		{N: 100, FanIn: 0, Seed: 4},
		{N: 1, FanIn: 3, Seed: 5},
	} {
		g := mustGenerate(t, cfg)
		maxSeen := 0
		for i, deps := range g.Deps {
			if len(deps) > cfg.FanIn {
				t.Errorf("%+v: element %d has %d deps > fanin", cfg, i, len(deps))
			}
			maxSeen = max(maxSeen, len(deps))
			for j, d := range deps {
				if d < 0 || d >= i {
					t.Errorf("%+v: element %d depends on %d (not < %d)", cfg, i, d, i)
				}
				if j > 0 && deps[j-1] >= d {
					t.Errorf("%+v: element %d deps not strictly ascending: %v", cfg, i, deps)
				}
			}
		}
		if cfg.N > 100 && cfg.FanIn > 0 && maxSeen != cfg.FanIn {
			t.Errorf("%+v: max fan-in seen %d, want %d", cfg, maxSeen, cfg.FanIn)
		}
	}
}

func TestCriticalPathHandChecked(t *testing.T) {
	//   0 (5ms) <- 1 (3ms) <- 3 (1ms) <- 4 (0ms)
	//   2 (10ms) <-----------/
	//   5 (7ms), isolated
	// Paths: 0-1-3-4 = 9ms, 2-3-4 = 11ms (3 elements), 5 = 7ms.
	g := &Graph{
		Config: Config{N: 6, FanIn: 2},
		Deps:   [][]int{{}, {0}, {}, {1, 2}, {3}, {}},
		DurMS:  []int{5, 3, 10, 1, 0, 7},
	}
	if ms, n := g.CriticalPath(); ms != 11 || n != 3 {
		t.Errorf("CriticalPath = (%d, %d), want (11, 3)", ms, n)
	}
	if got := g.TotalWorkMS(); got != 26 {
		t.Errorf("TotalWorkMS = %d, want 26", got)
	}
	if got := g.Edges(); got != 4 {
		t.Errorf("Edges = %d, want 4", got)
	}
	// Two builders: the work (26 / 2 = 13) bounds it; four: the critical path (11).
	if got2, got4 := g.LowerBoundMS(2), g.LowerBoundMS(4); got2 != 13 || got4 != 11 {
		t.Errorf("LowerBoundMS(2), (4) = %g, %g; want 13, 11", got2, got4)
	}
	if got := g.Sinks(); !slices.Equal(got, []int{4, 5}) {
		t.Errorf("Sinks = %v, want [4 5]", got)
	}

	// With all durations zero the critical path is the deepest chain.
	g.DurMS = make([]int, 6)
	if ms, n := g.CriticalPath(); ms != 0 || n != 4 {
		t.Errorf("no-op CriticalPath = (%d, %d), want (0, 4)", ms, n)
	}

	// Equal durations: the tie is broken towards the longer chain.
	g.DurMS = []int{1, 1, 2, 0, 0, 0}
	if ms, n := g.CriticalPath(); ms != 2 || n != 4 {
		t.Errorf("tie CriticalPath = (%d, %d), want (2, 4)", ms, n)
	}
}

type elementFile struct {
	Kind    string   `toml:"kind"`
	Depends []string `toml:"depends"`
	Config  *struct {
		BuildCommands []string `toml:"build-commands"`
	} `toml:"config"`
}

type projectFile struct {
	Name           string   `toml:"name"`
	ElementPath    string   `toml:"element-path"`
	DefaultTargets []string `toml:"default-targets"`
}

// TestProjectFiles parses the generated gantry project back and checks that
// it describes the same graph and that every element (in particular every
// sink) is reachable from all.toml.
func TestProjectFiles(t *testing.T) {
	cfg := Config{N: 400, FanIn: 3, Seed: 11, SleepMS: 20}
	g := mustGenerate(t, cfg)
	files := g.Files()

	var proj projectFile
	if _, err := toml.Decode(string(files[ProjectFile]), &proj); err != nil {
		t.Fatalf("project.toml: %v", err)
	}
	if proj.Name != ProjectName || proj.ElementPath != ElementDir ||
		!slices.Equal(proj.DefaultTargets, []string{AllElement}) {
		t.Errorf("project.toml = %+v", proj)
	}

	elems := map[string]elementFile{}
	for name, data := range files {
		rest, ok := strings.CutPrefix(name, ElementDir+"/")
		if !ok {
			continue
		}
		var e elementFile
		md, err := toml.Decode(string(data), &e)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if u := md.Undecoded(); len(u) > 0 {
			t.Errorf("%s: unexpected keys %v", name, u)
		}
		elems[rest] = e
	}
	if len(elems) != cfg.N+1 {
		t.Fatalf("%d element files, want %d", len(elems), cfg.N+1)
	}

	all, ok := elems[AllElement]
	if !ok || all.Kind != "stack" || all.Config != nil {
		t.Fatalf("all.toml = %+v", all)
	}
	var sinkNames []string
	for _, s := range g.Sinks() {
		sinkNames = append(sinkNames, g.ElementName(s))
	}
	if !slices.Equal(all.Depends, sinkNames) {
		t.Errorf("all.toml depends on %v, want sinks %v", all.Depends, sinkNames)
	}

	for i := range cfg.N {
		name := g.ElementName(i)
		e := elems[name]
		if e.Kind != "manual" || e.Config == nil {
			t.Fatalf("%s = %+v", name, e)
		}
		var want []string
		for _, d := range g.Deps[i] {
			want = append(want, g.ElementName(d))
		}
		if !slices.Equal(e.Depends, want) {
			t.Errorf("%s depends = %v, want %v", name, e.Depends, want)
		}
		switch {
		case g.DurMS[i] == 0 && len(e.Config.BuildCommands) != 0:
			t.Errorf("%s: no-op element has commands %v", name, e.Config.BuildCommands)
		case g.DurMS[i] > 0 && !slices.Equal(e.Config.BuildCommands, []string{g.Command(i)}):
			t.Errorf("%s: commands %v, want [%s]", name, e.Config.BuildCommands, g.Command(i))
		}
	}

	// Walk the parsed files from all.toml: every element must be reached.
	seen := map[string]bool{}
	stack := []string{AllElement}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[n] {
			continue
		}
		seen[n] = true
		e, ok := elems[n]
		if !ok {
			t.Fatalf("dangling dependency %q", n)
		}
		stack = append(stack, e.Depends...)
	}
	if len(seen) != len(elems) {
		t.Errorf("reached %d of %d elements from %s", len(seen), len(elems), AllElement)
	}
}

func TestNamesAndCommands(t *testing.T) {
	g := &Graph{Config: Config{N: 2000}, DurMS: []int{13, 0, 1500}}
	if got := g.ElementName(7); got != "e0007.toml" {
		t.Errorf("ElementName(7) = %q", got)
	}
	if got := g.Stamp(1999); got != "out/e1999.stamp" {
		t.Errorf("Stamp(1999) = %q", got)
	}
	for i, want := range []string{"sleep 0.013", ":", "sleep 1.500"} {
		if got := g.Command(i); got != want {
			t.Errorf("Command(%d) = %q, want %q", i, got, want)
		}
	}
	g.N = 10000
	if got := g.ElementName(7); got != "e00007.toml" {
		t.Errorf("N=10000: ElementName(7) = %q", got)
	}
}

func TestNinjaAndMake(t *testing.T) {
	g := &Graph{
		Config: Config{N: 3, FanIn: 2, SleepMS: 20},
		Deps:   [][]int{{}, {0}, {0}},
		DurMS:  []int{13, 0, 20},
	}
	ninja := string(g.Ninja())
	for _, want := range []string{
		"rule run\n  command = $cmd && touch $out\n",
		"build out/e0.stamp: run\n  cmd = sleep 0.013\n",
		"build out/e1.stamp: run out/e0.stamp\n  cmd = :\n",
		"build out/e2.stamp: run out/e0.stamp\n  cmd = sleep 0.020\n",
		"build all: phony out/e1.stamp out/e2.stamp\ndefault all\n",
	} {
		if !strings.Contains(ninja, want) {
			t.Errorf("build.ninja lacks %q:\n%s", want, ninja)
		}
	}
	mk := string(g.Makefile())
	for _, want := range []string{
		"\nall: out/e1.stamp out/e2.stamp\n",
		"\nout/e0.stamp: | out\n\tsleep 0.013 && touch $@\n",
		"\nout/e1.stamp: out/e0.stamp | out\n\t: && touch $@\n",
		"\nout/e2.stamp: out/e0.stamp | out\n\tsleep 0.020 && touch $@\n",
	} {
		if !strings.Contains(mk, want) {
			t.Errorf("Makefile lacks %q:\n%s", want, mk)
		}
	}
}

func TestGraphJSON(t *testing.T) {
	g := mustGenerate(t, Config{N: 200, FanIn: 3, Seed: 9, SleepMS: 10})
	var got map[string]any
	if err := json.Unmarshal(g.GraphJSON(), &got); err != nil {
		t.Fatal(err)
	}
	ms, n := g.CriticalPath()
	want := map[string]float64{
		"n": 200, "edges": float64(g.Edges()), "seed": 9, "fanin": 3, "sleep_ms": 10,
		"total_work_ms": float64(g.TotalWorkMS()), "critical_path_ms": float64(ms),
		"critical_path_len": float64(n), "sinks": float64(len(g.Sinks())),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("graph.json %s = %v, want %v", k, got[k], v)
		}
	}
}

func TestWriteRefusesNonEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := mustGenerate(t, Config{N: 120, FanIn: 3, Seed: 1})
	if err := big.Write(dir, false); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("Write into non-empty dir: err = %v, want ErrNotEmpty", err)
	}
	if err := big.Write(dir, true); err != nil {
		t.Fatal(err)
	}
	// Overwriting with a smaller graph leaves no stale element files.
	small := mustGenerate(t, Config{N: 20, FanIn: 3, Seed: 1})
	if err := small.Write(dir, true); err != nil {
		t.Fatal(err)
	}
	files := readTree(t, dir)
	if _, ok := files["keep"]; !ok {
		t.Error("-force removed an unrelated file")
	}
	if len(files) != 20+5+1 {
		t.Errorf("after overwrite: %d files, want %d", len(files), 26)
	}
	if _, ok := files["elements/e100.toml"]; ok {
		t.Error("stale element file survived -force")
	}
}

func TestValidate(t *testing.T) {
	for _, cfg := range []Config{{N: 0}, {N: 5, FanIn: -1}, {N: 5, SleepMS: -1}} {
		if _, err := Generate(cfg); err == nil {
			t.Errorf("Generate(%+v) succeeded", cfg)
		}
	}
}

// TestAdversarialShapes: the chain declared last is the critical path and longer than
// half the work (two builders must start it at once); the two-task chain is as long as
// all the hop chains together, with fewer hops than any of them.
func TestAdversarialShapes(t *testing.T) {
	g, err := Generate(Config{N: 200, Shape: ShapeChainLast, SleepMS: 100})
	if err != nil {
		t.Fatal(err)
	}
	if cp, length := g.CriticalPath(); cp != 5000 || length != 50 || g.TotalWorkMS() != 150*25+5000 {
		t.Errorf("chain-last: critical path %d ms over %d, work %d ms; want 5000 over 50, 8750", cp, length, g.TotalWorkMS())
	}
	if len(g.Deps[199]) != 1 || g.Deps[199][0] != 198 || len(g.Deps[0]) != 0 {
		t.Errorf("chain-last: the chain is not last: %v %v", g.Deps[0], g.Deps[199])
	}
	g, err = Generate(Config{N: 202, Shape: ShapeHops, SleepMS: 80})
	if err != nil {
		t.Fatal(err)
	}
	if cp, length := g.CriticalPath(); cp != 25*8*10 || length != 2 || g.TotalWorkMS() != 2*25*8*10 {
		t.Errorf("hops: critical path %d ms over %d, work %d ms; want 2000 over 2, 4000", cp, length, g.TotalWorkMS())
	}
	if _, err := Generate(Config{N: 200, Shape: "spiral"}); err == nil {
		t.Error("unknown shape accepted")
	}
}

// With Junctions, the same elements are split across nested local junctions: each
// project holds its share and the junction to the next, names go through the
// junctions, and gantry loads every element from all.toml; an element of the deepest
// project (which names its dependencies as the flat project does) keys as flat.
func TestJunctionsSplit(t *testing.T) {
	cfg := Config{N: 300, FanIn: 3, Seed: 5}
	flat := mustGenerate(t, cfg)
	cfg.Junctions = 2
	split := mustGenerate(t, cfg)
	if lv := []int{split.Level(0), split.Level(149), split.Level(150), split.Level(299)}; !slices.Equal(lv, []int{2, 2, 1, 1}) {
		t.Errorf("levels of e000, e149, e150, e299 = %v, want [2 2 1 1]", lv)
	}
	if got := split.NameFrom(0, 5); got != "j1.toml:j2.toml:e005.toml" {
		t.Errorf("NameFrom(0, 5) = %q", got)
	}
	if got := split.NameFrom(1, 5); got != "j2.toml:e005.toml" {
		t.Errorf("NameFrom(1, 5) = %q", got)
	}
	files := split.Files()
	for _, name := range []string{"elements/j1.toml", "p1/project.toml", "p1/elements/e299.toml", "p1/elements/j2.toml",
		"p1/p2/project.toml", "p1/p2/elements/e000.toml"} {
		if _, ok := files[name]; !ok {
			t.Errorf("no %s", name)
		}
	}

	load := func(g *Graph) *element.Graph {
		t.Helper()
		dir := t.TempDir()
		if err := g.Write(dir, false); err != nil {
			t.Fatal(err)
		}
		p, err := element.LoadProjectFor(dir, element.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eg, err := element.LoadCached(p, &element.Lock{}, []string{AllElement}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return eg
	}
	fg, sg := load(flat), load(split)
	if len(sg.Elements) != len(fg.Elements) {
		t.Fatalf("%d elements split, %d flat", len(sg.Elements), len(fg.Elements))
	}
	for i := range 150 {
		name := split.NameFrom(0, i)
		if e := sg.Elements[name]; e == nil || e.Key != fg.Elements[flat.ElementName(i)].Key {
			t.Fatalf("%s: not loaded, or keyed unlike the flat %s", name, flat.ElementName(i))
		}
	}
}
