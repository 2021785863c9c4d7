package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/job"
)

// A workspace's build directory is configured again when it is not the one that was
// configured (removed behind gantry's back, its record left) and when the sandbox
// changes; in between, builds only build.
func TestE2EWorkspaceConfiguresAgain(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	p := newE2EProject(t, map[string]string{
		"project.toml":          projectTOML("app.toml"),
		"elements/sysroot.toml": "kind = \"import\"\n[[sources]]\nkind = \"local\"\npath = \"files/sysroot\"\n",
		"files/app/src.txt":     "0\n",
		"elements/app.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[[sources]]\nkind = \"local\"\npath = \"files/app\"\n[config]\n" +
			"configure-commands = [\"echo configured >> configure.log\"]\n" +
			"build-commands = " + tomlList("cat configure.log > %{install-root}/configured", "cat src.txt > %{install-root}/src") + "\n",
	})
	writeBusyboxSysroot(t, filepath.Join(p.root, "files", "sysroot"), "sh", "cat", "echo")
	p.mustRun(0, "workspace", "open", "app.toml")
	edit := 0
	build := func(sandbox, want string) {
		t.Helper()
		edit++
		p.write("workspaces/app/src.txt", strings.Repeat("x", edit)+"\n") // a new key: a build
		p.mustRun(0, "build", "--ui", "plain", "--sandbox", sandbox, "app.toml")
		stamped, _ := p.mustRun(0, "artifact", "log", "app.toml")
		var lines []string
		for _, l := range strings.Split(stamped, "\n") {
			if l = job.TrimLogStamp(l); strings.HasPrefix(l, "configure-commands: ") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "configure-commands: "+want) {
			t.Errorf("build %d (%s): the log says %q, want one line starting %q", edit, sandbox, lines, "configure-commands: "+want)
		}
	}
	build("host", "the workspace's build directory is not configured (")
	build("host", "skipped: ")
	kept := filepath.Join(p.cache, "workspaces", "e2e", "app")
	if _, err := os.Stat(filepath.Join(kept, "configured.json")); err != nil {
		t.Fatalf("no record beside the kept build directory: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(kept, "build")); err != nil {
		t.Fatal(err)
	}
	build("host", "the workspace's build directory is not the one that was configured")
	build("host", "skipped: ")
	build("bwrap", "running again: the sandbox changed (bwrap, configured under host)")
	build("bwrap", "skipped: ")
}
