package cache

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStoreImportsNoClientOrServer: the store is a leaf of the cache packages;
// its clients (cache/remote) and its server (cache/serve) import it, never the
// other way round, and the server is reached by nothing but the command.
func TestStoreImportsNoClientOrServer(t *testing.T) {
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Skipf("go list: %v", err)
		}
		return strings.Fields(string(out))
	}
	const mod = "github.com/gantry-build/gantry/"
	for _, tc := range []struct{ pkg, never string }{
		{"cache", "cache/remote"},
		{"cache", "cache/serve"},
		{"cache/remote", "cache/serve"},
		{"source", "cache"},
	} {
		for _, d := range deps(mod + tc.pkg) {
			if d == mod+tc.never {
				t.Errorf("%s imports %s", tc.pkg, tc.never)
			}
		}
	}
}
