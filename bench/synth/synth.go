// Package synth generates synthetic build graphs for benchmarking gantry
// against ninja and make.
//
// A graph is a random DAG of N elements where element i depends on up to
// FanIn distinct elements chosen among 0..i-1, so every dependency index is
// strictly smaller than the dependent's index and the graph is acyclic by
// construction. An extra "all" target depends on every sink (an element that
// nothing depends on), which makes every element reachable from it.
//
// The same graph is written three ways: a gantry project (project.toml plus
// elements/*.toml), a build.ninja and a Makefile. Each element either runs a
// seeded random sleep or is a no-op; ninja and make additionally touch one
// stamp file per element under out/. Output is byte-for-byte deterministic
// for a given Config.
package synth

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Defaults for Config fields, used by the gen command.
const (
	DefaultN     = 2000
	DefaultFanIn = 3
	DefaultSeed  = 1
)

// Names of the files and directories written into the output directory.
const (
	ProjectFile  = "project.toml"
	ElementDir   = "elements"
	NinjaFile    = "build.ninja"
	MakeFile     = "Makefile"
	GraphFile    = "graph.json"
	StampDir     = "out"
	AllElement   = "all.toml"
	ProjectName  = "synth"
	stampSuffix  = ".stamp"
	elemSuffix   = ".toml"
	elemPrefix   = "e"
	streamDeps   = 0x6465707300000000 // "deps": PCG stream for the graph shape
	streamSleeps = 0x736c656570000000 // "sleep": PCG stream for durations
)

// Config selects the graph to generate.
type Config struct {
	N       int    // number of elements (excluding the "all" target)
	FanIn   int    // maximum number of dependencies per element
	Seed    uint64 // PRNG seed
	SleepMS int    // 0: every element is a no-op; else max sleep per element in ms
	// Shape is "random" (or empty) for the random DAG, or one of the adversarial
	// shapes (ShapeChainLast, ShapeHops), which ignore FanIn and Seed and use
	// SleepMS (default 100) as their time unit.
	Shape string
	// Junctions > 0 splits the gantry project across that many nested local junctions:
	// the top project holds all.toml and junction j1.toml (project p1, in p1/), which
	// holds the last N/Junctions elements and junction j2.toml (project p2, in p1/p2/),
	// and so on down, the first elements deepest. Dependency names go through the
	// junctions (j1.toml:j2.toml:e0005.toml); ninja's and make's files are unchanged.
	Junctions int
}

// The adversarial shapes: graphs where the order in which ready work starts decides
// the makespan, and declaration order or hop counts lead astray.
const (
	// ShapeChainLast: N - N/4 independent tasks of SleepMS/4 ms declared first, then
	// a chain of N/4 tasks of SleepMS ms: the chain must start at once.
	ShapeChainLast = "chain-last"
	// ShapeHops: chains of 8 short hops (SleepMS/8 ms each) declared first, then one
	// chain of 2 long tasks as long as all the short chains together: counting hops
	// starts the short chains first; durations start the long chain first.
	ShapeHops = "hops"
)

// Flags defines the flags that choose a graph (-n, -fanin, -seed, -sleep-ms, -shape)
// on fs, for every tool that generates one; the function returned gives the Config
// they set once fs is parsed.
func Flags(fs *flag.FlagSet) func() Config {
	n := fs.Int("n", DefaultN, "number of elements")
	fanin := fs.Int("fanin", DefaultFanIn, "maximum number of dependencies per element")
	seed := fs.Uint64("seed", DefaultSeed, "random seed (same flags give byte-identical output)")
	sleepMS := fs.Int("sleep-ms", 0, "maximum per-element sleep in ms (0: every element is a no-op)")
	shape := fs.String("shape", "random", "graph shape: random, "+ShapeChainLast+" or "+ShapeHops+" (see bench/README.md)")
	junctions := fs.Int("junctions", 0, "split the gantry project across this many nested local junctions (0: one project)")
	return func() Config {
		return Config{N: *n, FanIn: *fanin, Seed: *seed, SleepMS: *sleepMS, Shape: *shape, Junctions: *junctions}
	}
}

// Validate reports whether the configuration is usable.
func (c Config) Validate() error {
	switch {
	case c.N < 1:
		return fmt.Errorf("n must be >= 1, got %d", c.N)
	case c.FanIn < 0:
		return fmt.Errorf("fanin must be >= 0, got %d", c.FanIn)
	case c.SleepMS < 0:
		return fmt.Errorf("sleep-ms must be >= 0, got %d", c.SleepMS)
	case c.Junctions < 0 || c.Junctions > c.N:
		return fmt.Errorf("junctions must be between 0 and n (%d), got %d", c.N, c.Junctions)
	case c.Shape == ShapeChainLast && c.N < 4, c.Shape == ShapeHops && c.N < 10:
		return fmt.Errorf("shape %s needs more elements than %d", c.Shape, c.N)
	case c.Shape != "" && c.Shape != "random" && c.Shape != ShapeChainLast && c.Shape != ShapeHops:
		return fmt.Errorf("shape %q: use random, %s or %s", c.Shape, ShapeChainLast, ShapeHops)
	}
	return nil
}

// Graph is a generated DAG. Deps[i] lists the dependencies of element i in
// ascending order; every entry is < i. DurMS[i] is the build duration of
// element i in milliseconds (0 means the element is a no-op).
type Graph struct {
	Config
	Deps  [][]int
	DurMS []int
}

// Generate builds the random graph described by cfg. The graph shape and the
// durations use separate PCG streams, so for a given seed the shape does not
// depend on SleepMS.
func Generate(cfg Config) (*Graph, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Shape == ShapeChainLast || cfg.Shape == ShapeHops {
		return adversarial(cfg), nil
	}
	shape := rand.New(rand.NewPCG(cfg.Seed, streamDeps))
	sleeps := rand.New(rand.NewPCG(cfg.Seed, streamSleeps))
	g := &Graph{
		Config: cfg,
		Deps:   make([][]int, cfg.N),
		DurMS:  make([]int, cfg.N),
	}
	for i := range cfg.N {
		k := 0
		if maxK := min(cfg.FanIn, i); maxK > 0 {
			k = shape.IntN(maxK + 1)
		}
		g.Deps[i] = pickDistinct(shape, i, k)
		if cfg.SleepMS > 0 {
			g.DurMS[i] = sleeps.IntN(cfg.SleepMS + 1)
		}
	}
	return g, nil
}

// adversarial generates the shapes that are not random.
func adversarial(cfg Config) *Graph {
	unit := cfg.SleepMS
	if unit == 0 {
		unit = 100
	}
	g := &Graph{Config: cfg, Deps: make([][]int, cfg.N), DurMS: make([]int, cfg.N)}
	for i := range g.Deps {
		g.Deps[i] = []int{}
	}
	chain := func(from, to, ms int) { // elements from..to-1 in a chain of ms each
		for i := from; i < to; i++ {
			if i > from {
				g.Deps[i] = []int{i - 1}
			}
			g.DurMS[i] = ms
		}
	}
	switch cfg.Shape {
	case ShapeChainLast:
		long := cfg.N / 4
		for i := range cfg.N - long {
			g.DurMS[i] = max(1, unit/4)
		}
		chain(cfg.N-long, cfg.N, unit)
	case ShapeHops:
		chains := (cfg.N - 2) / 8
		hop := max(1, unit/8)
		for c := range chains {
			chain(8*c, 8*c+8, hop)
		}
		// Elements between the short chains and the long one are no-ops.
		chain(cfg.N-2, cfg.N, chains*8*hop/2)
	}
	return g
}

// pickDistinct returns k distinct integers from [0, n) in ascending order.
func pickDistinct(r *rand.Rand, n, k int) []int {
	out := make([]int, 0, k)
	if k == 0 {
		return out
	}
	if 2*k > n {
		// Dense: partial Fisher-Yates over the whole range.
		p := make([]int, n)
		for i := range p {
			p[i] = i
		}
		for i := range k {
			j := i + r.IntN(n-i)
			p[i], p[j] = p[j], p[i]
		}
		out = append(out, p[:k]...)
	} else {
		// Sparse: rejection sampling; k is small (the fan-in).
		for len(out) < k {
			v := r.IntN(n)
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Edges returns the number of dependency edges between elements (the edges
// of the "all" target are not counted).
func (g *Graph) Edges() int {
	n := 0
	for _, d := range g.Deps {
		n += len(d)
	}
	return n
}

// Sinks returns, in ascending order, the elements that no other element
// depends on. The "all" target depends on exactly these.
func (g *Graph) Sinks() []int {
	used := make([]bool, g.N)
	for _, deps := range g.Deps {
		for _, d := range deps {
			used[d] = true
		}
	}
	var sinks []int
	for i, u := range used {
		if !u {
			sinks = append(sinks, i)
		}
	}
	return sinks
}

// TotalWorkMS is the sum of all element durations.
func (g *Graph) TotalWorkMS() int {
	t := 0
	for _, d := range g.DurMS {
		t += d
	}
	return t
}

// CriticalPath returns the longest dependency chain by total duration, as
// (duration in ms, number of elements on it). Among chains of equal
// duration the one with the most elements wins, so for a no-op graph the
// length is the depth of the DAG.
func (g *Graph) CriticalPath() (ms, length int) {
	// Elements are in topological order (deps have smaller indices).
	bestMS := make([]int, g.N)
	bestLen := make([]int, g.N)
	for i, deps := range g.Deps {
		m, l := 0, 0
		for _, d := range deps {
			if bestMS[d] > m || (bestMS[d] == m && bestLen[d] > l) {
				m, l = bestMS[d], bestLen[d]
			}
		}
		bestMS[i], bestLen[i] = m+g.DurMS[i], l+1
		if bestMS[i] > ms || (bestMS[i] == ms && bestLen[i] > length) {
			ms, length = bestMS[i], bestLen[i]
		}
	}
	return ms, length
}

// LowerBoundMS is a lower bound on the makespan of any schedule on builders
// builders: the longer of the critical path and the total work shared evenly.
func (g *Graph) LowerBoundMS(builders int) float64 {
	cp, _ := g.CriticalPath()
	return max(float64(cp), float64(g.TotalWorkMS())/float64(max(1, builders)))
}

// width is the number of digits used to zero-pad element numbers.
func (g *Graph) width() int { return len(strconv.Itoa(g.N)) }

// Base returns the base name of element i, e.g. "e0042".
func (g *Graph) Base(i int) string {
	return fmt.Sprintf("%s%0*d", elemPrefix, g.width(), i)
}

// ElementName returns the gantry element name of element i, e.g. "e0042.toml".
func (g *Graph) ElementName(i int) string { return g.Base(i) + elemSuffix }

// Stamp returns the ninja/make stamp path of element i, e.g. "out/e0042.stamp".
func (g *Graph) Stamp(i int) string { return StampDir + "/" + g.Base(i) + stampSuffix }

// Command returns the shell command of element i, without the stamp touch:
// "sleep S.mmm", or ":" for a no-op.
func (g *Graph) Command(i int) string {
	ms := g.DurMS[i]
	if ms == 0 {
		return ":"
	}
	return fmt.Sprintf("sleep %d.%03d", ms/1000, ms%1000)
}

// Summary is the content of graph.json.
type Summary struct {
	N               int    `json:"n"`
	Edges           int    `json:"edges"`
	Sinks           int    `json:"sinks"`
	Seed            uint64 `json:"seed"`
	FanIn           int    `json:"fanin"`
	SleepMS         int    `json:"sleep_ms"`
	TotalWorkMS     int    `json:"total_work_ms"`
	CriticalPathMS  int    `json:"critical_path_ms"`
	CriticalPathLen int    `json:"critical_path_len"`
}

// Summary computes the graph statistics written to graph.json.
func (g *Graph) Summary() Summary {
	cpMS, cpLen := g.CriticalPath()
	return Summary{
		N:               g.N,
		Edges:           g.Edges(),
		Sinks:           len(g.Sinks()),
		Seed:            g.Seed,
		FanIn:           g.FanIn,
		SleepMS:         g.SleepMS,
		TotalWorkMS:     g.TotalWorkMS(),
		CriticalPathMS:  cpMS,
		CriticalPathLen: cpLen,
	}
}

// String renders the one-line summary printed by the gen command.
func (s Summary) String() string {
	return fmt.Sprintf("n=%d edges=%d sinks=%d seed=%d fanin=%d sleep_ms=%d total_work_ms=%d critical_path_ms=%d critical_path_len=%d",
		s.N, s.Edges, s.Sinks, s.Seed, s.FanIn, s.SleepMS, s.TotalWorkMS, s.CriticalPathMS, s.CriticalPathLen)
}

// quoteList renders names as a TOML array of basic strings: inline when
// short, one entry per line otherwise (the "all" target lists every sink).
// Names are generated and never need escaping.
func quoteList(names []string) string {
	var b strings.Builder
	b.WriteByte('[')
	multiline := len(names) > 4
	for j, n := range names {
		switch {
		case multiline:
			b.WriteString("\n  ")
		case j > 0:
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(n))
		if multiline {
			b.WriteByte(',')
		}
	}
	if multiline {
		b.WriteByte('\n')
	}
	b.WriteByte(']')
	return b.String()
}

func (g *Graph) names(idx []int, f func(int) string) []string {
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = f(i)
	}
	return out
}

// ProjectTOML returns the content of project.toml.
func (g *Graph) ProjectTOML() []byte {
	return fmt.Appendf(nil, "name = %q\nelement-path = %q\ndefault-targets = %s\n",
		ProjectName, ElementDir, quoteList([]string{AllElement}))
}

// ElementTOML returns the content of the element file of element i.
func (g *Graph) ElementTOML(i int) []byte {
	var cmds []string
	if g.DurMS[i] > 0 {
		cmds = []string{g.Command(i)}
	}
	from := g.Level(i)
	return fmt.Appendf(nil, "kind = \"manual\"\ndepends = %s\n\n[config]\nbuild-commands = %s\n",
		quoteList(g.names(g.Deps[i], func(d int) string { return g.NameFrom(from, d) })), quoteList(cmds))
}

// AllTOML returns the content of the "all" stack element.
func (g *Graph) AllTOML() []byte {
	return fmt.Appendf(nil, "kind = \"stack\"\ndepends = %s\n",
		quoteList(g.names(g.Sinks(), func(d int) string { return g.NameFrom(0, d) })))
}

// Level is the project element i is in: 0, the top project, when the project is not
// split (Junctions 0); else 1 to Junctions, project p1 holding the last elements.
func (g *Graph) Level(i int) int {
	for m := 1; m <= g.Junctions; m++ {
		if i >= g.N*(g.Junctions-m)/g.Junctions {
			return m
		}
	}
	return 0
}

// NameFrom is how an element of project level from names element i (of the same
// level or a deeper one): through the junctions between them, "j2.toml:e0005.toml".
func (g *Graph) NameFrom(from, i int) string {
	var b strings.Builder
	for m := from + 1; m <= g.Level(i); m++ {
		fmt.Fprintf(&b, "j%d.toml:", m)
	}
	return b.String() + g.ElementName(i)
}

// projectDir is the directory of project level m, relative to the output directory
// ("" for the top project, "p1/p2/" for level 2).
func projectDir(m int) string {
	var b strings.Builder
	for k := 1; k <= m; k++ {
		fmt.Fprintf(&b, "p%d/", k)
	}
	return b.String()
}

// junctionTOML is junction j{m}.toml: a local source holding project level m.
func junctionTOML(m int) []byte {
	return fmt.Appendf(nil, "kind = \"junction\"\n\n[[sources]]\nkind = \"local\"\npath = \"p%d\"\n", m)
}

// Ninja returns the content of build.ninja: one build edge per element that
// runs the element's command and touches its stamp, plus an "all" alias as
// the default target.
func (g *Graph) Ninja() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated by gantry bench/gen: %s\n", g.Summary())
	b.WriteString("ninja_required_version = 1.3\n\n")
	b.WriteString("rule run\n  command = $cmd && touch $out\n  description = $out\n\n")
	for i := range g.N {
		fmt.Fprintf(&b, "build %s: run", g.Stamp(i))
		for _, d := range g.Deps[i] {
			b.WriteByte(' ')
			b.WriteString(g.Stamp(d))
		}
		fmt.Fprintf(&b, "\n  cmd = %s\n", g.Command(i))
	}
	b.WriteString("\nbuild all: phony")
	for _, s := range g.Sinks() {
		b.WriteByte(' ')
		b.WriteString(g.Stamp(s))
	}
	b.WriteString("\ndefault all\n")
	return b.Bytes()
}

// Makefile returns the content of the Makefile, equivalent to Ninja.
func (g *Graph) Makefile() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated by gantry bench/gen: %s\n", g.Summary())
	b.WriteString("MAKEFLAGS += --no-builtin-rules --no-builtin-variables\n")
	b.WriteString(".SUFFIXES:\n.DELETE_ON_ERROR:\n.PHONY: all\n\n")
	b.WriteString("all:")
	for _, s := range g.Sinks() {
		b.WriteByte(' ')
		b.WriteString(g.Stamp(s))
	}
	fmt.Fprintf(&b, "\n\n%s:\n\tmkdir -p %s\n", StampDir, StampDir)
	for i := range g.N {
		fmt.Fprintf(&b, "\n%s:", g.Stamp(i))
		for _, d := range g.Deps[i] {
			b.WriteByte(' ')
			b.WriteString(g.Stamp(d))
		}
		fmt.Fprintf(&b, " | %s\n\t%s && touch $@\n", StampDir, g.Command(i))
	}
	return b.Bytes()
}

// GraphJSON returns the content of graph.json.
func (g *Graph) GraphJSON() []byte {
	data, err := json.MarshalIndent(g.Summary(), "", "  ")
	if err != nil {
		panic(err) // cannot happen: Summary has only ints
	}
	return append(data, '\n')
}

// Files returns every generated file keyed by slash-separated path relative
// to the output directory.
func (g *Graph) Files() map[string][]byte {
	files := make(map[string][]byte, g.N+5)
	files[ProjectFile] = g.ProjectTOML()
	files[ElementDir+"/"+AllElement] = g.AllTOML()
	for i := range g.N {
		files[projectDir(g.Level(i))+ElementDir+"/"+g.ElementName(i)] = g.ElementTOML(i)
	}
	for m := 1; m <= g.Junctions; m++ {
		files[projectDir(m-1)+ElementDir+fmt.Sprintf("/j%d.toml", m)] = junctionTOML(m)
		files[projectDir(m)+ProjectFile] = fmt.Appendf(nil, "name = \"p%d\"\nelement-path = %q\n", m, ElementDir)
	}
	files[NinjaFile] = g.Ninja()
	files[MakeFile] = g.Makefile()
	files[GraphFile] = g.GraphJSON()
	return files
}

// ErrNotEmpty is returned by Write when the output directory is not empty
// and force is false.
var ErrNotEmpty = errors.New("output directory is not empty (use -force to overwrite)")

// Write writes all generated files into dir, creating it if needed. Unless
// force is set, dir must be empty or absent. With force, the generated
// elements/, out/ and p1/ (the junctions' projects) directories and ninja's
// state files are removed first so no stale elements or stamps survive from an
// earlier, larger graph; other files in dir are left alone (generated ones are
// overwritten).
func (g *Graph) Write(dir string, force bool) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0 && !force:
		return fmt.Errorf("%s: %w", dir, ErrNotEmpty)
	case len(entries) > 0:
		for _, p := range []string{ElementDir, StampDir, ".ninja_log", ".ninja_deps", "p1"} {
			if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
				return err
			}
		}
	}
	for name, data := range g.Files() {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
