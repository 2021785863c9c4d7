package element

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// FuzzLoadElement loads arbitrary bytes as an element file. Whatever the input, loading
// returns a graph or a *ProjectError (exit 2 at the CLI, with the file named), never
// panics, and never reads outside the project.
func FuzzLoadElement(f *testing.F) {
	f.Add([]byte("kind = \"manual\"\n[config]\nbuild-commands = [\"make %{make-args}\"]\n"))
	f.Add([]byte("kind = \"import\"\n[[sources]]\nkind = \"local\"\npath = \"files\"\n[config]\ntarget = \"%{prefix}\"\n"))
	dir := f.TempDir()
	files := filepath.Join(dir, "files")
	if err := os.MkdirAll(filepath.Join(dir, "elements"), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.MkdirAll(files, 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "a"), []byte("a"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "elements", "dep.toml"), []byte("kind = \"stack\"\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	p := &Project{Root: dir, Name: "fuzz", ElementPath: "elements", Pools: map[string]int{"p": 1}}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, "elements", "app.toml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := load(p, &Lock{Entries: map[string][]string{}}, []string{"app.toml"})
		if err != nil {
			var pe *ProjectError
			if !errors.As(err, &pe) {
				t.Fatalf("load error is not a ProjectError: %T %v", err, err)
			}
			return
		}
		e := g.Elements["app.toml"]
		for _, paths := range []Paths{keyPaths(), {BuildRoot: "/b", InstallRoot: "/i", Sysroot: "/s", MaxJobs: "2"}} {
			r, err := e.Resolve(p, paths)
			if err != nil {
				t.Fatalf("resolves at load but not with other paths: %v", err)
			}
			if leavesRoot(r.Source) || leavesRoot(r.Target) {
				t.Fatalf("loaded with config.source %q, config.target %q", r.Source, r.Target)
			}
		}
	})
}

// FuzzExpand expands arbitrary variable definitions ("name=value" lines) and a string.
// Expansion terminates quickly, never panics, is deterministic, and never returns a value
// over maxExpandedSize.
func FuzzExpand(f *testing.F) {
	f.Add("a=%{b}%{b}\nb=%{c}%{c}\nc=xyz", "run %{a} %{prefix}")
	f.Add("a=%{a}", "%{a}")
	f.Add("a=%{", "x %{abc")
	fixed := map[string]string{"build-root": "/b", "install-root": "/i", "sysroot": "/", "max-jobs": "4"}
	f.Fuzz(func(t *testing.T, defs, s string) {
		layer := map[string]string{}
		for _, line := range strings.Split(defs, "\n") {
			if name, value, ok := strings.Cut(line, "="); ok {
				layer[name] = value
			}
		}
		expand := func() (string, error) { return NewVariables(fixed, layer).Expand(s) }
		out, err := expand()
		if len(out) > maxExpandedSize {
			t.Fatalf("expanded to %d bytes", len(out))
		}
		if err == nil && !strings.Contains(s, "%{") && out != s {
			t.Fatalf("a string without references changed: %q -> %q", s, out)
		}
		out2, err2 := expand()
		if out != out2 || (err == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %q, %v then %q, %v", out, err, out2, err2)
		}
	})
}

// FuzzPlainElementFile holds parseElement's fast path to the decoder's: whenever an
// element file decoded as plain values is accepted by plainElementFile, decoding it into
// elementFile succeeds and gives the same fields and the same source and config tables.
func FuzzPlainElementFile(f *testing.F) {
	f.Add([]byte("kind = \"manual\"\ndepends = [\"a.toml\", \"b.toml\"]\n[config]\nbuild-commands = []\n"))
	f.Add([]byte("kind = \"import\"\ndescription = \"d\"\npool = \"p\"\nbuild-depends = []\nruntime-depends = [\"c.toml\"]\n" +
		"[variables]\nx = \"1\"\n[environment]\nA = \"%{x}\"\n[[sources]]\nkind = \"local\"\npath = \"files\"\n" +
		"[[sources]]\nkind = \"tar\"\nurl = \"https://x/y.tgz\"\nstrip-level = 2\n[config]\ntarget = \"%{prefix}\"\n"))
	f.Add([]byte("kind = \"stack\"\nsources = [{kind = \"local\", path = \"p\"}]\nvariables = {}\n"))
	f.Add([]byte("kind = \"stack\"\ndepends = [1]\n"))
	f.Add([]byte("kind = \"stack\"\nvariables = \"x\"\nconfig = 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var plain any
		doc, err := decodeTOMLBytes(data, "x.toml", &plain)
		if err != nil {
			return
		}
		var got elementFile
		var sources []any
		var config, public any
		var blocks []any
		if !plainElementFile(plain, &got, &sources, &config, &blocks, &public) {
			return
		}
		var want elementFile
		doc, err = decodeTOMLBytes(data, "x.toml", &want)
		if err != nil {
			t.Fatalf("plain values accepted, the decoder refuses them: %v", err)
		}
		if len(sources) != len(want.Sources) {
			t.Fatalf("%d sources, the decoder's %d", len(sources), len(want.Sources))
		}
		for i, p := range want.Sources {
			tp, err := doc.table("s", p)
			if err != nil {
				t.Fatalf("source %d: %v", i, err)
			}
			if tg, _ := doc.table("s", sources[i]); !reflect.DeepEqual(tg.m, tp.m) {
				t.Fatalf("source %d: %#v, the decoder's %#v", i, tg.m, tp.m)
			}
		}
		if doc.md.IsDefined("config") {
			tp, err := doc.table("config", want.Config)
			if err != nil {
				t.Fatalf("config: %v", err)
			}
			if tg, _ := doc.table("config", config); !reflect.DeepEqual(tg.m, tp.m) {
				t.Fatalf("config: %#v, the decoder's %#v", tg.m, tp.m)
			}
		}
		if len(blocks) != len(want.If) {
			t.Fatalf("%d [[if]] blocks, the decoder's %d", len(blocks), len(want.If))
		}
		got.Sources, got.Config, want.Sources, want.Config = nil, toml.Primitive{}, nil, toml.Primitive{}
		got.If, want.If = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("plain values read as %#v, the decoder's %#v", got, want)
		}
	})
}
