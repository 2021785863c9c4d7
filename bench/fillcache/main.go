// Command fillcache commits a successful artifact for every element of a project into a
// gantry cache, as a build of no-op elements would (an empty files tree, a short log,
// the dependency keys and key inputs in the record), without running any build: it
// makes the cache for measuring a null build of graphs too large to build first
// (bench/null.sh).
//
//	fillcache -C PROJECT -cache DIR [-workers 8] [ELEMENT...]
package main

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
)

func main() {
	dir := flag.String("C", ".", "project directory")
	cacheDir := flag.String("cache", "", "cache directory to fill (required)")
	workers := flag.Int("workers", 8, "artifacts committed at once")
	flag.Parse()
	if *cacheDir == "" {
		fmt.Fprintln(os.Stderr, "fillcache: -cache DIR is required")
		os.Exit(2)
	}
	if err := run(*dir, *cacheDir, *workers, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "fillcache:", err)
		os.Exit(1)
	}
}

func run(dir, cacheDir string, workers int, targets []string) error {
	p, err := element.LoadProjectFor(dir, element.LoadOptions{})
	if err != nil {
		return err
	}
	lock, err := element.LoadLock(dir)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		targets = p.DefaultTargets
	}
	g, err := element.LoadCached(p, lock, targets, nil)
	if err != nil {
		return err
	}
	c, err := cache.Open(cacheDir)
	if err != nil {
		return err
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(g.Order) && errs[w] == nil; i = int(next.Add(1)) - 1 {
				errs[w] = commit(c, g, g.Order[i])
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	fmt.Printf("%d artifacts committed to %s in %.1f s\n", len(g.Order), cacheDir, time.Since(start).Seconds())
	return nil
}

func commit(c *cache.Cache, g *element.Graph, e *element.Element) error {
	if e.Key == "" {
		return fmt.Errorf("%s has no cache key (a source without a ref?)", e.Name)
	}
	logDigest, err := c.PutBlob([]byte("fillcache: no-op build of " + e.Name + "\n"))
	if err != nil {
		return err
	}
	deps := map[string]string{}
	for _, d := range append(append([]*element.Element{}, e.BuildDeps...), e.RunDeps...) {
		deps[d.Name] = d.Key
	}
	now := time.Now()
	return c.Commit(&cache.Artifact{Project: g.Project.Name, Element: e.Name, Key: e.Key, Success: true,
		Log: logDigest, Dependencies: deps, Inputs: element.MarshalInputs(g.Inputs(e)), Started: now, Finished: now})
}
