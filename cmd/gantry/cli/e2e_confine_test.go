package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostPathsNotSpliced: the host sandbox's paths live under the cache directory, which
// the user names; a name holding shell syntax or spaces must not run anything when a
// command uses %{install-root}, %{build-root} or %{sysroot}. The environment
// still sees the paths themselves.
func TestHostPathsNotSpliced(t *testing.T) {
	p := newE2EProject(t, map[string]string{
		"project.toml": "name = \"quote\"\n",
		"elements/app.toml": `kind = "manual"
[environment]
DEST = "%{install-root}"
[config]
build-commands = [
  'mkdir -p "%{install-root}/usr" && echo hi > "%{install-root}/usr/hi"',
  'test -d "%{build-root}" && test -d "%{sysroot}" && test "$DEST" = "%{install-root}"',
  'if test -e pwned; then echo "the cache directory name ran as a command"; exit 1; fi',
]
`,
	})
	p.cache = filepath.Join(filepath.Dir(p.cache), "c$(touch pwned) x`touch pwned`")
	if _, stderr, code := p.run("build", "--ui", "plain", "--sandbox", "host", "app.toml"); code != 0 {
		log, _, _ := p.run("artifact", "log", "app.toml")
		t.Fatalf("build failed (%d):\n%s\n%s", code, stderr, log)
	}
	out := p.scratch("out")
	p.mustRun(0, "artifact", "checkout", "app.toml", out)
	if b, err := os.ReadFile(filepath.Join(out, "usr", "hi")); err != nil || strings.TrimSpace(string(b)) != "hi" {
		t.Errorf("the artifact lacks usr/hi: %q, %v", b, err)
	}
}

// TestHostPathsSplicedWhenSafe: a cache directory whose path means nothing to the shell
// is spliced as it is, so a path in single quotes works as it always did.
func TestHostPathsSplicedWhenSafe(t *testing.T) {
	p := newE2EProject(t, map[string]string{
		"project.toml": "name = \"quote\"\n",
		"elements/app.toml": `kind = "manual"
[config]
build-commands = [
  "test -d '%{build-root}' && mkdir -p '%{install-root}/usr' && echo hi > '%{install-root}/usr/hi'",
]
`,
	})
	if _, stderr, code := p.run("build", "--ui", "plain", "--sandbox", "host", "app.toml"); code != 0 {
		log, _, _ := p.run("artifact", "log", "app.toml")
		t.Fatalf("build failed (%d):\n%s\n%s", code, stderr, log)
	}
}
