package element

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gantry-build/gantry/source"
)

// Inputs is what an element's cache key is computed from, kept in a form that can say
// which part changed: it is recorded with every artifact (compact JSON) and `explain`
// compares the current one with the last build's.
type Inputs struct {
	Kind string `json:"kind"`
	// Sandbox is the key's sandbox class: "bwrap" for a hermetic build, "" otherwise.
	Sandbox   string            `json:"sandbox,omitempty"`
	Variables map[string]string `json:"vars,omitempty"` // expanded as for the key
	// Defs holds the definitions of the variables that refer to others ("%{prefix}/bin"),
	// to tell the variable that was edited from those that changed with it.
	Defs    map[string]string `json:"defs,omitempty"`
	Config  *Resolved         `json:"config,omitempty"`
	Sources []SourceInput     `json:"sources,omitempty"`
	// Deps are the keys of what its build stages (StageDeps: its own runtime-only
	// dependencies are not in its key), by the names the element's own project gives
	// them (as its key does): the same record whether it was built through a junction
	// or in its project directly.
	Deps map[string]string `json:"deps,omitempty"`
	// OwnNames says Deps is by those names. Records made before name a sub-project
	// element's dependencies as the top project of that build did (base.toml:util.toml
	// through junction base.toml): ownDeps reads them.
	OwnNames bool `json:"own-names,omitempty"`
}

// SourceInput is one source as the key sees it.
type SourceInput struct {
	What  string            `json:"what"` // Describe()
	Ref   string            `json:"ref,omitempty"`
	Key   string            `json:"key"`
	Files map[string]string `json:"files,omitempty"` // local, patch, workspace: path -> short hash
	// FilesFrom is the host path whose files HashFiles hashes into Files (local
	// sources, patches, workspaces); cleared once they are.
	FilesFrom string `json:"files-from,omitempty"`
}

// HashFiles hashes each local file of in's sources, one by one: reading them is left
// to the build job (or to explain), never done on the scheduler's loop.
func (in *Inputs) HashFiles() {
	for i := range in.Sources {
		if s := &in.Sources[i]; s.FilesFrom != "" {
			s.Files, _ = source.HashFiles(s.FilesFrom) // unreadable: no detail, the key says it changed
			s.FilesFrom = ""
		}
	}
}

// Inputs returns what e's key is computed from, local files not yet hashed one by one
// (HashFiles does).
func (g *Graph) Inputs(e *Element) *Inputs { return g.InputsStaging(e, g.StageDeps(e)) }

// InputsStaging is Inputs of e, whose build stages stage (StageDeps, computed once by a
// caller that needs it too).
func (g *Graph) InputsStaging(e *Element, stage []*Element) *Inputs {
	in := &Inputs{Kind: e.Kind.Name, Sandbox: g.sandboxClass(e), Config: g.resolvedConfig(e), Deps: e.depKeys(stage), OwnNames: true}
	vars := e.Variables(g.Project, keyPaths())
	if all, err := vars.All(); err == nil {
		in.Variables = all
	}
	for k, v := range vars.definitions() {
		if strings.Contains(v, "%{") {
			if in.Defs == nil {
				in.Defs = map[string]string{}
			}
			in.Defs[k] = v
		}
	}
	if e.Workspace != "" {
		in.Sources = []SourceInput{{What: "workspace " + e.Workspace, Key: e.sourceKeys[0], FilesFrom: e.Workspace}}
	}
	for i, s := range e.Sources {
		if e.Workspace != "" {
			break
		}
		si := SourceInput{What: s.Describe(), Ref: s.Ref, Key: e.sourceKeys[i]}
		if s.Kind == source.Local || s.Kind == source.Patch {
			if p, err := source.ProjectPath(e.ownRoot(g), s.Path); err == nil {
				si.FilesFrom = p
			}
		}
		in.Sources = append(in.Sources, si)
	}
	return in
}

// DepKeys are the keys of e's build and runtime dependencies by the names e's own
// project gives them (as its key does), for its artifact's record.
func (e *Element) DepKeys() map[string]string { return e.depKeys(e.BuildDeps, e.RunDeps) }

// depKeys are the keys of the elements of lists, dependencies of e, by the names e's own
// project gives them.
func (e *Element) depKeys(lists ...[]*Element) map[string]string {
	m := map[string]string{}
	for _, list := range lists {
		for _, d := range list {
			m[e.unqualify(d.Name)] = d.Key
		}
	}
	return m
}

// ownDeps is in.Deps, recorded for an artifact of e, by the names e's own project gives
// them: a record made before OwnNames names them through the junction path of that
// build, which is taken as e's now (the other way, its dependencies may be reported
// added or removed once).
func (e *Element) ownDeps(in *Inputs) map[string]string {
	path := e.Name[:len(e.Name)-len(e.local)]
	if in.OwnNames || path == "" {
		return in.Deps
	}
	deps := make(map[string]string, len(in.Deps))
	for name, key := range in.Deps {
		deps[strings.TrimPrefix(name, path)] = key
	}
	return deps
}

// hashedInputs is e's Inputs with its local files hashed.
func (g *Graph) hashedInputs(e *Element) *Inputs {
	in := g.Inputs(e)
	in.HashFiles()
	return in
}

// History is what explain asks of the cache.
type History interface {
	// Latest returns the key and recorded inputs of the most recent artifact of element
	// (ok false: none, or none that recorded its inputs).
	Latest(element string) (key string, inputs *Inputs, ok bool)
	// At returns the inputs recorded with element's artifact at key.
	At(element, key string) (*Inputs, bool)
}

// Explanation says why an element needs building.
type Explanation struct {
	Element string `json:"element"`
	Key     string `json:"key"`
	// Reason: "never-built", "input" (its own input changed), "dependency" (a
	// dependency's key changed; Chain leads to the element whose input did), "unknown".
	Reason string   `json:"reason"`
	Chain  []string `json:"chain,omitempty"` // dependencies, from the nearest to the one that changed
	Cause  *Change  `json:"cause,omitempty"`
	Text   string   `json:"text"`
}

// Change is one difference of inputs.
type Change struct {
	What string `json:"what"` // kind, sandbox, source, local-file, variable, command, environment, config, dependency
	Name string `json:"name,omitempty"`
	Old  string `json:"old,omitempty"`
	New  string `json:"new,omitempty"`
}

func (c *Change) String() string {
	switch c.What {
	case "kind":
		return fmt.Sprintf("its kind changed: %s → %s", c.Old, c.New)
	case "sandbox":
		return fmt.Sprintf("its sandbox changed: %s → %s (a host artifact never satisfies a hermetic build)", c.Old, c.New)
	case "local-file":
		return fmt.Sprintf("local file %s %s, in %s", c.Name, c.New, c.Old)
	case "variable", "environment":
		return fmt.Sprintf("%s %s changed: %q → %q", c.What, c.Name, c.Old, c.New)
	case "command":
		return fmt.Sprintf("config %s changed: %q → %q", c.Name, c.Old, c.New)
	case "public":
		return fmt.Sprintf("public data %s changed: %q → %q", c.Name, c.Old, c.New)
	case "dependency":
		return fmt.Sprintf("dependency %s %s", c.Name, c.New)
	}
	if c.Name == "workspace" {
		return c.New
	}
	if c.Old != "" || c.New != "" {
		return fmt.Sprintf("%s changed: %s → %s", c.Name, c.Old, c.New)
	}
	return c.Name + " changed"
}

// Explain says why e, whose artifact at its current key is not cached, needs building:
// compared with the most recent artifact of e, which of its own inputs changed, or which
// dependency's key did, followed down to the first element whose own input changed.
func (g *Graph) Explain(e *Element, h History) Explanation {
	x := Explanation{Element: e.Name, Key: e.Key}
	_, old, ok := h.Latest(e.Name)
	if !ok {
		x.Reason, x.Text = "never-built", e.Name+": never built"
		return x
	}
	cur := e
	for in := g.hashedInputs(cur); ; {
		if c := ownChange(old, in); c != nil {
			x.Cause = c
			break
		}
		dep, oldKey, c := g.changedDep(cur, old, in)
		if dep == nil {
			x.Cause = c // nil: nothing differs that the record shows
			break
		}
		depOld, ok := h.At(dep.Name, oldKey)
		if !ok {
			x.Chain = append(x.Chain, dep.Name)
			x.Cause = &Change{What: "dependency", Name: dep.Name, New: "changed key (its previous artifact is no longer in the cache)"}
			break
		}
		x.Chain = append(x.Chain, dep.Name)
		cur, old, in = dep, depOld, g.hashedInputs(dep)
	}
	switch {
	case x.Cause == nil:
		x.Reason, x.Text = "unknown", e.Name+": its key changed, but its recorded inputs are the same (a different gantry version?)"
	case len(x.Chain) == 0:
		x.Reason, x.Text = "input", e.Name+": "+x.Cause.String()
	default:
		x.Reason = "dependency"
		last := x.Chain[len(x.Chain)-1]
		via := ""
		if len(x.Chain) > 1 {
			via = " (via " + strings.Join(x.Chain[:len(x.Chain)-1], " → ") + ")"
		}
		if x.Cause.What == "dependency" && x.Cause.Name == last {
			x.Text = fmt.Sprintf("%s: dependency %s%s %s", e.Name, last, via, x.Cause.New)
		} else {
			x.Text = fmt.Sprintf("%s: dependency %s%s changed: %s", e.Name, last, via, x.Cause)
		}
	}
	return x
}

// ownChange returns the first difference between old and cur in the element's own
// inputs (not its dependencies): kind, sources, then configuration, named by the
// variable that changed it when one did.
func ownChange(old, cur *Inputs) *Change {
	if old.Kind != cur.Kind {
		return &Change{What: "kind", Old: old.Kind, New: cur.Kind}
	}
	if old.Sandbox != cur.Sandbox {
		return &Change{What: "sandbox", Old: sandboxName(old.Sandbox), New: sandboxName(cur.Sandbox)}
	}
	if ws := workspaceOf(cur); ws != workspaceOf(old) {
		if ws != "" {
			return &Change{What: "source", Name: "workspace", New: "it builds from its workspace " + ws}
		}
		return &Change{What: "source", Name: "workspace", New: "its workspace was closed: it builds from its sources"}
	}
	if len(old.Sources) != len(cur.Sources) {
		return &Change{What: "source", Name: "sources", Old: fmt.Sprint(len(old.Sources)), New: fmt.Sprint(len(cur.Sources))}
	}
	for i, o := range old.Sources {
		if c := sourceChange(i, o, cur.Sources[i]); c != nil {
			return c
		}
	}
	oc, cc := old.Config, cur.Config
	if oc == nil {
		oc = &Resolved{}
	}
	if cc == nil {
		cc = &Resolved{}
	}
	configChanged := !equalJSON(oc, cc)
	if !configChanged {
		return nil
	}
	// A variable explains a changed configuration better than the command it changed.
	if c := editedVariable(old, cur); c != nil {
		return c
	}
	steps := slices.Sorted(maps.Keys(oc.Commands))
	for _, s := range slices.Sorted(maps.Keys(cc.Commands)) {
		if _, ok := oc.Commands[s]; !ok {
			steps = append(steps, s)
		}
	}
	for _, s := range steps {
		o, n := oc.Commands[s], cc.Commands[s]
		if slices.Equal(o, n) {
			continue
		}
		for i := range max(len(o), len(n)) {
			var a, b string
			if i < len(o) {
				a = o[i]
			}
			if i < len(n) {
				b = n[i]
			}
			if a != b {
				return &Change{What: "command", Name: s, Old: a, New: b}
			}
		}
	}
	if c := firstDiff("environment", oc.Env, cc.Env); c != nil {
		return c
	}
	if c := publicChange(oc.Public, cc.Public); c != nil {
		return c
	}
	return &Change{What: "config", Name: "config (source, target, include, exclude, include-orphans or integrate)"}
}

// sandboxName describes a key's sandbox class for explain.
func sandboxName(class string) string {
	if class == hermeticSandbox {
		return "bwrap (hermetic)"
	}
	return "host or auto (not hermetic)"
}

// workspaceOf is the workspace in's element built from, or "".
func workspaceOf(in *Inputs) string {
	if len(in.Sources) == 1 {
		if ws, ok := strings.CutPrefix(in.Sources[0].What, "workspace "); ok {
			return ws
		}
	}
	return ""
}

func sourceChange(i int, o, n SourceInput) *Change {
	if o.Key == n.Key {
		return nil
	}
	name := fmt.Sprintf("source %d (%s)", i+1, n.What)
	switch {
	case o.What != n.What:
		return &Change{What: "source", Name: fmt.Sprintf("source %d", i+1), Old: o.What, New: n.What}
	case o.Ref != n.Ref:
		return &Change{What: "source", Name: name + " ref", Old: o.Ref, New: n.Ref}
	case o.Files != nil && n.Files != nil:
		for _, f := range slices.Sorted(maps.Keys(n.Files)) {
			oh, ok := o.Files[f]
			switch {
			case !ok:
				return &Change{What: "local-file", Name: f, Old: name, New: "added"}
			case oh != n.Files[f]:
				return &Change{What: "local-file", Name: f, Old: name, New: "changed"}
			}
		}
		for _, f := range slices.Sorted(maps.Keys(o.Files)) {
			if _, ok := n.Files[f]; !ok {
				return &Change{What: "local-file", Name: f, Old: name, New: "removed"}
			}
		}
	}
	return &Change{What: "source", Name: name + " settings"}
}

// editedVariable names the variable whose definition changed: variables are recorded
// expanded, so when %{prefix} changes, %{bindir} = "%{prefix}/bin" does too, but only
// prefix's definition did.
func editedVariable(old, cur *Inputs) *Change {
	def := func(in *Inputs, k string) string {
		if d, ok := in.Defs[k]; ok {
			return d
		}
		return in.Variables[k]
	}
	for _, k := range slices.Sorted(maps.Keys(cur.Variables)) {
		if old.Variables[k] != cur.Variables[k] && def(old, k) != def(cur, k) {
			return &Change{What: "variable", Name: k, Old: old.Variables[k], New: cur.Variables[k]}
		}
	}
	return firstDiff("variable", old.Variables, cur.Variables)
}

// firstDiff names the first key (in order) whose value differs between old and cur.
func firstDiff(what string, old, cur map[string]string) *Change {
	names := slices.Sorted(maps.Keys(cur))
	for k := range old {
		if _, ok := cur[k]; !ok {
			names = append(names, k)
		}
	}
	for _, k := range names {
		if o, n := old[k], cur[k]; o != n {
			return &Change{What: what, Name: k, Old: o, New: n}
		}
	}
	return nil
}

// changedDep returns the first staged dependency of e (its build dependencies in
// declaration order, then their runtime dependencies) whose key is not the one old
// recorded, with the key old recorded, or the Change when a dependency was added or
// removed. Dependencies are compared by the names e's own project gives them
// (Inputs.Deps) and reported by the graph's.
func (g *Graph) changedDep(e *Element, old, cur *Inputs) (*Element, string, *Change) {
	recorded := e.ownDeps(old)
	for _, d := range slices.Concat(e.BuildDeps, g.StageDeps(e)) {
		name := e.unqualify(d.Name)
		key, had := recorded[name]
		if !had {
			return nil, "", &Change{What: "dependency", Name: d.Name, New: "added"}
		}
		if key != cur.Deps[name] {
			return d, key, nil
		}
	}
	for _, name := range slices.Sorted(maps.Keys(recorded)) {
		if _, ok := cur.Deps[name]; !ok {
			return nil, "", &Change{What: "dependency", Name: e.qualify(name), New: "removed"}
		}
	}
	return nil, "", nil
}

// equalJSON compares two resolved configs by their encoding. They hold strings,
// lists and maps of strings only, which always encode: the errors are nil.
func equalJSON(a, b *Resolved) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// MarshalInputs is the compact, canonical form recorded with an artifact.
func MarshalInputs(in *Inputs) json.RawMessage {
	data, err := json.Marshal(in)
	if err != nil {
		panic("element: encoding key inputs: " + err.Error()) // only plain types inside
	}
	return data
}
