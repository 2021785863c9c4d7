package layout

import (
	"strings"
	"testing"
)

// layers is gantry's packages from the top down, the order of the README's package
// map: a package imports only packages of its own layer and the layers below. Every package of the module but
// the benchmarks, the testscripts and this one must be in a layer, so a new package
// is placed on purpose.
var layers = [][]string{
	{"cmd/..."},
	{"ui"},
	{"actions"},
	{"cache/serve"},
	{"queues", "queues/queuestest"},
	{"element"},
	{"remote/exec", "remote/exec/worker"},
	{"cache/remote"},
	{"source"},
	{"cache", "cache/internal/..."},
	{"sandbox"},
	{"job"},
	{"resources"},
	{"internal/..."},
}

// outside are the packages no layer holds: they may import any layer.
var outside = []string{"bench/...", "testscripts", "internal/layout"}

func TestLayers(t *testing.T) {
	deps := moduleDeps(t)
	layerOf := func(pkg string) int {
		for i, l := range layers {
			if matchAny(l, pkg) {
				return i
			}
		}
		return -1
	}
	for _, pkg := range keys(deps) {
		if matchAny(outside, pkg) {
			continue
		}
		i := layerOf(pkg)
		if i < 0 {
			t.Errorf("%s is in no layer: add it to layers (and to the README's package map)", pkg)
			continue
		}
		for _, d := range deps[pkg] {
			if j := layerOf(d); j < i {
				t.Errorf("%s (layer %s) reaches %s (layer %s): a package may reach only the layers below its own",
					pkg, strings.Join(layers[i], ","), d, layerName(j))
			}
		}
	}
}

// layerName names layer i (-1: none).
func layerName(i int) string {
	if i < 0 {
		return "none"
	}
	return strings.Join(layers[i], ",")
}
