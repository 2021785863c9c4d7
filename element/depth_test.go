package element

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// nestedInline is `key = {a={a=…1…}}` nested n deep, on line 2 of a file.
func nestedInline(key string, n int) string {
	return "# deep\n" + key + " = " + strings.Repeat("{a=", n) + "1" + strings.Repeat("}", n) + "\n"
}

// TestDeepTOMLIsRefusedBeforeDecoding: every TOML file gantry reads refuses nesting past
// maxTOMLDepth with file:line, quickly, where decoding 20,000 nested inline tables did not
// finish.
func TestDeepTOMLIsRefusedBeforeDecoding(t *testing.T) {
	deep := nestedInline("x", 20_000)
	cases := []struct {
		name, file string
		load       func(dir string) error
	}{
		{"element", "elements/app.toml", func(dir string) error { _, err := loadGraph(t, dir, "app.toml"); return err }},
		{"project", "project.toml", func(dir string) error { _, err := loadProject(dir); return err }},
		{"lock", LockFile, func(dir string) error { _, err := LoadLock(dir); return err }},
		{"user config", "config.toml", func(dir string) error {
			_, err := LoadUserConfig(filepath.Join(dir, "config.toml"), true)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"project.toml": "name = \"p\"\n", "elements/app.toml": "kind = \"stack\"\n"}
			files[c.file] = deep
			dir := writeProject(t, files)
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- c.load(dir) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("loading %s nested 20,000 deep did not finish in 20 s", c.file)
			}
			t.Logf("refused in %v", time.Since(start))
			var pe *ProjectError
			if !errors.As(err, &pe) || pe.Line != 2 || !strings.HasSuffix(pe.File, c.file) || len(pe.Error()) > 1000 || !strings.Contains(pe.Msg, "nested more than 64 levels") {
				t.Fatalf("got %v, want a ProjectError at %s:2 about the nesting", err, c.file)
			}
		})
	}
}

func TestTOMLDepth(t *testing.T) {
	cases := []struct {
		text string
		want int
	}{
		{"", 1},
		{"a = 1", 1},
		{"a.b.c = 1", 3},
		{"a = {b = {c = 1}}", 3},
		{"a = [[1], [2, [3]]]", 4},
		{"a = []", 2},
		{"[a.b]\nc = 1", 3},
		{"[a.b]\nc.d = {e = 1}", 5},
		{"[[a.b]]\nc = 1", 4},
		{"[ \"x.]\" . 'y[' ]\n", 3},
		{"a = \"[[[{{{\" # [[[[", 1},
		{"a = '''\n[[[\n''' \nb = \"\"\"\\\"\"\"[[[\"\"\"\"\"\nc = [1]", 2},
		{"a = [ # [[\n  1, # {\n  { b = 1 },\n]", 3},
		{"a = 1979-05-27 07:32:00Z\nb = [1979-05-27 07:32:00Z, 1.5e3]", 2},
		{"a = {\n  b = {c = 1},\n}", 3},
	}
	for _, c := range cases {
		if got, _ := tomlDepth([]byte(c.text), 1000); got != c.want {
			t.Errorf("tomlDepth(%q) = %d, want %d", c.text, got, c.want)
		}
	}
	// Each way of nesting is refused one level past the limit, not at the limit.
	ways := map[string]func(n int) string{
		"inline": func(n int) string { return nestedInline("x", n-1) },
		"array":  func(n int) string { return "x = " + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) },
		"dotted": func(n int) string { return strings.Repeat("a.", n-1) + "a = 1" },
		"header": func(n int) string { return "[" + strings.Repeat("a.", n-2) + "a]" },
	}
	for name, make := range ways {
		if _, line := tomlDepth([]byte(make(maxTOMLDepth)), maxTOMLDepth); line != 0 {
			t.Errorf("%s: refused at the limit", name)
		}
		if _, line := tomlDepth([]byte(make(maxTOMLDepth+1)), maxTOMLDepth); line == 0 {
			t.Errorf("%s: not refused one past the limit", name)
		}
	}
}

// tenMegabytesOfTOML is ordinary TOML, 10 MB of it, with brackets in strings and comments.
func tenMegabytesOfTOML() []byte {
	var b strings.Builder
	for b.Len() < 10<<20 {
		b.WriteString("[[sources]]\nkind = \"tar\" # a comment [\nurl = \"https://example.com/{x}.tar\"\nlist = [[1, 2], {a = 'b'}, \"\"\"\nmulti [ line\n\"\"\"]\n")
	}
	return []byte(b.String())
}

// TestTOMLDepthTenMegabytes: brackets in strings and comments of a large file are not
// counted (the scan's speed is measured by BenchmarkTOMLDepth, not asserted here).
func TestTOMLDepthTenMegabytes(t *testing.T) {
	if level, line := tomlDepth(tenMegabytesOfTOML(), maxTOMLDepth); level != 5 || line != 0 {
		t.Fatalf("level %d line %d, want 5 and not refused", level, line)
	}
}

// BenchmarkTOMLDepth scans 10 MB of ordinary TOML: what every file gantry reads pays
// before it is decoded.
func BenchmarkTOMLDepth(b *testing.B) {
	data := tenMegabytesOfTOML()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		tomlDepth(data, maxTOMLDepth)
	}
}

// FuzzTOMLDepth: on every input BurntSushi/toml decodes, the measured level is never more
// than the decoded value's depth (so a valid file within the limit is never refused) and
// at least half of it (so deep nesting is always caught).
func FuzzTOMLDepth(f *testing.F) {
	f.Add("a.b = {c = [1, {d = 'x'}]}\n[e]\nf = \"\"\"g\"\"\"\n[[h.i]]\nj = 1")
	f.Add("[[a]]\n[[a.b]]\n[a.b.c]\nd = [[[]]]")
	f.Add("\"a.b\" = '''\n[[['''\nc = { d.e = 1, f = [ # x\n ] }")
	f.Fuzz(func(t *testing.T, text string) {
		level, _ := tomlDepth([]byte(text), 1<<30)
		var v map[string]any
		if _, err := toml.Decode(text, &v); err != nil {
			return
		}
		d := valueDepth(reflect.ValueOf(v))
		if level > d || 2*level < d {
			t.Fatalf("measured level %d, decoded depth %d", level, d)
		}
	})
}

// valueDepth is a decoded TOML value's depth: a scalar 0, a table or array 1 + its deepest.
func valueDepth(v reflect.Value) int {
	if v.Kind() == reflect.Interface {
		v = v.Elem()
	}
	deepest := 0
	switch v.Kind() {
	case reflect.Map:
		for _, k := range v.MapKeys() {
			deepest = max(deepest, valueDepth(v.MapIndex(k)))
		}
	case reflect.Slice:
		for i := range v.Len() {
			deepest = max(deepest, valueDepth(v.Index(i)))
		}
	default:
		return 0
	}
	return 1 + deepest
}

// tomlDepth is scanDepth's answer: the deepest level seen, and the line of the first
// level over limit (0: none).
func tomlDepth(text []byte, limit int) (level, line int) {
	s := scanDepth(text, limit)
	return s.deepest, s.over
}
