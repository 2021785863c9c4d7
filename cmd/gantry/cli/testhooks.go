//go:build gantrytesthooks

package cli

import (
	"fmt"
	"io"
	"os"
)

// The seams of a binary built for the end-to-end tests (go build -tags
// gantrytesthooks, see gantryBinary); the gantry binary has none (testhooks_off.go).

// gcAfterRemove, with GANTRY_TEST_GC_PAUSE set, stops `cache gc` after the first
// artifact it removes, until stdin closes, so that a test can kill gc in the middle
// of a cleanup.
func gcAfterRemove(g *globalOptions) func() {
	if os.Getenv("GANTRY_TEST_GC_PAUSE") == "" {
		return nil
	}
	paused := false
	return func() {
		if !paused {
			paused = true
			fmt.Fprintln(g.ios.ErrOut, "gantry: paused for a test (GANTRY_TEST_GC_PAUSE)")
			_, _ = io.Copy(io.Discard, g.ios.In) // until stdin closes, or gc is killed
		}
	}
}
