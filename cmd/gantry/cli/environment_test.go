package cli

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every GANTRY_* variable the code names (a string literal in a non-test file of the
// module; test helpers and test-hook builds aside) is listed in `gantry help
// environment` and in the README.
func TestHelpEnvironmentListsEveryVariable(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	literal := regexp.MustCompile(`"\$?\{?(GANTRY_[A-Z0-9_]+)`)
	found := map[string]string{} // variable → a file naming it
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || slices.Contains([]string{"bench", "testscripts", "internal/testreapi", "internal/proctest", "internal/testhttp", "internal/testpki", "internal/testtree"}, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(data), "//go:build gantrytesthooks") {
			return nil // a knob of the tests' own binary
		}
		for _, m := range literal.FindAllStringSubmatch(string(data), -1) {
			found[m[1]] = rel
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"GANTRY_CACHE_DIR", "GANTRY_BUILDERS", "GANTRY_REMOTE_TOKEN"} {
		if found[must] == "" {
			t.Fatalf("the scan found no %s: it does not read the code", must)
		}
	}
	help := newEnvironmentTopic().Long
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`GANTRY_[A-Z0-9_]+`)
	for v, file := range found {
		if !slices.Contains(names.FindAllString(help, -1), v) {
			t.Errorf("%s (read in %s) is not in `gantry help environment` (cmd/gantry/cli/environment.go)", v, file)
		}
		if !slices.Contains(names.FindAllString(string(readme), -1), v) {
			t.Errorf("%s (read in %s) is not in the README's environment line", v, file)
		}
	}
}
