package actions

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The packages below actions never reach it, and element, the project model, never
// reaches the job processes or the sandbox: the build's child side lives here.
func TestImportDirection(t *testing.T) {
	const mod = "github.com/gantry-build/gantry/"
	for _, tc := range []struct {
		pkg    string
		denied []string
	}{
		{"element", []string{"actions", "job", "sandbox"}},
		{"queues", []string{"actions"}},
		{"source", []string{"actions"}},
		{"cache", []string{"actions"}},
		{"sandbox", []string{"actions"}},
		{"job", []string{"actions"}},
	} {
		out, err := exec.Command("go", "list", "-deps", mod+tc.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, d := range tc.denied {
			if slices.Contains(deps, mod+d) {
				t.Errorf("%s imports %s", tc.pkg, d)
			}
		}
	}
}
