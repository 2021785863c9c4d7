package element

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/source"
)

// Each mistake in [aliases] or [[mirrors]] is an error at its line, saying what is wrong.
func TestAliasAndMirrorErrors(t *testing.T) {
	for _, tc := range []struct {
		name, project, want string
	}{
		{"alias name", "name = \"demo\"\n[aliases]\n\"g n u\" = \"https://ftp.gnu.org/gnu/\"\n",
			`project.toml:3: key "aliases.g n u": "g n u" is not an alias name: use letters, digits, '-' and '_', starting with a letter or digit`},
		{"empty prefix", "name = \"demo\"\n[aliases]\ngnu = \"\"\n",
			`project.toml:3: key "aliases.gnu": an alias needs a URL prefix, such as "https://ftp.gnu.org/gnu/"`},
		{"mirror without a name", "name = \"demo\"\naliases.gnu = \"https://ftp.gnu.org/gnu/\"\n[[mirrors]]\naliases.gnu = [\"http://m/\"]\n",
			"project.toml:3: mirror 1 has no name\nadd a line like name = \"internal\""},
		{"mirror twice", "name = \"demo\"\n[[mirrors]]\nname = \"a\"\n[[mirrors]]\nname = \"a\"\n",
			`project.toml:5: key "mirrors[1].name": a mirror named "a" is defined twice`},
		{"empty mirror prefix", "name = \"demo\"\naliases.gnu = \"https://ftp.gnu.org/gnu/\"\n[[mirrors]]\nname = \"a\"\naliases.gnu = [\"\"]\n",
			`project.toml:5: key "mirrors[0].aliases.gnu": an empty URL prefix`},
		{"unknown mirror key", "name = \"demo\"\n[[mirrors]]\nname = \"a\"\nurl = \"http://m/\"\n",
			"project.toml:4: unknown key \"url\" in [mirrors]\n    url = \"http://m/\"\nknown keys: name, aliases"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeProject(t, map[string]string{"project.toml": tc.project})
			_, err := loadProject(dir)
			if err == nil {
				t.Fatalf("loaded; want %q", tc.want)
			}
			if got := stripText(err); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// stripText is the error without the offending line, which the table leaves out unless
// it is the point.
func stripText(err error) string {
	if pe, ok := err.(*ProjectError); ok && pe.Msg != "unknown key \"url\" in [mirrors]" {
		q := *pe
		q.Text = ""
		return q.Error()
	}
	return err.Error()
}

// Loading expands a source's alias into Upstream and the mirrors' URLs into Mirrors, in
// the order UseMirrors set; the key keeps the url as written, so it is the same with
// any mirrors, any default mirror and any upstream prefix.
func TestAliasesResolveAndKeepTheKey(t *testing.T) {
	files := map[string]string{
		"project.toml": "name = \"demo\"\n[aliases]\ngnu = \"https://ftp.gnu.org/gnu/\"\n" +
			"[[mirrors]]\nname = \"near\"\n[mirrors.aliases]\ngnu = [\"http://near/gnu/\", \"http://near2/gnu/\"]\n",
		"elements/hello.toml": "kind = \"import\"\n[[sources]]\nkind = \"tar\"\nurl = \"gnu:hello/hello-2.12.tar.gz\"\n" +
			"ref = \"0000000000000000000000000000000000000000000000000000000000000000\"\n" +
			"[[sources]]\nkind = \"remote\"\nurl = \"https://example.com/x\"\n" +
			"ref = \"1111111111111111111111111111111111111111111111111111111111111111\"\n",
	}
	dir := writeProject(t, files)
	loadHello := func(user []source.Mirror, def string) *Element {
		t.Helper()
		p, err := loadProject(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.UseMirrors(user, def); err != nil {
			t.Fatal(err)
		}
		g, err := load(p, &Lock{}, []string{"hello.toml"})
		if err != nil {
			t.Fatal(err)
		}
		return g.Elements["hello.toml"]
	}
	e := loadHello(nil, "")
	s := e.Sources[0]
	if s.URL != "gnu:hello/hello-2.12.tar.gz" || s.Upstream != "https://ftp.gnu.org/gnu/hello/hello-2.12.tar.gz" ||
		!slices.Equal(s.Mirrors, []string{"http://near/gnu/hello/hello-2.12.tar.gz", "http://near2/gnu/hello/hello-2.12.tar.gz"}) {
		t.Errorf("resolved as %+v", s)
	}
	if u := e.Sources[1]; u.Upstream != "" || u.Mirrors != nil {
		t.Errorf("a url without an alias got %q, %q", u.Upstream, u.Mirrors)
	}
	key := e.Key

	far := []source.Mirror{{Name: "far", Aliases: map[string][]string{"gnu": {"http://far/"}}}}
	e = loadHello(far, "near")
	if want := []string{"http://near/gnu/hello/hello-2.12.tar.gz", "http://near2/gnu/hello/hello-2.12.tar.gz", "http://far/hello/hello-2.12.tar.gz"}; !slices.Equal(e.Sources[0].Mirrors, want) {
		t.Errorf("with the default mirror near: %q, want %q", e.Sources[0].Mirrors, want)
	}
	if e.Key != key {
		t.Errorf("the key changed with the mirrors: %s, was %s", e.Key, key)
	}
	e = loadHello(far, "")
	if got := e.Sources[0].Mirrors; len(got) != 3 || got[0] != "http://far/hello/hello-2.12.tar.gz" {
		t.Errorf("the user's mirrors come first: %q", got)
	}

	files["project.toml"] = "name = \"demo\"\n[aliases]\ngnu = \"https://ftpmirror.gnu.org/\"\n"
	dir = writeProject(t, files)
	if e = loadHello(nil, ""); e.Key != key {
		t.Errorf("the key changed with the alias's prefix: %s, was %s", e.Key, key)
	}

	p, _ := loadProject(dir)
	if err := p.UseMirrors(far, "fra"); err == nil || err.Error() != `no mirror is named "fra" (did you mean "far"?); mirrors: far` {
		t.Errorf("an unknown default mirror: %v", err)
	}
}

// A url whose prefix is a URL scheme, or not an alias name, is no alias; a word before
// ':' that the project does not define is an error at the url's line.
func TestUndefinedAlias(t *testing.T) {
	dir := writeProject(t, map[string]string{
		"project.toml": "name = \"demo\"\n[aliases]\ngnu = \"https://ftp.gnu.org/gnu/\"\n",
		"elements/ok.toml": "kind = \"import\"\n" +
			"[[sources]]\nkind = \"git\"\nurl = \"git@example.com:a/b.git\"\n" +
			"[[sources]]\nkind = \"git\"\nurl = \"ssh://example.com/a\"\n" +
			"[[sources]]\nkind = \"tar\"\nurl = \"file:app.tar.gz\"\n",
		"elements/bad.toml": "kind = \"import\"\n\n[[sources]]\nkind = \"tar\"\nurl = \"gnuu:hello.tar.gz\"\n",
	})
	if _, err := loadGraph(t, dir, "ok.toml"); err != nil {
		t.Errorf("urls without an alias: %v", err)
	}
	_, err := loadGraph(t, dir, "bad.toml")
	want := "elements/bad.toml:5: source 1: url \"gnuu:hello.tar.gz\" uses the alias \"gnuu\", which project.toml does not define (did you mean \"gnu\"?)\n" +
		"    url = \"gnuu:hello.tar.gz\"\n" +
		"define it under [aliases] in project.toml, or write a full URL (http:, https:, file:, git:, ssh:, ftp:, sftp:); aliases: gnu"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// The user configuration's mirrors and default mirror are read and checked.
func TestUserConfigMirrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte("default-mirror = \"near\"\n[[mirrors]]\nname = \"near\"\n[mirrors.aliases]\ngnu = [\"http://near/\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadUserConfig(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.DefaultMirror != "near" || len(c.Mirrors) != 1 || c.Mirrors[0].Aliases["gnu"][0] != "http://near/" {
		t.Errorf("read %+v", c)
	}
	if err := os.WriteFile(path, []byte("[[mirrors]]\naliases.gnu = [\"http://near/\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadUserConfig(path, true); err == nil || stripText(err) != path+":1: mirror 1 has no name\nadd a line like name = \"internal\"" {
		t.Errorf("a mirror without a name: %v", err)
	}
}

// An undefined alias in a source a [[if]] block added is an error at the url's line in
// the block.
func TestUndefinedAliasInABlock(t *testing.T) {
	app := "kind = \"import\"\n[[sources]]\nkind = \"tar\"\nurl = \"https://example.com/a.tar.gz\"\n" +
		"[[if]]\ncondition = \"not debug\"\n[[if.sources]]\nkind = \"tar\"\nurl = \"gnuu:hello.tar.gz\"\n"
	_, err := loadApp(t, app)
	want := "elements/app.toml:9: source 2: url \"gnuu:hello.tar.gz\" uses the alias \"gnuu\", which project.toml does not define\n" +
		"    url = \"gnuu:hello.tar.gz\"\n"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v\nwant %s…", err, want)
	}
}

// A [[if]] block that does not hold is checked for undefined aliases all the same, and
// again when project.toml's [aliases] change, though the parse cache remembers the file.
func TestUndefinedAliasInABlockThatDoesNotHold(t *testing.T) {
	app := "kind = \"import\"\n[[if]]\ncondition = \"debug\"\n[[if.sources]]\nkind = \"tar\"\nurl = \"gnu:hello.tar.gz\"\n"
	files := with(optionsProject, "elements/app.toml", app)
	files["project.toml"] += "[aliases]\ngnu = \"https://ftp.gnu.org/gnu/\"\n"
	dir := writeProject(t, files)
	cacheDir := t.TempDir()
	if _, _, err := loadWithOptions(dir, cacheDir); err != nil {
		t.Fatal(err)
	}
	project := strings.Replace(files["project.toml"], "gnu = ", "gnuu = ", 1)
	if err := os.WriteFile(filepath.Join(dir, "project.toml"), []byte(project), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := loadWithOptions(dir, cacheDir)
	want := "elements/app.toml:6: source 1: url \"gnu:hello.tar.gz\" uses the alias \"gnu\", which project.toml does not define (did you mean \"gnuu\"?)\n" +
		"    url = \"gnu:hello.tar.gz\"\n" +
		"define it under [aliases] in project.toml, or write a full URL (http:, https:, file:, git:, ssh:, ftp:, sftp:); aliases: gnuu"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
