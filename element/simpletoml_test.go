package element

import (
	"reflect"
	"testing"

	"github.com/BurntSushi/toml"
)

// FuzzSimpleTOML holds simpleTOML to BurntSushi's decoder: whatever it decodes, the
// decoder decodes without error into the same values.
func FuzzSimpleTOML(f *testing.F) {
	for _, s := range simpleTOMLCases {
		f.Add(s.text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, ok := simpleTOML(text)
		if !ok {
			return
		}
		var want any
		if _, err := toml.Decode(text, &want); err != nil {
			t.Fatalf("decoded %#v, the decoder refuses it: %v", got, err)
		}
		if !reflect.DeepEqual(any(got), want) {
			t.Fatalf("decoded %#v, the decoder's %#v", got, want)
		}
	})
}

var simpleTOMLCases = []struct {
	text   string
	simple bool
}{
	{"kind = \"manual\"\ndepends = [\"a.toml\", \"b.toml\"]\n\n[config]\nbuild-commands = []\n", true},
	{"# c\nkind = 'stack' # x\n\tdescription=\"a \\\"b\\\" \\\\ \\t é\"\n[variables]\nx = \"1\"\n[ environment ]\nA = \"%{x}\"", true},
	{"depends = [\n  \"a.toml\",\n  \"b.toml\",\n]\n", true},
	{"x = ''\ny = \"\"\n", true},
	{"", true},
	{"kind = \"manual\"\r\n", false},
	{"a.b = \"x\"\n", false},
	{"\"a\" = \"x\"\n", false},
	{"a = 1\n", false},
	{"a = true\n", false},
	{"a = {b = \"c\"}\n", false},
	{"[[sources]]\nkind = \"local\"\n", false},
	{"[a.b]\n", false},
	{"a = \"x\"\na = \"y\"\n", false},
	{"[a]\n[a]\n", false},
	{"a = \"x\"\n[a]\n", false},
	{"a = \"\"\"x\"\"\"\n", false},
	{"a = '''x'''\n", false},
	{"a = \"\\u00e9\"\n", false},
	{"a = [\"x\", # c\n]\n", false},
	{"a = [\"x\" \"y\"]\n", false},
	{"a = \"x\" b = \"y\"\n", false},
	{"a = \"x\n", false},
	{"a = \"\x01\"\n", false},
	{"a = \"\xff\"\n", false},
	{"# \x7f\n", false},
	{"a = [[\"x\"]]\n", false},
	{"a =\n", false},
}

func TestSimpleTOML(t *testing.T) {
	for _, c := range simpleTOMLCases {
		got, ok := simpleTOML(c.text)
		if ok != c.simple {
			t.Errorf("%q: simple %v, want %v", c.text, ok, c.simple)
			continue
		}
		if !ok {
			continue
		}
		var want any
		if _, err := toml.Decode(c.text, &want); err != nil {
			t.Errorf("%q: the decoder refuses it: %v", c.text, err)
		} else if !reflect.DeepEqual(any(got), want) {
			t.Errorf("%q: %#v, the decoder's %#v", c.text, got, want)
		}
	}
}

// FuzzSimpleElementFile holds parseElementFile, which reads files in simpleTOML's subset
// without the decoder, to parseElementDecoded: the same parse, or the same error.
func FuzzSimpleElementFile(f *testing.F) {
	for _, s := range simpleElementFiles {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSimpleElementFile(t, data)
	})
}

func checkSimpleElementFile(t *testing.T, data []byte) {
	t.Helper()
	got, gotDoc, gotErr := parseElementFile(data, "elements/x.toml", optionScope{}, includeOrigin{})
	want, wantDoc, wantErr := parseElementDecoded(data, "elements/x.toml", optionScope{}, includeOrigin{})
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("%q: error %v, the decoder's %v", data, gotErr, wantErr)
	}
	if gotErr != nil {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: parsed %#v, the decoder's %#v", data, got, want)
	}
	if gotDoc.isDefined("if") != wantDoc.isDefined("if") || !reflect.DeepEqual(gotDoc.includes, wantDoc.includes) {
		t.Fatalf("%q: the documents differ", data)
	}
}

var simpleElementFiles = []string{
	"kind = \"manual\"\ndepends = [\"e000597.toml\", \"e004713.toml\"]\n\n[config]\nbuild-commands = []\n",
	"kind = \"manual\"\ndescription = \"d\"\nbuild-depends = [\"a.toml\"]\nruntime-depends = [\"b.toml\"]\npool = \"p\"\n" +
		"[variables]\nx = \"1\"\n[environment]\nA = \"%{x}\"\n[config]\nconfigure-commands = [\"./configure\"]\nbuild-commands = [\"make\", 'make install']\n",
	"kind = \"import\"\n[config]\nsource = \"files\"\ntarget = \"%{prefix}\"\n",
	"kind = \"stack\"\ndepends = [\"a.toml\", \"a.toml\"]\n",
	"kind = \"stack\"\ndepends = [\"../a.toml\"]\n",
	"kind = \"stak\"\n",
	"description = \"no kind\"\n",
	"kind = \"stack\"\nvariables = \"x\"\n",
	"kind = \"stack\"\n[config]\nx = \"1\"\n",
	"kind = \"manual\"\n[config]\nbuild-commands = \"make\"\n",
	"kind = \"manual\"\n[config]\nbuild-comands = [\"make\"]\n",
	"kind = \"manual\"\n[variables]\n\"bad name\" = \"x\"\n[environment]\nPATH = \"/bin\"\n",
	"kind = \"manual\"\n[variables]\nbad-name! = \"x\"\n",
	"kind = \"manual\"\n[environment]\nA = \"1\"\n\"B=\" = \"2\"\n",
	"kind = \"filter\"\nbuild-depends = [\"a.toml\", \"b.toml\"]\n",
	"kind = \"compose\"\n[config]\ninclude = [\"runtime\"]\n",
	"kinds = \"manual\"\n",
	"kind = \"manual\"\n[public]\n",
	"kind = \"manual\"\n[remote-execution]\n",
}

func TestSimpleElementFile(t *testing.T) {
	for _, s := range simpleElementFiles {
		checkSimpleElementFile(t, []byte(s))
	}
}

// Elements that set no commands, or one step to an empty list, share one Commands map
// of that shape; others have their own.
func TestSharedCommands(t *testing.T) {
	parse := func(text string) map[string][]string {
		pf, _, err := parseElementFile([]byte(text), "elements/x.toml", optionScope{}, includeOrigin{})
		if err != nil {
			t.Fatal(err)
		}
		return pf.Config.Commands
	}
	a := parse("kind = \"manual\"\n[config]\nbuild-commands = []\n")
	b := parse("kind = \"manual\"\ndepends = [\"x.toml\"]\n[config]\nbuild-commands = []\n")
	c := parse("kind = \"manual\"\n[config]\nbuild-commands = [\"make\"]\n")
	d := parse("kind = \"manual\"\n[config]\nbuild-commands = [\"make\"]\n")
	if reflect.ValueOf(a).UnsafePointer() != reflect.ValueOf(b).UnsafePointer() || len(a) != 1 || a["build-commands"] == nil {
		t.Errorf("two files with build-commands = []: %v and %v, not one map", a, b)
	}
	if reflect.ValueOf(c).UnsafePointer() == reflect.ValueOf(d).UnsafePointer() {
		t.Error("two files with commands share their map")
	}
	if got := sharedCommands(nil); got != nil {
		t.Errorf("no map shared as %v", got)
	}
}
