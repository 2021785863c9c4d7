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
//	    [-builders 2] [-overhead-ms 0] [-cache DIR] [-fit MS]
//
// See bench/README.md.
package main

import (
	"flag"
	"fmt"
	"os"
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
	fit := fs.Float64("fit", 0, "a measured makespan in ms: also print the per-job overhead that makes each simulated run last as long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "makespan: unexpected arguments: %q\n", fs.Args())
		return 2
	}
	if err := simulate(config(), *builders, ms(*overhead), *cacheDir, ms(*fit)); err != nil {
		fmt.Fprintln(os.Stderr, "makespan:", err)
		return 1
	}
	return 0
}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func simulate(cfg synth.Config, builders int, overhead time.Duration, cacheDir string, fit time.Duration) error {
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

	type run struct {
		name     string
		estimate func(*element.Element) (time.Duration, bool) // nil: nothing learned
	}
	runs := []run{
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
		runs = append(runs, run{"learned", func(e *element.Element) (time.Duration, bool) {
			d, ok := learned[synth.ProjectName+"/"+e.Name]
			return d, ok
		}})
	}
	// As `gantry build` plans its default targets (--deps run).
	selected := graph.Select(graph.Targets, element.DepsRun)
	for _, r := range runs {
		span := func(overhead time.Duration) (time.Duration, error) {
			items, err := queues.Plan(graph, selected, queues.PlanOptions{
				Artifact: func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing },
				Estimate: r.estimate,
			})
			if err != nil {
				return 0, fmt.Errorf("planning: %w", err)
			}
			return queues.Simulate(items, queues.Simulation{Builders: builders, Overhead: overhead,
				Duration: func(it *queues.Item) time.Duration { return durations[it.Name()] }})
		}
		d, err := span(overhead)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%-7s makespan_ms=%.0f ratio=%.3f", r.name, d.Seconds()*1000, d.Seconds()*1000/lower)
		if fit > 0 {
			c, err := fitOverhead(span, fit)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" overhead_fit_ms=%.1f", c.Seconds()*1000)
		}
		fmt.Println(line)
	}
	return nil
}

// fitOverhead finds the per-job overhead (to 0.1 ms) with which span gives the
// makespan target: what each job would have to cost for the policy's order to take
// as long as a measured run did. The makespan grows with the overhead.
func fitOverhead(span func(time.Duration) (time.Duration, error), target time.Duration) (time.Duration, error) {
	lo, hi := time.Duration(0), target
	for hi-lo > 100*time.Microsecond {
		mid := (lo + hi) / 2
		d, err := span(mid)
		if err != nil {
			return 0, err
		}
		if d < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
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
