package element

import (
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strings"
)

// protectedVariables are set by gantry and cannot be overridden.
var protectedVariables = []string{"install-root", "build-root", "sysroot", "max-jobs", "element-name", "project-name"}

// defaultVariables are the built-ins every element starts from.
var defaultVariables = map[string]string{
	"prefix":        "/usr",
	"exec_prefix":   "%{prefix}",
	"bindir":        "%{exec_prefix}/bin",
	"sbindir":       "%{exec_prefix}/sbin",
	"libdir":        "%{prefix}/lib",
	"libexecdir":    "%{exec_prefix}/libexec",
	"datadir":       "%{prefix}/share",
	"includedir":    "%{prefix}/include",
	"debugdir":      "%{libdir}/debug",
	"docdir":        "%{datadir}/doc",
	"infodir":       "%{datadir}/info",
	"mandir":        "%{datadir}/man",
	"sysconfdir":    "/etc",
	"localstatedir": "/var",
}

// Paths are the values of the path and machine variables for one expansion. Cache keys
// use keyPaths, so that where a build runs (host temp dirs, -j) never changes a key.
type Paths struct {
	BuildRoot, InstallRoot, Sysroot, MaxJobs string
}

// keyPaths returns the canonical paths: those seen inside the bwrap sandbox
// (sandbox.DefaultSandboxBuildRoot and DefaultSandboxInstallRoot, which element may
// not import; TestKeyPathsAreTheSandboxPaths keeps them equal).
func keyPaths() Paths {
	return Paths{BuildRoot: "/gantry/build", InstallRoot: "/gantry/install", Sysroot: "/", MaxJobs: "%{max-jobs}"}
}

var varNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// VariableError is an undefined or cyclic variable; the caller adds which element and key.
type VariableError struct{ Msg string }

func (e *VariableError) Error() string { return e.Msg }

// Variables expands %{name} references. It is built per element and per Paths.
type Variables struct {
	layers   []map[string]string // the built-ins, then the given layers; later wins
	fixed    map[string]string   // not expanded further (paths, max-jobs)
	resolved map[string]string
}

// NewVariables layers the given maps (later wins) over the built-ins. The maps are
// looked up, not copied (one Variables is built per element loaded): they must not
// change while it is in use.
func NewVariables(fixed map[string]string, layers ...map[string]string) *Variables {
	return &Variables{layers: append([]map[string]string{defaultVariables}, layers...), fixed: fixed,
		resolved: map[string]string{}}
}

// raw is name's definition, unexpanded.
func (v *Variables) raw(name string) (string, bool) {
	for i := len(v.layers) - 1; i >= 0; i-- {
		if val, ok := v.layers[i][name]; ok {
			return val, true
		}
	}
	return "", false
}

// definitions are every variable's unexpanded definition.
func (v *Variables) definitions() map[string]string {
	out := map[string]string{}
	for _, l := range v.layers {
		maps.Copy(out, l)
	}
	return out
}

// Expand replaces every %{name} in s, recursively.
func (v *Variables) Expand(s string) (string, error) {
	if !strings.Contains(s, "%{") {
		return s, nil
	}
	return v.expand(s, nil)
}

// maxExpandedSize bounds every expanded value (a variable, a command, an environment
// value): doubling variables would otherwise grow exponentially. 1 MiB is far more than
// any real command line (Linux caps one argument at 128 KiB).
const maxExpandedSize = 1 << 20

func (v *Variables) expand(s string, stack []string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "%{")
		if i < 0 {
			break
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return "", &VariableError{Msg: fmt.Sprintf("unterminated variable reference %q: write %%{name}", truncate(s[i:], 40))}
		}
		b.WriteString(s[:i])
		val, err := v.lookup(s[i+2:i+2+end], stack)
		if err != nil {
			return "", err
		}
		if b.Len()+len(val) > maxExpandedSize {
			return "", v.tooLarge(stack)
		}
		b.WriteString(val)
		s = s[i+2+end+1:]
	}
	if b.Len()+len(s) > maxExpandedSize {
		return "", v.tooLarge(stack)
	}
	b.WriteString(s)
	return b.String(), nil
}

// tooLarge names the variable being expanded (the innermost one) when a value passes
// maxExpandedSize.
func (v *Variables) tooLarge(stack []string) error {
	what := "the value"
	if len(stack) > 0 {
		what = "%{" + stack[len(stack)-1] + "}"
	}
	return &VariableError{Msg: fmt.Sprintf("%s expands to more than %d bytes (1 MiB, the limit for any expanded value): do variables refer to each other in a loop that doubles them?", what, maxExpandedSize)}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (v *Variables) lookup(name string, stack []string) (string, error) {
	if val, ok := v.fixed[name]; ok {
		return val, nil
	}
	if val, ok := v.resolved[name]; ok {
		return val, nil
	}
	for i, s := range stack {
		if s == name {
			cycle := append(append([]string{}, stack[i:]...), name)
			return "", &VariableError{Msg: "variable cycle: " + strings.Join(cycle, " -> ")}
		}
	}
	raw, ok := v.raw(name)
	if !ok {
		return "", &VariableError{Msg: fmt.Sprintf("undefined variable %%{%s}%s", name, didYouMean(name, v.names()))}
	}
	val, err := v.expand(raw, append(stack, name))
	if err != nil {
		return "", err
	}
	v.resolved[name] = val
	return val, nil
}

func (v *Variables) names() []string {
	defs := v.definitions()
	names := make([]string, 0, len(defs)+len(v.fixed))
	for k := range defs {
		names = append(names, k)
	}
	for k := range v.fixed {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// All expands every variable, in name order; used by `show --format %{vars}` and tests.
func (v *Variables) All() (map[string]string, error) {
	out := map[string]string{}
	for _, n := range v.names() {
		val, err := v.lookup(n, nil)
		if err != nil {
			return nil, fmt.Errorf("variable %q: %w", n, err)
		}
		out[n] = val
	}
	return out, nil
}

func checkVariableNames(doc *tomlDoc, table string, vars map[string]string) error {
	for name := range vars {
		for _, p := range protectedVariables {
			if name == p {
				return doc.valueError(table+"."+name, "%%{%s} is set by gantry and cannot be overridden", name)
			}
		}
		if !varNameRE.MatchString(name) {
			return doc.valueError(table+"."+name, "%q is not a valid variable name", name)
		}
	}
	return nil
}

// checkEnvironment rejects names the process environment cannot hold: empty, or with
// '=' or NUL; and values with NUL.
func checkEnvironment(doc *tomlDoc, table string, env map[string]string) error {
	for name, val := range env {
		switch {
		case name == "" || strings.ContainsAny(name, "=\x00"):
			return doc.valueError(table+"."+name, "%q is not a valid environment variable name (it must be non-empty, without '=' or NUL)", name)
		case strings.ContainsRune(val, 0):
			return doc.valueError(table+"."+name, "the value contains a NUL byte, which the environment cannot hold")
		}
	}
	return nil
}
