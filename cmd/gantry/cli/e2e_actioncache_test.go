package cli

// End-to-end tests of the cache-only mode: an action-cache service without an
// execution service. Builds run here under bwrap, described as the Actions a
// remote build sends; Bazel's remote worker is the action cache and CAS (it
// stores successes only), and the in-process fake of internal/testreapi shows
// what the worker cannot (every call; a server that refuses updates).
//
// A build under bwrap cannot write to the host outside its work directory,
// which goes with the job, so what proves that nothing built is a token each
// build draws from /proc/sys/kernel/random/uuid into its artifact: a second
// build would draw another.

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/testreapi"
	"github.com/gantry-build/gantry/internal/testtree"
)

// cacheOnlyProjectTOML is a project.toml whose builds look up and record their
// results in the action cache at url, described with wrap = "bwrap" as a build
// on Bazel's worker is.
func cacheOnlyProjectTOML(url string, targets ...string) string {
	return projectTOML(targets...) + "\n[remote-execution]\nwrap = \"bwrap\"\n[remote-execution.action-cache-service]\nurl = \"" + url + "\"\n"
}

// tokenChain is three manual elements TAG0 ← TAG1 ← TAG2 on the sysroot (TAG0
// with local sources): each writes its dependency's out.txt and its own name
// into its out.txt, a random token, and "building TAGn" on stdout.
func tokenChain(tag string) map[string]string {
	files := map[string]string{"files/src/hello.txt": "hello from " + tag + "\n"}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("%s%d", tag, i)
		dir := "%{install-root}/share/" + name
		cmds := []string{"mkdir -p " + dir}
		s := "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n"
		if i > 0 {
			prev := fmt.Sprintf("%s%d", tag, i-1)
			s += "depends = [\"" + prev + ".toml\"]\n"
			cmds = append(cmds, "cat /share/"+prev+"/out.txt >> "+dir+"/out.txt")
		} else {
			s += "[[sources]]\nkind = \"local\"\npath = \"files/src\"\n"
			cmds = append(cmds, "cp hello.txt "+dir+"/hello.txt")
		}
		cmds = append(cmds, "echo "+name+" >> "+dir+"/out.txt", "cat /proc/sys/kernel/random/uuid > "+dir+"/token", "echo building "+name)
		files["elements/"+name+".toml"] = s + "[config]\nbuild-commands = " + tomlList(cmds...) + "\n"
	}
	return files
}

// actionOf is the action digest a log line of re names (its first group).
func actionOf(t *testing.T, re *regexp.Regexp, log, what string) string {
	t.Helper()
	m := re.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("%s: the log does not match %s:\n%s", what, re, log)
	}
	return m[1]
}

var (
	acMissLine     = regexp.MustCompile(`action cache grpc://[0-9.:]+: no result for action ([0-9a-f]{64}/\d+): building here; a success is recorded there`)
	acRecordLine   = regexp.MustCompile(`action cache grpc://[0-9.:]+: recorded the result of action ([0-9a-f]{64}/\d+)\n`)
	acHitLine      = regexp.MustCompile(`action cache grpc://[0-9.:]+: it has the result of action ([0-9a-f]{64}/\d+) \(from gantry on [^)]+\): nothing builds here`)
	remoteHitLine  = regexp.MustCompile(`remote build: the action cache had action ([0-9a-f]{64}/\d+): nothing ran`)
	remoteRanLine  = regexp.MustCompile(`remote build: action ([0-9a-f]{64}/\d+) ran on `)
	acHitByRemote  = regexp.MustCompile(`action cache grpc://[0-9.:]+: it has the result of action ([0-9a-f]{64}/\d+) \(from a client that names no worker\): nothing builds here`)
	localBuildLine = regexp.MustCompile(`\] sandbox: bwrap \(`)
)

// checkout checks out el and its dependencies and reads the tree.
func checkoutAll(t *testing.T, p *e2eProject, el, name string) map[string]string {
	t.Helper()
	dir := filepath.Join(p.tmp, name)
	p.mustRun(0, "artifact", "checkout", "--deps", "all", el, dir)
	return testtree.Read(t, dir)
}

func TestE2EActionCacheOnBazelWorker(t *testing.T) {
	t.Parallel()
	worker := startRemoteWorker(t, 2)

	// A clean cache builds here under bwrap and records each result; a second
	// clean cache builds nothing: the action cache answers, the recorded
	// stdout is in the log, and the artifacts are the first's file by file,
	// tokens included.
	t.Run("record then hit", func(t *testing.T) {
		t.Parallel()
		files := tokenChain("rec")
		first := newRemoteProject(t, nil, files, "rec2.toml")
		first.write("project.toml", cacheOnlyProjectTOML(worker.URL(), "rec2.toml"))
		first.runLong(0, "build", "--ui", "plain")
		actions := map[string]string{}
		for i := 0; i < 3; i++ {
			el := fmt.Sprintf("rec%d.toml", i)
			log, _ := first.mustRun(0, "artifact", "log", el)
			if !localBuildLine.MatchString(log) || !strings.Contains(log, "] + echo building rec") {
				t.Errorf("%s did not build here under bwrap; its log:\n%s", el, log)
			}
			actions[el] = actionOf(t, acMissLine, log, el)
			if got := actionOf(t, acRecordLine, log, el); got != actions[el] {
				t.Errorf("%s recorded action %s, looked up %s", el, got, actions[el])
			}
		}
		want := checkoutAll(t, first, "rec2.toml", "out")

		second := newRemoteProject(t, nil, files, "rec2.toml")
		second.write("project.toml", cacheOnlyProjectTOML(worker.URL(), "rec2.toml"))
		second.runLong(0, "build", "--ui", "plain")
		for i := 0; i < 3; i++ {
			el := fmt.Sprintf("rec%d.toml", i)
			log, _ := second.mustRun(0, "artifact", "log", el)
			if got := actionOf(t, acHitLine, log, el); got != actions[el] {
				t.Errorf("%s: the action cache answered for action %s, want %s", el, got, actions[el])
			}
			if strings.Contains(log, "sandbox: ") || strings.Contains(log, "] + ") || acRecordLine.MatchString(log) {
				t.Errorf("%s ran a command here or recorded again; its log:\n%s", el, log)
			}
			if !strings.Contains(log, fmt.Sprintf("building rec%d\n", i)) {
				t.Errorf("%s's log lacks the recorded stdout %q:\n%s", el, fmt.Sprintf("building rec%d", i), log)
			}
		}
		if d := testtree.Diff(want, checkoutAll(t, second, "rec2.toml", "out")); d != "" {
			t.Errorf("the artifacts from the action cache differ from the build's (want: first, got: second):\n%.4000s", d)
		}
		if !strings.HasPrefix(want["share/rec2/out.txt"], "file:rec0\nrec1\nrec2\n") || !strings.HasPrefix(want["share/rec0/token"], "file:") {
			t.Errorf("rec2's out.txt is %q and rec0's token %q: want its dependencies' names and a token", want["share/rec2/out.txt"], want["share/rec0/token"])
		}
	})

	// A cache-only build's record is a fully remote build's action cache hit
	// (the same action digest), and a remote build's result a cache-only
	// build's hit; the second build's artifacts are the first's, tokens too.
	for _, order := range []struct {
		tag               string
		remoteFirst       bool
		firstRe, secondRe *regexp.Regexp
	}{
		{"shr", false, acRecordLine, remoteHitLine},
		{"rev", true, remoteRanLine, acHitByRemote},
	} {
		name := "cache-only then remote"
		if order.remoteFirst {
			name = "remote then cache-only"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			files := tokenChain(order.tag)
			target := order.tag + "2.toml"
			only := newRemoteProject(t, nil, files, target)
			only.write("project.toml", cacheOnlyProjectTOML(worker.URL(), target))
			full := newRemoteProject(t, worker, files, target)
			first, second := only, full
			if order.remoteFirst {
				first, second = full, only
			}
			first.runLong(0, "build", "--ui", "plain")
			second.runLong(0, "build", "--ui", "plain")
			for i := 0; i < 3; i++ {
				el := fmt.Sprintf("%s%d.toml", order.tag, i)
				a, _ := first.mustRun(0, "artifact", "log", el)
				b, _ := second.mustRun(0, "artifact", "log", el)
				if x, y := actionOf(t, order.firstRe, a, "first "+el), actionOf(t, order.secondRe, b, "second "+el); x != y {
					t.Errorf("%s: the second build's hit is action %s, the first build's %s", el, y, x)
				}
				if strings.Contains(b, "sandbox: ") {
					t.Errorf("%s built here the second time; its log:\n%s", el, b)
				}
			}
			if d := testtree.Diff(checkoutAll(t, first, target, "out"), checkoutAll(t, second, target, "out")); d != "" {
				t.Errorf("the second build's artifacts differ from the first's (want: first, got: second):\n%.4000s", d)
			}
		})
	}
}

// A failing build is not recorded: the fake, which keeps whatever it is sent,
// gets no UpdateActionResult, and the failure is the element's as locally.
func TestE2EActionCacheFailureNotRecorded(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	f := testreapi.StartFake(t, testreapi.FakeOptions{RequireMetadata: true})
	p := newRemoteProject(t, nil, map[string]string{
		"elements/bad.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = " + tomlList("mkdir -p %{install-root}/x", "exit 3") + "\n",
	}, "bad.toml")
	p.write("project.toml", cacheOnlyProjectTOML("grpc://"+f.Addr, "bad.toml"))
	_, stderr := p.runLong(1, "build", "--ui", "plain")
	if want := "bad.toml (build): build-commands: command failed with exit code 3: exit 3\n"; !strings.Contains(stderr, want) {
		t.Errorf("the session does not say %q:\n%s", want, stderr)
	}
	if st := p.state("bad.toml"); st != "failed" {
		t.Errorf("bad.toml is %q, want failed", st)
	}
	var methods []string
	for _, c := range f.Calls() {
		methods = append(methods, c.Method)
		if c.Method == "UpdateActionResult" {
			t.Errorf("a failed build was recorded in the action cache; calls: %v", methods)
		}
	}
	if !strings.Contains(strings.Join(methods, " "), "GetActionResult") {
		t.Errorf("the build did not look its action up; calls: %v", methods)
	}
}

// An action cache that refuses results: one warning for the session, and the
// builds succeed.
func TestE2EActionCacheRefusesUpdates(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	f := testreapi.StartFake(t, testreapi.FakeOptions{Unimplemented: []string{"UpdateActionResult"}})
	files := tokenChain("ref")
	p := newRemoteProject(t, nil, files, "ref2.toml")
	p.write("project.toml", cacheOnlyProjectTOML("grpc://"+f.Addr, "ref2.toml"))
	_, stderr := p.runLong(0, "build", "--ui", "plain")
	const warning = "the action cache grpc://%s does not record results from this client (Unimplemented: Method build.bazel.remote.execution.v2.ActionCache/UpdateActionResult is unimplemented): results are looked up there, not recorded"
	want := fmt.Sprintf(warning, f.Addr)
	if n := strings.Count(stderr, want); n != 1 {
		t.Errorf("the session says %q %d times, want once:\n%s", want, n, stderr)
	}
	// The dependants of a build start when its artifact is available, before it
	// records: those already started when the refusal came may try too.
	updates := 0
	for _, c := range f.Calls() {
		if c.Method == "UpdateActionResult" {
			updates++
		}
	}
	t.Logf("%d of 3 builds tried to record", updates)
	for _, el := range []string{"ref0.toml", "ref1.toml", "ref2.toml"} {
		if st := p.state(el); st != "cached" {
			t.Errorf("%s is %q after the refusal, want cached", el, st)
		}
	}
	if log, _ := p.mustRun(0, "artifact", "log", "ref0.toml"); !strings.Contains(log, "warning: "+want) {
		t.Errorf("ref0.toml's log does not carry the warning:\n%s", log)
	}
}

// The action cache is not the build: a lookup that fails builds here, a record
// that fails is a warning, and the session succeeds; a host build takes no
// part (it is not the Action).
func TestE2EActionCacheFaultsAndHostBuilds(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	f := testreapi.StartFake(t, testreapi.FakeOptions{RequireMetadata: true})
	f.Faults(func(x *testreapi.Faults) {
		x.Unavailable = map[string]int{"GetActionResult": 1, "UpdateActionResult": 1}
	})
	p := newRemoteProject(t, nil, tokenChain("flt"), "flt2.toml")
	p.write("project.toml", cacheOnlyProjectTOML("grpc://"+f.Addr, "flt2.toml"))
	_, stderr := p.runLong(0, "build", "--ui", "plain")
	log0, _ := p.mustRun(0, "artifact", "log", "flt0.toml")
	lookupFailed := regexp.MustCompile(`warning: action cache grpc://` + regexp.QuoteMeta(f.Addr) + `: looking action [0-9a-f]{64}/\d+ up: Unavailable: the fake is unavailable for GetActionResult; building here, not recorded\n`)
	if !lookupFailed.MatchString(log0) || !localBuildLine.MatchString(log0) {
		t.Errorf("flt0.toml's log does not say the lookup failed and it built here:\n%s", log0)
	}
	log1, _ := p.mustRun(0, "artifact", "log", "flt1.toml")
	action := actionOf(t, acMissLine, log1, "flt1.toml")
	want := "action cache grpc://" + f.Addr + ": recording action " + action + " of flt1.toml: Unavailable: the fake is unavailable for UpdateActionResult (the build succeeded and is cached here)"
	if !strings.Contains(stderr, want) || !strings.Contains(log1, "warning: "+want) {
		t.Errorf("neither the session nor flt1.toml's log says %q:\n%s\n%s", want, stderr, log1)
	}
	log2, _ := p.mustRun(0, "artifact", "log", "flt2.toml")
	if actionOf(t, acRecordLine, log2, "flt2.toml") == "" {
		t.Errorf("flt2.toml was not recorded:\n%s", log2)
	}

	g := testreapi.StartFake(t, testreapi.FakeOptions{})
	host := newRemoteProject(t, nil, map[string]string{"elements/h.toml": "kind = \"manual\"\nbuild-depends = [\"sysroot.toml\"]\n[config]\nbuild-commands = [\"mkdir -p %{install-root}/x\"]\n"}, "h.toml")
	host.write("project.toml", cacheOnlyProjectTOML("grpc://"+g.Addr, "h.toml"))
	host.runLong(0, "build", "--ui", "plain", "--sandbox", "host")
	log, _ := host.mustRun(0, "artifact", "log", "h.toml")
	if want := "action cache grpc://" + g.Addr + ": not used: the build runs in the host sandbox, whose commands see the host's / rather than the input root a remote build's Action has (only bwrap builds take part)\n"; !strings.Contains(log, want) {
		t.Errorf("h.toml's log does not say %q:\n%s", want, log)
	}
	for _, c := range g.Calls() {
		if c.Method != "GetCapabilities" {
			t.Errorf("a host build called %s on the action cache", c.Method)
		}
	}
}
