// Command gen writes a synthetic build graph as a gantry project, a
// build.ninja and a Makefile, plus graph.json with its statistics.
//
// Usage:
//
//	go run ./bench/gen -out DIR [-n 2000] [-fanin 3] [-seed 1] [-sleep-ms 0] [-shape random] [-junctions 0] [-force]
//
// See bench/README.md.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gantry-build/gantry/bench/synth"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gen -out DIR [flags]\n\n"+
			"Writes a synthetic DAG into DIR as a gantry project (project.toml, elements/),\n"+
			"build.ninja, Makefile and graph.json.\n\nflags:\n")
		fs.PrintDefaults()
	}
	config := synth.Flags(fs)
	out := fs.String("out", "", "output directory (required)")
	force := fs.Bool("force", false, "write into a non-empty output directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "gen: unexpected arguments: %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gen: -out is required")
		fs.Usage()
		return 2
	}
	g, err := synth.Generate(config())
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		return 2
	}
	if err := g.Write(*out, *force); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		return 1
	}
	fmt.Printf("%s: %s\n", *out, g.Summary())
	return 0
}
