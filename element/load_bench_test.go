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
	load := func(b *testing.B, pc *ParseCache) {
		p, err := LoadProject(dir)
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
	perElement := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(*benchLoadN), "µs/element")
	}
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			load(b, nil)
		}
		perElement(b)
	})
	b.Run("cached", func(b *testing.B) {
		cacheDir := b.TempDir()
		pc := OpenParseCache(cacheDir, dir)
		load(b, pc)
		if err := pc.Save(); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			load(b, OpenParseCache(cacheDir, dir))
		}
		perElement(b)
	})
}
