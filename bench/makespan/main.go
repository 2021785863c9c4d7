// Command makespan runs gantry's scheduling policy on a synthetic graph in simulated
// time: the real scheduler loop, plan and build queue (queues.Plan, sim.Run,
// sim.Queues), jobs that last exactly the generated durations plus a
// chosen per-job overhead. It prints the graph's lower bound and the simulated
// makespan of a first run (no learned durations), a second run (learned durations
// equal to the real ones) and, with -cache, a run with the durations a real session
// learned. A real build far from its simulation is slow by overhead; a simulation
// far from the bound is slow by order.
//
// Usage:
//
//	go run ./bench/makespan [-n 2000] [-fanin 3] [-seed 1] [-sleep-ms 0] [-shape random]
//	    [-builders 2] [-overhead-ms 0] [-cache DIR] [-fit MS] [-floor K]
//
// See bench/README.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gantry-build/gantry/bench/sim"
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
	floor := fs.Int("floor", 0, "run the graph's first K commands as processes, back to back on the builders, and print what each cost beyond its sleep and the second run simulated with that overhead")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "makespan: unexpected arguments: %q\n", fs.Args())
		return 2
	}
	if err := simulate(config(), *builders, ms(*overhead), *cacheDir, ms(*fit), *floor); err != nil {
		fmt.Fprintln(os.Stderr, "makespan:", err)
		return 1
	}
	return 0
}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func simulate(cfg synth.Config, builders int, overhead time.Duration, cacheDir string, fit time.Duration, floor int) error {
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
			return sim.Run(items, sim.Options{Queues: sim.Queues(false), Builders: builders, Overhead: overhead,
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
		if r.name == "second" && floor > 0 {
			c, err := spawnCost(g, builders, floor)
			if err != nil {
				return err
			}
			d, err := span(c)
			if err != nil {
				return err
			}
			fmt.Printf("floor   makespan_ms=%.0f ratio=%.3f spawn_ms=%.2f\n", d.Seconds()*1000, d.Seconds()*1000/lower, c.Seconds()*1000)
		}
	}
	return nil
}

// spawnCost runs the first k of g's commands (`sleep D`, a no-op's `:` as `true`) as
// processes in their own process groups, back to back on builders goroutines, in
// element order and without dependencies, and returns the mean time each took beyond
// its sleep. That is the floor of a build's per-job cost on this machine: what starting
// the command, its exec and the wake-up at its end cost a tool that does nothing else
// (no staging, no caching, no log), measured with the sleeps the graph has, since a CPU
// that idled through a sleep wakes up more slowly than a busy one.
func spawnCost(g *synth.Graph, builders, k int) (time.Duration, error) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return 0, fmt.Errorf("measuring the spawn cost: %w", err)
	}
	noop, err := exec.LookPath("true")
	if err != nil {
		return 0, fmt.Errorf("measuring the spawn cost: %w", err)
	}
	k = min(k, g.N)
	next := make(chan int)
	go func() {
		for i := range k {
			next <- i
		}
		close(next)
	}()
	var total atomic.Int64
	var grp errgroup.Group
	for range builders {
		grp.Go(func() error {
			for i := range next {
				d := time.Duration(g.DurMS[i]) * time.Millisecond
				cmd := exec.Command(noop)
				if d > 0 {
					cmd = exec.Command(sleep, strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
				}
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				t0 := time.Now()
				if err := cmd.Run(); err != nil {
					return fmt.Errorf("measuring the spawn cost: %s: %w", cmd, err)
				}
				total.Add(int64(time.Since(t0) - d))
			}
			return nil
		})
	}
	if err := grp.Wait(); err != nil {
		for range next { // let the feeder end
		}
		return 0, err
	}
	return time.Duration(total.Load() / int64(k)), nil
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
	p, err := element.LoadProjectFor(dir, element.LoadOptions{})
	if err != nil {
		return nil, err
	}
	lock, err := element.LoadLock(dir)
	if err != nil {
		return nil, err
	}
	return element.LoadCached(p, lock, p.DefaultTargets, nil)
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
