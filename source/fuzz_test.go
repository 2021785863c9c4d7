package source

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// fuzzSentinel is a fixed directory beside nothing, that archives in the seed corpus
// point absolute links at; it must stay empty whatever the input.
var fuzzSentinel = filepath.Join(os.TempDir(), "gantry-fuzz-tar-sentinel")

// FuzzExtractTar extracts arbitrary bytes (decompressed by magic, like a staged tar
// source). Every input either extracts inside the staging root or is refused: nothing
// appears beside the root (a sibling sentinel directory stays empty) or in the fixed
// sentinel that seeds link to.
//
// Run it with a short -fuzzminimizetime (`.ci/run` gives 1s): Go's fuzzer minimizes each
// input that finds new coverage for up to 60 s by default, one fuzz-function run per
// candidate (a few milliseconds each here: a staging directory made, extracted into and
// removed), and does not count those runs in its "execs" line, which then stands still
// for a minute at a time.
func FuzzExtractTar(f *testing.F) {
	for _, members := range [][]member{
		{dir("pkg/"), file("pkg/a", "A"), exe("pkg/run", "#!/bin/sh\n"), symlink("pkg/l", "a"), hardlink("pkg/h", "pkg/a")},
		{symlink("lib64", fuzzSentinel), file("lib64/evil", "x")},
		{symlink("up", "../sibling"), file("up/evil", "x"), hardlink("h", "up/evil")},
		{symlink("ld.so", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"), file("../evil", "x")},
	} {
		f.Add(makeTar(f, members...), false)
	}
	if err := os.MkdirAll(fuzzSentinel, 0o755); err != nil {
		f.Fatal(err)
	}
	base := f.TempDir()
	sibling := filepath.Join(base, "sibling")
	if err := os.MkdirAll(sibling, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, star bool) {
		stage := filepath.Join(base, "stage", "s")
		defer os.RemoveAll(filepath.Dir(stage))
		root, _, err := OpenDir(filepath.Dir(stage), "s")
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		open := func() (io.ReadCloser, error) { return decompress(context.Background(), bytes.NewReader(data)) }
		baseDir := ""
		if star {
			baseDir = "*"
		}
		_ = extractTar(context.Background(), open, root, baseDir, 1<<20)
		for _, d := range []string{sibling, fuzzSentinel} {
			if entries, _ := os.ReadDir(d); len(entries) != 0 {
				t.Fatalf("extraction wrote outside the root: %s holds %v", d, entries)
			}
		}
		if entries, _ := os.ReadDir(base); len(entries) != 2 {
			t.Fatalf("extraction wrote beside the root: %v", entries)
		}
	})
}
