package actions

import (
	"strings"
	"testing"

	"github.com/gantry-build/gantry/element"
)

// A non-strict session never builds an element it reused (its artifact could not be
// pulled, or went missing): the reused artifact's key was computed from other
// dependencies than those the build would stage.
func TestNoBuildUnderAReusedKey(t *testing.T) {
	e := &element.Element{Name: "app.toml", Key: strings.Repeat("ab", 32), Reused: true}
	_, err := newBuildSpec(nil, e, t.TempDir(), "", "host", 1)
	want := "app.toml: its artifact abababab, which this non-strict session reuses (found by its weak key), is not in the local cache and could not be pulled; run the build again, or with --strict"
	if err == nil || err.Error() != want {
		t.Fatalf("newBuildSpec = %v\nwant %s", err, want)
	}
}
