package element

import (
	"flag"
	"testing"

	"github.com/gantry-build/gantry/bench/synth"
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
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p, err := LoadProject(dir)
		if err != nil {
			b.Fatal(err)
		}
		lock, err := LoadLock(dir)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Load(p, lock, p.DefaultTargets); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(*benchLoadN), "µs/element")
}
