package element

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-build/gantry/bench/synth"
	"github.com/gantry-build/gantry/internal/fileid"
)

var benchLoadN = flag.Int("load-n", 10000, "elements in BenchmarkLoad's synthetic graph (e.g. 100000)")

// BenchmarkLoad measures loading a synthetic project (bench/gen's graph) and computing
// every cache key: go test ./element -run X -bench Load [-load-n 100000].
func BenchmarkLoad(b *testing.B) {
	dir := benchProject(b)
	perElement := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(*benchLoadN), "µs/element")
	}
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			benchLoad(b, dir, nil)
		}
		perElement(b)
	})
	b.Run("cached", func(b *testing.B) {
		cacheDir := b.TempDir()
		pc := OpenParseCache(cacheDir, dir)
		benchLoad(b, dir, pc)
		if err := pc.Save(); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			benchLoad(b, dir, OpenParseCache(cacheDir, dir))
		}
		perElement(b)
	})
}

// BenchmarkParseCacheSave measures writing the parse cache after a cold load (every
// entry made by the load, encoded from its parse), as the first show or build of a
// checkout does: go test ./element -run X -bench ParseCacheSave [-load-n 100000].
func BenchmarkParseCacheSave(b *testing.B) {
	dir := benchProject(b)
	pc := OpenParseCache(b.TempDir(), dir)
	benchLoad(b, dir, pc)
	if n := pc.size(); n < *benchLoadN {
		b.Fatalf("the cache remembers %d files of %d", n, *benchLoadN)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := pc.Save(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchProject writes bench/gen's graph of -load-n elements, its files old enough for
// the parse cache to keep them.
func benchProject(b *testing.B) string {
	g, err := synth.Generate(synth.Config{N: *benchLoadN, FanIn: synth.DefaultFanIn, Seed: synth.DefaultSeed})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := g.Write(dir, true); err != nil {
		b.Fatal(err)
	}
	// The files must be older than fileid.RacyWindow for the parse cache to keep them.
	old := time.Now().Add(-time.Minute)
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil {
			os.Chtimes(path, old, old)
		}
		return err
	})
	time.Sleep(fileid.RacyWindow) // the files' change times, which Chtimes set to now, age too
	return dir
}

// benchLoad loads the project at dir through pc (nil: none), every key computed.
func benchLoad(b *testing.B, dir string, pc *ParseCache) {
	p, err := loadProject(dir)
	if err != nil {
		b.Fatal(err)
	}
	lock, err := LoadLock(dir)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := LoadCached(p, lock, p.DefaultTargets, pc); err != nil {
		b.Fatal(err)
	}
}
