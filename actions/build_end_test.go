package actions

import (
	"errors"
	"testing"

	"github.com/gantry-build/gantry/cache"
)

// dropFailure removes a failed artifact a terminated build left, and nothing else.
func TestDropFailure(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	empty, err := c.EmptyTree()
	if err != nil {
		t.Fatal(err)
	}
	const failed, built = "aaaa1111", "bbbb2222"
	for _, a := range []*cache.Artifact{
		{Project: "p", Element: "x.toml", Key: failed, Files: empty, Error: "exit status 143"},
		{Project: "p", Element: "x.toml", Key: built, Files: empty, Success: true},
	} {
		if err := c.Commit(a); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{failed, built, "cccc3333"} {
		if err := dropFailure(c, "p", "x.toml", key); err != nil {
			t.Errorf("dropFailure %s: %v", key, err)
		}
	}
	if _, err := c.Lookup("p", "x.toml", failed); !errors.Is(err, cache.ErrNotFound) {
		t.Errorf("the failed artifact is still there (%v)", err)
	}
	if a, err := c.Lookup("p", "x.toml", built); err != nil || !a.Success {
		t.Errorf("the successful artifact was dropped: %v", err)
	}
}
