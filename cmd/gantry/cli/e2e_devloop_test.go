package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/job"
)

// build --trace writes a Chrome trace: JSON, one span per job, and never more build
// spans at once than there are builders; the summary names the critical path.
func TestE2EBuildTrace(t *testing.T) {
	t.Parallel()
	files := map[string]string{"project.toml": projectTOML("top.toml")}
	var leaves []string
	for i := range 5 {
		name := fmt.Sprintf("leaf%d.toml", i)
		leaves = append(leaves, name)
		files["elements/"+name] = manualElement(nil, "sleep 0.1", "echo "+name+" > %{install-root}/"+name)
	}
	files["elements/top.toml"] = manualElement(leaves, "echo top > %{install-root}/top")
	p := newE2EProject(t, files)
	trace := p.scratch("trace.json")
	_, stderr := p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host", "--builders", "2", "--trace", trace)
	if !strings.Contains(stderr, "Critical path: build leaf") || !strings.Contains(stderr, "→ build top.toml") {
		t.Errorf("summary names no critical path ending in top.toml's build:\n%s", stderr)
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			Ts, Dur       int64
			Pid, Tid      int
			Args          map[string]any
		}
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the trace is not JSON: %v\n%s", err, data)
	}
	type edge struct {
		t     int64
		delta int
	}
	var edges []edge
	jobs := map[string]int{}
	for _, e := range doc.TraceEvents {
		if e.Ph != "X" || e.Cat != "build" {
			continue
		}
		jobs[e.Name]++
		if e.Tid < 1 || e.Tid > 2 {
			t.Errorf("%s built on slot %d, with 2 builders", e.Name, e.Tid)
		}
		edges = append(edges, edge{e.Ts, +1}, edge{e.Ts + e.Dur, -1})
	}
	if len(jobs) != 6 {
		t.Errorf("build spans for %v, want the 6 elements", jobs)
	}
	for name, n := range jobs {
		if n != 1 {
			t.Errorf("%d build spans for %s, want 1", n, name)
		}
	}
	// Ends before starts at the same instant: touching spans do not overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if a.t != b.t {
			return int(a.t - b.t)
		}
		return a.delta - b.delta
	})
	running, most := 0, 0
	for _, e := range edges {
		running += e.delta
		most = max(most, running)
	}
	if most > 2 {
		t.Errorf("%d build spans overlap, with 2 builders", most)
	}
}

// explain names the cause of each kind of change, follows a dependency chain down to
// the element whose own input changed, and has nothing to say once the change is reverted
// (the old key, and its artifact, are back).
func TestE2EExplain(t *testing.T) {
	t.Parallel()
	upstream := filepath.Join(t.TempDir(), "data.txt")
	content := []byte("upstream data\n")
	if err := os.WriteFile(upstream, content, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	ref := hex.EncodeToString(sum[:])
	mid := func(ref, cmd string) string {
		return fmt.Sprintf("kind = \"manual\"\ndepends = [\"base.toml\"]\n[[sources]]\nkind = \"remote\"\nurl = %q\nref = %q\n"+
			"[config]\nbuild-commands = [%q]\n", "file://"+upstream, ref, cmd)
	}
	base := func(prefix string) string {
		return "kind = \"manual\"\n[variables]\nprefix = \"" + prefix + "\"\n[[sources]]\nkind = \"local\"\npath = \"files/base\"\n" +
			"[config]\nbuild-commands = [\"mkdir -p %{install-root}%{bindir}\", \"cp a.c b.c %{install-root}%{bindir}/\"]\n"
	}
	p := newE2EProject(t, map[string]string{
		"project.toml":       projectTOML("top.toml"),
		"files/base/a.c":     "int a;\n",
		"files/base/b.c":     "int b;\n",
		"elements/base.toml": base("/usr"),
		"elements/mid.toml":  mid(ref, "cp data.txt %{install-root}/"),
		"elements/top.toml":  manualElement([]string{"mid.toml"}, "true"),
	})
	explain := func(want ...string) {
		t.Helper()
		out, _ := p.mustRun(0, "explain")
		got := strings.Split(strings.TrimSpace(out), "\n")
		if strings.TrimSpace(out) == "" {
			got = nil
		}
		if !slices.Equal(got, want) {
			t.Errorf("explain says\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	explain("base.toml: never built", "mid.toml: never built", "top.toml: never built")
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host")
	explain()

	p.write("files/base/b.c", "int b = 2;\n")
	explain("base.toml: local file b.c changed, in source 1 (local files/base)",
		"mid.toml: dependency base.toml changed: local file b.c changed, in source 1 (local files/base)",
		"top.toml: dependency base.toml (via mid.toml) changed: local file b.c changed, in source 1 (local files/base)")
	p.write("files/base/b.c", "int b;\n")
	explain()

	// bindir = "%{prefix}/bin" changes with prefix: the edited variable is named.
	p.write("elements/base.toml", base("/opt"))
	explain(`base.toml: variable prefix changed: "/usr" → "/opt"`,
		`mid.toml: dependency base.toml changed: variable prefix changed: "/usr" → "/opt"`,
		`top.toml: dependency base.toml (via mid.toml) changed: variable prefix changed: "/usr" → "/opt"`)
	p.write("elements/base.toml", base("/usr"))

	other := strings.Repeat("ab", 32)
	p.write("elements/mid.toml", mid(other, "cp data.txt %{install-root}/"))
	src := "source 1 (remote file://" + upstream + ")"
	explain("mid.toml: "+src+" ref changed: "+ref+" → "+other,
		"top.toml: dependency mid.toml changed: "+src+" ref changed: "+ref+" → "+other)

	p.write("elements/mid.toml", mid(ref, "cp data.txt %{install-root}/copy.txt"))
	out, _ := p.mustRun(0, "explain", "--format", "json", "top.toml")
	var xs []struct {
		Element, Reason string
		Chain           []string
		Cause           struct{ What, Name, Old, New string }
	}
	if err := json.Unmarshal([]byte(out), &xs); err != nil {
		t.Fatalf("explain --format json: %v\n%s", err, out)
	}
	if len(xs) != 2 || xs[1].Element != "top.toml" || xs[1].Reason != "dependency" || !slices.Equal(xs[1].Chain, []string{"mid.toml"}) ||
		xs[1].Cause.What != "command" || xs[1].Cause.Name != "build-commands" || !strings.HasSuffix(xs[1].Cause.New, "/copy.txt") {
		t.Errorf("explain --format json: %+v, want mid.toml's build-commands as top.toml's cause", xs)
	}
	// build --explain says the same before it builds; then nothing is left to explain.
	_, stderr := p.mustRun(0, "build", "--explain", "--ui", "plain", "--sandbox", "host")
	if want := `explain: top.toml: dependency mid.toml changed: config build-commands changed: "cp data.txt `; !strings.Contains(stderr, want) {
		t.Errorf("build --explain does not say %q:\n%s", want, stderr)
	}
	explain()
}

// requireTools skips the test when one of tools is missing, or fails it on CI.
func requireTools(t *testing.T, pkgs string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing: install %s", tool, pkgs)
			}
			t.Skipf("%s is missing: install %s to run this test (CI=true makes this a failure)", tool, pkgs)
		}
	}
}

// cMakefile builds prog from every src/*.c, printing one "CC" line per compilation.
const cMakefile = `SRCS := $(sort $(wildcard src/*.c))
OBJS := $(SRCS:.c=.o)
prog: $(OBJS)
	@echo "LINK $@"
	@$(CC) -o $@ $(OBJS)
%.o: %.c
	@echo "CC $<"
	@$(CC) -c -o $@ $<
`

// A workspace build is incremental: the build directory is kept, so after an edit of
// one file of a generated C project make compiles that one file again, not all of them.
func TestE2EWorkspaceIncrementalCBuild(t *testing.T) {
	t.Parallel()
	requireTools(t, "make and gcc", "make", "cc")
	const n = 12
	files := map[string]string{
		"project.toml":     projectTOML("prog.toml"),
		"files/c/Makefile": cMakefile,
		"elements/prog.toml": "kind = \"manual\"\n[[sources]]\nkind = \"local\"\npath = \"files/c\"\n[config]\n" +
			"build-commands = [\"make -j%{max-jobs}\"]\ninstall-commands = [\"mkdir -p %{install-root}/bin\", \"cp prog %{install-root}/bin/\"]\n",
	}
	for i := range n {
		files[fmt.Sprintf("files/c/src/f%02d.c", i)] = fmt.Sprintf("int f%02d(void) { return %d; }\n", i, i)
	}
	files["files/c/src/main.c"] = "int main(void) { return 0; }\n"
	p := newE2EProject(t, files)
	p.mustRun(0, "workspace", "open", "prog.toml")
	ws := filepath.Join(p.root, "workspaces", "prog")
	compiles := func() []string {
		t.Helper()
		p.mustRun(0, "build", "--ui", "plain", "--sandbox", "host")
		stamped, _ := p.mustRun(0, "artifact", "log", "prog.toml")
		lines := strings.Split(stamped, "\n")
		for i, l := range lines {
			lines[i] = job.TrimLogStamp(l)
		}
		log := strings.Join(lines, "\n")
		// The log's header names the element and key, and each command step its duration.
		for _, re := range []string{`(?m)^element: prog\.toml, key: [0-9a-f]{64}, project: e2e$`,
			`(?m)^building from workspace \S+/workspaces/prog in `, `(?m)^build-commands done in \d`, `(?m)^install-commands done in \d`} {
			if !regexp.MustCompile(re).MatchString(log) {
				t.Errorf("the build log does not match %s:\n%s", re, log)
			}
		}
		return regexp.MustCompile(`(?m)^CC (\S+)$`).FindAllString(log, -1)
	}
	if got := compiles(); len(got) != n+1 {
		t.Fatalf("first build compiled %d files, want %d: %q", len(got), n+1, got)
	}
	if err := os.WriteFile(filepath.Join(ws, "src", "f03.c"), []byte("int f03(void) { return 33; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := compiles(); !slices.Equal(got, []string{"CC src/f03.c"}) {
		t.Errorf("after editing f03.c the build compiled %q, want only src/f03.c", got)
	}
	// A removed file is removed from the kept build directory too.
	if err := os.Remove(filepath.Join(ws, "src", "f05.c")); err != nil {
		t.Fatal(err)
	}
	if got := compiles(); len(got) != 0 {
		t.Errorf("after removing f05.c the build compiled %q, want nothing (only a link)", got)
	}
	out := p.scratch("files")
	p.mustRun(0, "artifact", "checkout", "prog.toml", out)
	if _, err := os.Stat(filepath.Join(out, "bin", "prog")); err != nil {
		t.Errorf("the workspace build installed no prog: %v", err)
	}
}

// Under bwrap a workspace element builds in its kept build directory, mounted
// read-write at %{build-root}: what one build leaves there, the next one finds.
func TestE2EWorkspaceBwrap(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	p := newE2EProject(t, map[string]string{
		"project.toml":          projectTOML("app.toml"),
		"elements/sysroot.toml": "kind = \"import\"\n[[sources]]\nkind = \"local\"\npath = \"files/sysroot\"\n",
		"files/app/src.txt":     "one\n",
		"elements/app.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[[sources]]\nkind = \"local\"\npath = \"files/app\"\n[config]\nbuild-commands = " + tomlList(
			"if test -f stamp; then echo incremental > %{install-root}/mode; else echo fresh > %{install-root}/mode; fi",
			"touch stamp", "cat src.txt > %{install-root}/out", "pwd > %{install-root}/pwd") + "\n",
	})
	writeBusyboxSysroot(t, filepath.Join(p.root, "files", "sysroot"), "sh", "cat", "touch", "test", "echo", "pwd")
	p.mustRun(0, "workspace", "open", "app.toml")
	read := func(name string) string {
		t.Helper()
		out := p.scratch("out-" + name)
		os.RemoveAll(out)
		p.mustRun(0, "artifact", "checkout", "app.toml", out)
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	_, stderr := p.mustRun(0, "build", "--ui", "plain", "--sandbox", "bwrap")
	if !regexp.MustCompile(`\[build:app\.toml\]\s+START\s+from workspace `).MatchString(stderr) {
		t.Errorf("plain output does not say app.toml builds from its workspace:\n%s", stderr)
	}
	if got := read("mode") + " " + read("pwd"); got != "fresh /gantry/build" {
		t.Errorf("first build: %q, want a fresh build in /gantry/build", got)
	}
	p.write("workspaces/app/src.txt", "two\n")
	p.mustRun(0, "build", "--ui", "plain", "--sandbox", "bwrap")
	if got := read("mode") + " " + read("out"); got != "incremental two" {
		t.Errorf("second build: %q, want an incremental build of the edit", got)
	}
}
