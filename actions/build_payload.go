package actions

import (
	"fmt"
	"slices"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/bincode"
	"github.com/gantry-build/gantry/job"
	rexec "github.com/gantry-build/gantry/remote/exec"
	"github.com/gantry-build/gantry/source"
)

// A build job's spec travels to its worker in internal/bincode's binary form, not
// JSON (whose reflection was most of a no-op build's protocol cost), split in
// two (job.Input):
//
//   - shared parts, which recur from build to build and which a worker is
//     sent once (job.Spec.Shared): the session's part (cache, project, sandbox,
//     remote configuration, the project's variable definitions), the
//     element's variables but its element-name (the project's, for most
//     elements), and one part per staged dependency (its artifact's name, key
//     and digests, as stagedDigests found them);
//   - the payload, this build's own: element, key, work directory, sources,
//     resolved config, which dependencies it touches.
//
// A shared part's maps are written in key order, so that equal parts are equal
// bytes (the payload's in any order: sorting is the encoding's largest cost);
// nil is told from empty, so that the job reads back exactly the spec the loop made
// (TestBuildSpecRoundTrip fills every field).

// buildParts is the number of shared parts before the staged dependencies'.
const buildParts = 2

// elementNameVar is the variable that differs between the elements of a project.
const elementNameVar = "element-name"

// input is the job input of spec.
func (spec *buildSpec) input() job.Input {
	shared := make([]string, 0, buildParts+len(spec.Stage))
	var w wire
	w.session(spec)
	shared = append(shared, string(w.B))
	w.B = w.B[:0]
	var vars map[string]string
	if spec.Inputs != nil {
		vars = spec.Inputs.Variables
	}
	w.strMapExcept(vars, elementNameVar)
	shared = append(shared, string(w.B))
	for i := range spec.Stage {
		w.B = w.B[:0]
		w.staged(&spec.Stage[i])
		shared = append(shared, string(w.B))
	}
	w.B, w.anyOrder = make([]byte, 0, 1024), true
	w.own(spec)
	return job.Input{Payload: w.B, Shared: shared}
}

// readBuildSpec reads the spec of a build job.
func readBuildSpec(js job.Spec) (*buildSpec, error) {
	if len(js.Shared) < buildParts {
		return nil, fmt.Errorf("reading build spec: %d shared parts, want at least %d", len(js.Shared), buildParts)
	}
	spec := &buildSpec{}
	u := unwire{bincode.NewStringReader(js.Shared[0])}
	u.session(spec)
	if err := u.done("its session part"); err != nil {
		return nil, err
	}
	u = unwire{bincode.NewStringReader(js.Shared[1])}
	vars := u.strMap()
	if err := u.done("its variables"); err != nil {
		return nil, err
	}
	if stage := js.Shared[buildParts:]; len(stage) > 0 {
		spec.Stage = make([]stagedArtifact, len(stage))
		for i, part := range stage {
			u = unwire{bincode.NewStringReader(part)}
			u.staged(&spec.Stage[i])
			if err := u.done(fmt.Sprintf("staged dependency %d", i+1)); err != nil {
				return nil, err
			}
		}
	}
	u = unwire{bincode.NewStringReader(string(js.Payload))}
	u.own(spec, vars)
	if err := u.done("its payload"); err != nil {
		return nil, err
	}
	return spec, nil
}

// wire writes a build spec's parts.
type wire struct {
	bincode.Writer
	anyOrder bool // maps in iteration order: not a shared part
}

// count writes the length of a list or map, 0 for nil.
func (w *wire) count(n int, isNil bool) {
	if isNil {
		w.Uint(0)
	} else {
		w.Uint(uint64(n) + 1)
	}
}

func (w *wire) strs(l []string) {
	w.count(len(l), l == nil)
	for _, s := range l {
		w.Str(s)
	}
}

func (w *wire) strMap(m map[string]string) { w.strMapExcept(m, "") }

// strMapExcept writes m, in key order, without the key except ("" for none).
func (w *wire) strMapExcept(m map[string]string, except string) {
	if w.anyOrder && except == "" {
		w.count(len(m), m == nil)
		for k, v := range m {
			w.Str(k)
			w.Str(v)
		}
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != except || except == "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	w.count(len(keys), m == nil)
	for _, k := range keys {
		w.Str(k)
		w.Str(m[k])
	}
}

func (w *wire) listMap(m map[string][]string) {
	if w.anyOrder {
		w.count(len(m), m == nil)
		for k, l := range m {
			w.Str(k)
			w.strs(l)
		}
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.count(len(keys), m == nil)
	for _, k := range keys {
		w.Str(k)
		w.strs(m[k])
	}
}

func (w *wire) digest(d cache.Digest) {
	w.Str(d.Hash)
	w.Int(d.Size)
}

// optBool writes nil, false or true as 0, 1 or 2.
func (w *wire) optBool(b *bool) {
	switch {
	case b == nil:
		w.Uint(0)
	case !*b:
		w.Uint(1)
	default:
		w.Uint(2)
	}
}

func (w *wire) resolved(r *element.Resolved) {
	w.Bool(r != nil)
	if r == nil {
		return
	}
	w.listMap(r.Commands)
	w.Str(r.Source)
	w.Str(r.Target)
	w.strs(r.Include)
	w.strs(r.Exclude)
	w.optBool(r.Integrate)
	w.optBool(r.Orphans)
	w.strMap(r.Env)
	w.Bool(r.Public != nil)
	if r.Public != nil {
		w.strs(r.Public.Integration)
		w.listMap(r.Public.Splits)
	}
}

func (w *wire) remote(s *remote.Spec) {
	w.Str(s.URL)
	w.Bool(s.Push)
	w.Str(s.Instance)
	w.Str(s.ServerCA)
	w.Str(s.ClientCert)
	w.Str(s.ClientKey)
	w.Str(s.TokenFile)
	w.Str(s.TokenEnv)
	w.Bool(s.Sources)
	w.Int(int64(s.IdleTimeout))
}

func (w *wire) remoteConfig(c *rexec.Config) {
	w.Bool(c != nil)
	if c == nil {
		return
	}
	w.remote(&c.Execution)
	w.remote(&c.Storage)
	w.remote(&c.ActionCache)
	w.strMap(c.Platform)
	w.Int(int64(c.RemoteJobs))
	w.Str(c.Wrap)
	w.Int(int64(c.Timeout))
	w.Str(c.From)
}

// session writes what the builds of a session share: the shared part 0.
func (w *wire) session(spec *buildSpec) {
	w.Str(spec.CacheDir)
	w.Str(spec.Project)
	w.Str(spec.ProjectRoot)
	w.Str(spec.Sandbox)
	w.Bool(spec.FatalOverlaps)
	w.Str(spec.RemoteInvocation)
	w.remoteConfig(spec.Remote)
	w.remoteConfig(spec.ActionCache)
	w.Bool(spec.ActionCacheReadOnly)
	var defs map[string]string
	if spec.Inputs != nil {
		defs = spec.Inputs.Defs
	}
	w.strMap(defs)
}

// staged writes a staged dependency but its Touch (the payload's).
func (w *wire) staged(s *stagedArtifact) {
	w.Str(s.Project)
	w.Str(s.Element)
	w.Str(s.Key)
	w.digest(s.Record)
	w.digest(s.Files)
	w.Bool(s.Pending)
	w.Bool(s.Public != nil)
	if s.Public != nil {
		w.strs(s.Public.Host)
		w.strs(s.Public.Bwrap)
		w.listMap(s.Public.Split)
	}
	w.Str(s.Name)
	w.strs(s.Whitelist)
}

func (w *wire) source(s *source.Spec) {
	s.WriteFields(&w.Writer)
	w.Str(s.Upstream)
	w.strs(s.Mirrors)
}

// own writes the build's own payload.
func (w *wire) own(spec *buildSpec) {
	w.Str(spec.Element)
	w.Str(spec.Key)
	w.Str(spec.WeakKey)
	w.Str(spec.Kind)
	w.Str(spec.WorkDir)
	w.Bool(spec.CommitTicket != nil)
	if t := spec.CommitTicket; t != nil {
		w.Str(t.Path)
		w.Int(t.Byte)
	}
	w.strMap(spec.DepKeys)
	w.count(len(spec.Sources), spec.Sources == nil)
	for i := range spec.Sources {
		w.source(&spec.Sources[i])
	}
	w.resolved(spec.Host)
	w.resolved(spec.Bwrap)
	w.inputs(spec.Inputs)
	w.Bool(spec.Workspace != nil)
	if ws := spec.Workspace; ws != nil {
		w.Str(ws.Dir)
		w.Str(ws.BuildDir)
		w.Str(ws.Manifest)
	}
	w.strMap(spec.RemotePlatform)
	w.Int(int64(spec.RemoteTimeout))
	w.count(len(spec.Stage), spec.Stage == nil)
	for _, s := range spec.Stage {
		w.Bool(s.Touch)
	}
}

// inputs writes in but its Defs (the session part's) and its variables but
// element-name (the variables part's).
func (w *wire) inputs(in *element.Inputs) {
	w.Bool(in != nil)
	if in == nil {
		return
	}
	w.Str(in.Kind)
	w.Str(in.Sandbox)
	name, ok := in.Variables[elementNameVar]
	w.Bool(ok)
	w.Str(name)
	w.Bool(in.Variables == nil)
	w.Bool(in.Defs == nil)
	w.resolved(in.Config)
	w.count(len(in.Sources), in.Sources == nil)
	for _, s := range in.Sources {
		w.Str(s.What)
		w.Str(s.Ref)
		w.Str(s.Key)
		w.strMap(s.Files)
		w.Str(s.FilesFrom)
	}
	w.strMap(in.Deps)
	w.Bool(in.OwnNames)
}

// unwire reads what wire wrote.
type unwire struct{ *bincode.Reader }

// done is the error of a part read: what went wrong, or bytes left over.
func (u unwire) done(what string) error {
	if u.Err != nil {
		return fmt.Errorf("reading build spec: %s: %w", what, u.Err)
	}
	if u.Len() != 0 {
		return fmt.Errorf("reading build spec: %s: %d bytes left over", what, u.Len())
	}
	return nil
}

// count reads a list's or map's length; isNil for a nil one.
func (u unwire) count() (n int, isNil bool) {
	c := u.Uint()
	if c == 0 || u.Err != nil {
		return 0, true
	}
	if c-1 > uint64(u.Len()) {
		u.Err = bincode.ErrTruncated
		return 0, true
	}
	return int(c - 1), false
}

func (u unwire) strs() []string {
	n, isNil := u.count()
	if isNil {
		return nil
	}
	l := make([]string, n)
	for i := range l {
		l[i] = u.Str()
	}
	return l
}

func (u unwire) strMap() map[string]string {
	n, isNil := u.count()
	if isNil {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := u.Str()
		m[k] = u.Str()
	}
	return m
}

func (u unwire) listMap() map[string][]string {
	n, isNil := u.count()
	if isNil {
		return nil
	}
	m := make(map[string][]string, n)
	for range n {
		k := u.Str()
		m[k] = u.strs()
	}
	return m
}

func (u unwire) digest() cache.Digest { return cache.Digest{Hash: u.Str(), Size: u.Int()} }

func (u unwire) optBool() *bool {
	switch u.Uint() {
	case 0:
		return nil
	case 1:
		return new(bool)
	default:
		b := true
		return &b
	}
}

func (u unwire) resolved() *element.Resolved {
	if !u.Bool() {
		return nil
	}
	r := &element.Resolved{}
	r.Commands = u.listMap()
	r.Source = u.Str()
	r.Target = u.Str()
	r.Include = u.strs()
	r.Exclude = u.strs()
	r.Integrate = u.optBool()
	r.Orphans = u.optBool()
	r.Env = u.strMap()
	if u.Bool() {
		r.Public = &element.ResolvedPublic{Integration: u.strs(), Splits: u.listMap()}
	}
	return r
}

func (u unwire) remote(s *remote.Spec) {
	s.URL = u.Str()
	s.Push = u.Bool()
	s.Instance = u.Str()
	s.ServerCA = u.Str()
	s.ClientCert = u.Str()
	s.ClientKey = u.Str()
	s.TokenFile = u.Str()
	s.TokenEnv = u.Str()
	s.Sources = u.Bool()
	s.IdleTimeout = time.Duration(u.Int())
}

func (u unwire) remoteConfig() *rexec.Config {
	if !u.Bool() {
		return nil
	}
	c := &rexec.Config{}
	u.remote(&c.Execution)
	u.remote(&c.Storage)
	u.remote(&c.ActionCache)
	c.Platform = u.strMap()
	c.RemoteJobs = int(u.Int())
	c.Wrap = u.Str()
	c.Timeout = time.Duration(u.Int())
	c.From = u.Str()
	return c
}

func (u unwire) session(spec *buildSpec) {
	spec.CacheDir = u.Str()
	spec.Project = u.Str()
	spec.ProjectRoot = u.Str()
	spec.Sandbox = u.Str()
	spec.FatalOverlaps = u.Bool()
	spec.RemoteInvocation = u.Str()
	spec.Remote = u.remoteConfig()
	spec.ActionCache = u.remoteConfig()
	spec.ActionCacheReadOnly = u.Bool()
	spec.Inputs = &element.Inputs{Defs: u.strMap()} // dropped by own if the spec has none
}

func (u unwire) staged(s *stagedArtifact) {
	s.Project = u.Str()
	s.Element = u.Str()
	s.Key = u.Str()
	s.Record = u.digest()
	s.Files = u.digest()
	s.Pending = u.Bool()
	if u.Bool() {
		s.Public = &stagedPublic{Host: u.strs(), Bwrap: u.strs(), Split: u.listMap()}
	}
	s.Name = u.Str()
	s.Whitelist = u.strs()
}

func (u unwire) source(s *source.Spec) {
	s.ReadFields(u.Reader)
	s.Upstream = u.Str()
	s.Mirrors = u.strs()
}

// own reads the build's own payload; vars are the variables part's.
func (u unwire) own(spec *buildSpec, vars map[string]string) {
	spec.Element = u.Str()
	spec.Key = u.Str()
	spec.WeakKey = u.Str()
	spec.Kind = u.Str()
	spec.WorkDir = u.Str()
	if u.Bool() {
		spec.CommitTicket = &commitTicket{Path: u.Str(), Byte: u.Int()}
	}
	spec.DepKeys = u.strMap()
	if n, isNil := u.count(); !isNil {
		spec.Sources = make([]source.Spec, n)
		for i := range spec.Sources {
			u.source(&spec.Sources[i])
		}
	}
	spec.Host = u.resolved()
	spec.Bwrap = u.resolved()
	spec.Inputs = u.inputs(spec.Inputs.Defs, vars)
	if u.Bool() {
		spec.Workspace = &workspaceBuild{Dir: u.Str(), BuildDir: u.Str(), Manifest: u.Str()}
	}
	spec.RemotePlatform = u.strMap()
	spec.RemoteTimeout = time.Duration(u.Int())
	n, isNil := u.count()
	if u.Err == nil && n != len(spec.Stage) {
		u.Err = fmt.Errorf("%d staged dependencies, and %d shared parts for them", n, len(spec.Stage))
	}
	if isNil {
		spec.Stage = nil
	}
	for i := range spec.Stage {
		spec.Stage[i].Touch = u.Bool()
	}
}

// inputs reads what wire.inputs wrote; defs and vars are the shared parts'.
func (u unwire) inputs(defs, vars map[string]string) *element.Inputs {
	if !u.Bool() {
		return nil
	}
	in := &element.Inputs{Defs: defs}
	in.Kind = u.Str()
	in.Sandbox = u.Str()
	hasName, name := u.Bool(), u.Str()
	nilVars, nilDefs := u.Bool(), u.Bool()
	switch {
	case nilVars:
	case vars == nil:
		in.Variables = map[string]string{}
	default:
		in.Variables = vars
	}
	if hasName {
		if in.Variables == nil {
			in.Variables = map[string]string{}
		}
		in.Variables[elementNameVar] = name
	}
	if nilDefs {
		in.Defs = nil
	} else if in.Defs == nil {
		in.Defs = map[string]string{}
	}
	in.Config = u.resolved()
	if n, isNil := u.count(); !isNil {
		in.Sources = make([]element.SourceInput, n)
		for i := range in.Sources {
			s := &in.Sources[i]
			s.What, s.Ref, s.Key = u.Str(), u.Str(), u.Str()
			s.Files = u.strMap()
			s.FilesFrom = u.Str()
		}
	}
	in.Deps = u.strMap()
	in.OwnNames = u.Bool()
	return in
}

// encode is b as its job's Available message carries it.
func (b Built) encode() []byte {
	var w wire
	w.digest(b.Files)
	return w.B
}

// decodeBuilt reads what Built.encode wrote.
func decodeBuilt(data []byte) (Built, error) {
	u := unwire{bincode.NewStringReader(string(data))}
	b := Built{Files: u.digest()}
	if u.Err == nil && u.Len() != 0 {
		u.Err = bincode.ErrTruncated
	}
	return b, u.Err
}
