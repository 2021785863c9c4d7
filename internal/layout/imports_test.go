package layout

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path every gantry package starts with.
const module = "github.com/gantry-build/gantry"

// A rule says which gantry packages some packages may reach, directly or
// through others (go list's Deps). A pattern is a package path relative to the
// module root, and "p/..." is p and everything under it.
type rule struct {
	from   []string // the packages the rule is about
	except []string // of those, the ones it is not about
	never  []string // packages none of them may reach
	only   []string // if set, the only gantry packages they may reach
	// pending says why the rule is not enforced yet ("" for an enforced rule):
	// it names a package that does not exist yet or states a target the code
	// has not reached. The test logs such rules instead of failing on them;
	// delete the reason to switch the rule on. An enforced rule whose packages
	// do not exist fails: a rule about nothing would pass silently.
	pending string
}

var rules = []rule{
	{from: []string{"resources", "internal/..."}, only: []string{"internal/..."}},
	{from: []string{"queues/..."}, never: []string{"ui/...", "cmd/...", "actions/..."}},
	{from: []string{"element/..."}, never: []string{"job/...", "sandbox/...", "actions/..."}},
	{from: []string{"source/...", "cache/...", "job/...", "sandbox/..."}, never: []string{"actions/..."}},
	{from: []string{"cache", "cache/internal/..."}, never: []string{"cache/serve/...", "cache/remote/..."}},
	{from: []string{"cache/remote/..."}, never: []string{"cache/serve/..."}},
	{from: []string{"source/..."}, never: []string{"cache/..."}},
	{from: []string{"job/...", "sandbox/..."}, never: []string{"queues/...", "element/...", "cache/..."}},
	{from: []string{"ui/..."}, never: []string{"cmd/...", "actions/..."}},
	{from: []string{"remote/exec"}, never: []string{"actions/...", "queues/...", "ui/...", "cmd/...", "element/...", "sandbox/...", "job/..."}},
	{from: []string{"..."}, except: []string{"cmd/..."}, never: []string{"cmd/..."}},
}

func TestImportRules(t *testing.T) {
	deps := moduleDeps(t)
	for _, r := range rules {
		name := strings.Join(r.from, ",")
		if r.never != nil {
			name += " never reaches " + strings.Join(r.never, ",")
		} else {
			name += " reaches only " + strings.Join(r.only, ",")
		}
		broken := r.check(deps)
		if r.pending != "" {
			if broken == nil && r.exists(deps) {
				t.Logf("not yet enforced, and holds now (switch it on): %s (%s)", name, r.pending)
			} else {
				t.Logf("not yet enforced: %s (%s)", name, r.pending)
			}
			continue
		}
		if !r.exists(deps) {
			t.Errorf("%s: a package the rule names does not exist", name)
		}
		for _, b := range broken {
			t.Errorf("%s: %s", name, b)
		}
	}
}

// exists reports whether every pattern the rule names matches a package.
func (r rule) exists(deps map[string][]string) bool {
	for _, p := range slices.Concat(r.from, r.except, r.never, r.only) {
		if p != "..." && !slices.ContainsFunc(keys(deps), func(pkg string) bool { return match(p, pkg) }) {
			return false
		}
	}
	return true
}

// check returns how the rule is broken: "a reaches b" for each package a the
// rule is about that reaches a package b it must not.
func (r rule) check(deps map[string][]string) []string {
	var broken []string
	for _, pkg := range keys(deps) {
		if !matchAny(r.from, pkg) || matchAny(r.except, pkg) {
			continue
		}
		for _, d := range deps[pkg] {
			if d == pkg {
				continue
			}
			if matchAny(r.never, d) || (r.only != nil && !matchAny(r.only, d)) {
				broken = append(broken, pkg+" reaches "+d)
			}
		}
	}
	return broken
}

// moduleDeps returns, for each package of the module, the module's packages it
// reaches (imports, directly or not), paths relative to the module root. Tests
// do not count.
func moduleDeps(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg, ok := relative(f[0])
		if !ok {
			continue
		}
		deps[pkg] = []string{}
		for _, d := range f[1:] {
			if rel, ok := relative(d); ok {
				deps[pkg] = append(deps[pkg], rel)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(deps) == 0 {
		t.Fatal("go list found no package of the module")
	}
	return deps
}

// relative returns path relative to the module root, if it is in the module.
func relative(path string) (string, bool) {
	if path == module {
		return "", true
	}
	return strings.CutPrefix(path, module+"/")
}

func keys(m map[string][]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// match reports whether pkg matches pattern: the package itself, or with a
// trailing "/...", it and every package under it; "..." matches everything.
func match(pattern, pkg string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchAny(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, pkg) })
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, pkg string
		want         bool
	}{
		{"cache", "cache", true},
		{"cache", "cache/remote", false},
		{"cache/...", "cache", true},
		{"cache/...", "cache/remote", true},
		{"cache/...", "cachex", false},
		{"...", "anything/at/all", true},
	} {
		if got := match(tc.pattern, tc.pkg); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.pattern, tc.pkg, got, tc.want)
		}
	}
}
