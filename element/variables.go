package element

import (
	"fmt"
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
	"sysconfdir":    "/etc",
	"localstatedir": "/var",
}

// Paths are the values of the path and machine variables for one expansion. Cache keys
// use KeyPaths, so that where a build runs (host temp dirs, -j) never changes a key.
type Paths struct {
	BuildRoot, InstallRoot, Sysroot, MaxJobs string
}

// KeyPaths are the canonical paths (those seen inside the bwrap sandbox).
var KeyPaths = Paths{BuildRoot: "/gantry/build", InstallRoot: "/gantry/install", Sysroot: "/", MaxJobs: "%{max-jobs}"}

var varRef = regexp.MustCompile(`%\{([^}]*)\}`)
var varNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// VariableError is an undefined or cyclic variable; the caller adds which element and key.
type VariableError struct{ Msg string }

func (e *VariableError) Error() string { return e.Msg }

// Variables expands %{name} references. It is built per element and per Paths.
type Variables struct {
	raw      map[string]string
	fixed    map[string]string // not expanded further (paths, max-jobs)
	resolved map[string]string
}

// NewVariables layers the given maps (later wins) over the built-ins.
func NewVariables(fixed map[string]string, layers ...map[string]string) *Variables {
	raw := make(map[string]string, len(defaultVariables)+8)
	for k, v := range defaultVariables {
		raw[k] = v
	}
	for _, l := range layers {
		for k, v := range l {
			raw[k] = v
		}
	}
	return &Variables{raw: raw, fixed: fixed, resolved: map[string]string{}}
}

// Expand replaces every %{name} in s, recursively.
func (v *Variables) Expand(s string) (string, error) {
	if !strings.Contains(s, "%{") {
		return s, nil
	}
	return v.expand(s, nil)
}

func (v *Variables) expand(s string, stack []string) (string, error) {
	var firstErr error
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		if firstErr != nil {
			return m
		}
		val, err := v.lookup(m[2:len(m)-1], stack)
		if err != nil {
			firstErr = err
		}
		return val
	})
	return out, firstErr
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
	raw, ok := v.raw[name]
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
	names := make([]string, 0, len(v.raw)+len(v.fixed))
	for k := range v.raw {
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
