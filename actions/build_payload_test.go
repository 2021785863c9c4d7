package actions

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/source"
)

// fill sets every exported field reachable from v to a value of its own (each
// string, number and map key different), skipping interfaces and functions
// (remote.Spec's DialOptions, which no payload carries).
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n) * 1000003)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Interface {
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(v.Index(0), n)
		fill(v.Index(1), n)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, n)
			fill(e, n)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	}
}

// roundTrip is spec read back as a build job reads it.
func roundTrip(t testing.TB, spec *buildSpec) *buildSpec {
	t.Helper()
	in := spec.input()
	got, err := readBuildSpec(job.Spec{Payload: in.Payload, Shared: in.Shared})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A build job reads back exactly the spec the loop made: every field (a field
// added to the spec and not to its wire form fails this), nil told from empty,
// and the element-name variable, which travels apart from the others.
func TestBuildSpecRoundTrip(t *testing.T) {
	var full buildSpec
	n := 0
	fill(reflect.ValueOf(&full).Elem(), &n)
	full.Inputs.Variables[elementNameVar] = "app.toml"
	falseBool := false
	full.Host.Orphans = &falseBool

	empty := buildSpec{Stage: []stagedArtifact{{Whitelist: []string{}}}, Sources: []source.Spec{}, DepKeys: map[string]string{},
		Host: &element.Resolved{Env: map[string]string{}, Commands: map[string][]string{"x": {}}}, RemotePlatform: map[string]string{},
		Inputs: &element.Inputs{Variables: map[string]string{}, Defs: map[string]string{}, Sources: []element.SourceInput{}}}
	onlyName := buildSpec{Inputs: &element.Inputs{Variables: map[string]string{elementNameVar: "a.toml"}}}
	for name, spec := range map[string]*buildSpec{"full": &full, "empty": &empty, "zero": {}, "only element-name": &onlyName} {
		t.Run(name, func(t *testing.T) {
			if got := roundTrip(t, spec); !reflect.DeepEqual(got, spec) {
				a, _ := json.Marshal(spec)
				b, _ := json.Marshal(got)
				t.Errorf("read back as\n%s\nwant\n%s", b, a)
			}
		})
	}
}

// benchSpec is a build of one element of a generated no-op project with deps
// staged dependencies: what the session sends for most jobs of bench/jobcost.sh.
func benchSpec(element0 string, deps int) *buildSpec {
	vars := map[string]string{"bindir": "/usr/bin", "build-root": "/gantry/build", "datadir": "/usr/share", "debugdir": "/usr/lib/debug",
		"docdir": "/usr/share/doc", elementNameVar: element0, "exec_prefix": "/usr", "includedir": "/usr/include", "infodir": "/usr/share/info",
		"install-root": "/gantry/install", "libdir": "/usr/lib", "libexecdir": "/usr/libexec", "localstatedir": "/var", "mandir": "/usr/share/man",
		"max-jobs": "%{max-jobs}", "prefix": "/usr", "project-name": "synth", "sbindir": "/usr/sbin", "sysconfdir": "/etc", "sysroot": "/"}
	defs := map[string]string{"bindir": "%{exec_prefix}/bin", "datadir": "%{prefix}/share", "debugdir": "%{libdir}/debug", "docdir": "%{datadir}/doc",
		"exec_prefix": "%{prefix}", "includedir": "%{prefix}/include", "infodir": "%{datadir}/info", "libdir": "%{prefix}/lib",
		"libexecdir": "%{exec_prefix}/libexec", "mandir": "%{datadir}/man", "sbindir": "%{exec_prefix}/sbin"}
	work := "/tmp/c/tmp/30770.db25h7bauxe9-build-l8l8pvfu23iz"
	spec := &buildSpec{CacheDir: "/tmp/c", Project: "synth", ProjectRoot: "/tmp/p", Element: element0,
		Key: strings.Repeat("3", 64), WeakKey: strings.Repeat("2", 64), Kind: "manual", Sandbox: "auto", WorkDir: work,
		Host: &element.Resolved{Env: map[string]string{"GANTRY_BUILD_ROOT": work + "/build", "GANTRY_INSTALL_ROOT": work + "/install",
			"GANTRY_SYSROOT": work + "/sysroot"}, Commands: map[string][]string{"build-commands": {}}},
		Bwrap:   &element.Resolved{Env: map[string]string{}, Commands: map[string][]string{"build-commands": {}}},
		DepKeys: map[string]string{},
		Inputs:  &element.Inputs{Kind: "manual", Variables: vars, Defs: defs, Config: &element.Resolved{}, Deps: map[string]string{}, OwnNames: true}}
	for i := range deps {
		name := fmt.Sprintf("e%04d.toml", i)
		key := cache.DigestOf([]byte(name)).Hash
		spec.DepKeys[name], spec.Inputs.Deps[name] = key, key
		spec.Stage = append(spec.Stage, stagedArtifact{Element: name, Key: key, Name: name, Touch: i%3 == 0,
			Files: cache.DigestOf([]byte("f" + name)), Record: cache.DigestOf([]byte("r" + name))})
	}
	return spec
}

// Two builds of a project share their session and variables parts and their
// common dependencies' parts byte for byte: a worker is sent each once.
func TestBuildSpecPartsShared(t *testing.T) {
	a, b := benchSpec("a.toml", 5), benchSpec("b.toml", 3)
	b.Stage[1].Touch = !a.Stage[1].Touch // the job's own
	ia, ib := a.input(), b.input()
	if len(ia.Shared) != buildParts+5 || len(ib.Shared) != buildParts+3 {
		t.Fatalf("%d and %d shared parts", len(ia.Shared), len(ib.Shared))
	}
	for i := range ib.Shared {
		if ia.Shared[i] != ib.Shared[i] {
			t.Errorf("shared part %d differs: %q and %q", i, ia.Shared[i], ib.Shared[i])
		}
	}
	if strings.Contains(ia.Shared[1], "a.toml") || !strings.Contains(string(ia.Payload), "a.toml") {
		t.Errorf("the element's name is in its variables part, or not in its payload")
	}
}

// A spec that cannot be read is an error saying which part, never a spec.
func TestReadBuildSpecErrors(t *testing.T) {
	in := benchSpec("a.toml", 2).input()
	tests := []struct {
		name string
		spec job.Spec
		want string
	}{
		{"no parts", job.Spec{Payload: in.Payload}, "reading build spec: 0 shared parts, want at least 2"},
		{"cut payload", job.Spec{Payload: in.Payload[:len(in.Payload)-1], Shared: in.Shared}, "reading build spec: its payload: truncated or damaged"},
		{"payload left over", job.Spec{Payload: append(append([]byte{}, in.Payload...), 0), Shared: in.Shared}, "reading build spec: its payload: 1 bytes left over"},
		{"a part missing", job.Spec{Payload: in.Payload, Shared: in.Shared[:3]}, "reading build spec: its payload: 2 staged dependencies, and 1 shared parts for them"},
		{"damaged dependency", job.Spec{Payload: in.Payload, Shared: append(append([]string{}, in.Shared[:3]...), "\x05")}, "reading build spec: staged dependency 2: truncated or damaged"},
		{"damaged session", job.Spec{Payload: in.Payload, Shared: append([]string{"\x7f"}, in.Shared[1:]...)}, "reading build spec: its session part: truncated or damaged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readBuildSpec(tt.spec)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// The session's encoding and the job's decoding of a build spec with 15 staged
// dependencies (about the mean of bench/jobcost.sh's 2,000 elements), in the
// binary form and, for comparison, as JSON (the form before).
func BenchmarkJobSpecEncode(b *testing.B) {
	spec := benchSpec("e1999.toml", 15)
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = spec.input()
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkJobSpecDecode(b *testing.B) {
	spec := benchSpec("e1999.toml", 15)
	in := spec.input()
	js := job.Spec{Payload: in.Payload, Shared: in.Shared}
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := readBuildSpec(js); err != nil {
				b.Fatal(err)
			}
		}
	})
	data, _ := json.Marshal(spec)
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var s buildSpec
			if err := json.Unmarshal(data, &s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
