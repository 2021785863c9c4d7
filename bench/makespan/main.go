// Command makespan runs gantry's scheduling policy on a synthetic graph in simulated
// time: the real scheduler loop and plan (queues.Plan, queues.Simulate), jobs that
// last exactly the generated durations plus a chosen per-job overhead. It prints the
// graph's lower bound and the simulated makespan of a first run (no learned
// durations), a second run (learned durations equal to the real ones) and, with
// -cache, a run with the durations a real session learned. A real build far from
// its simulation is slow by overhead; a simulation far from the bound is slow by
// order.
//
// Usage:
//
//	go run ./bench/makespan [-n 2000] [-fanin 3] [-seed 1] [-sleep-ms 0] [-shape random]
//	    [-builders 2] [-overhead-ms 0] [-cache DIR]
//
// See bench/README.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gantry-build/gantry/bench/synth"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("makespan", flag.ContinueOnError)
	config := synth.Flags(fs)
	builders := fs.Int("builders", 2, "builders (gantry build --builders)")
	overhead := fs.Float64("overhead-ms", 0, "simulated cost of every job on top of its duration, in ms")
	cacheDir := fs.String("cache", "", "a gantry cache whose learned durations (stats) to simulate a run with")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "makespan: unexpected arguments: %q\n", fs.Args())
		return 2
	}
	if err := simulate(config(), *builders, time.Duration(*overhead*float64(time.Millisecond)), *cacheDir); err != nil {
		fmt.Fprintln(os.Stderr, "makespan:", err)
		return 1
	}
	return 0
}

func simulate(cfg synth.Config, builders int, overhead time.Duration, cacheDir string) error {
	g, err := synth.Generate(cfg)
	if err != nil {
		return err
	}
	// The project is loaded as gantry loads it: write it out first.
	dir, err := os.MkdirTemp("", "makespan-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := g.Write(dir, false); err != nil {
		return fmt.Errorf("writing the generated project: %w", err)
	}
	graph, err := load(dir)
	if err != nil {
		return err
	}
	durations := map[string]time.Duration{}
	for i := range g.N {
		durations[g.ElementName(i)] = time.Duration(g.DurMS[i]) * time.Millisecond
	}
	lower := g.LowerBoundMS(builders)
	fmt.Printf("%s builders=%d overhead_ms=%g lower_bound_ms=%.0f\n", g.Summary(), builders, float64(overhead)/1e6, lower)

	runs := []struct {
		name     string
		estimate func(*element.Element) (time.Duration, bool)
	}{
		{"first", nil},
		{"second", func(e *element.Element) (time.Duration, bool) {
			d, ok := durations[e.Name]
			return d, ok
		}},
	}
	if cacheDir != "" {
		learned, err := learnedDurations(cacheDir)
		if err != nil {
			return err
		}
		runs = append(runs, struct {
			name     string
			estimate func(*element.Element) (time.Duration, bool)
		}{"learned", func(e *element.Element) (time.Duration, bool) {
			d, ok := learned[synth.ProjectName+"/"+e.Name]
			return d, ok
		}})
	}
	// As `gantry build` plans its default targets (--deps run).
	selected := graph.Select(graph.Targets, element.DepsRun)
	for _, r := range runs {
		items, err := queues.Plan(graph, selected, queues.PlanOptions{
			Artifact: func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing },
			Estimate: r.estimate,
		})
		if err != nil {
			return fmt.Errorf("planning: %w", err)
		}
		span, err := queues.Simulate(items, queues.Simulation{Builders: builders, Overhead: overhead,
			Duration: func(it *queues.Item) time.Duration { return durations[it.Name()] }})
		if err != nil {
			return err
		}
		ms := float64(span) / float64(time.Millisecond)
		fmt.Printf("%-7s makespan_ms=%.0f ratio=%s\n", r.name, ms, strconv.FormatFloat(ms/lower, 'f', 3, 64))
	}
	return nil
}

// load loads the project in dir with its default targets.
func load(dir string) (*element.Graph, error) {
	p, err := element.LoadProject(dir)
	if err != nil {
		return nil, err
	}
	lock, err := element.LoadLock(dir)
	if err != nil {
		return nil, err
	}
	return element.Load(p, lock, p.DefaultTargets)
}

// learnedDurations reads the durations a gantry cache learned.
func learnedDurations(dir string) (map[string]time.Duration, error) {
	c, err := cache.Attach(dir)
	if err != nil {
		return nil, err
	}
	s, err := c.LoadStats()
	if err != nil {
		return nil, err
	}
	if len(s.Durations) == 0 {
		return nil, fmt.Errorf("cache %s has learned no build durations (run a build with it first)", dir)
	}
	return s.Durations, nil
}
