package actions

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
)

// runBuildJobs runs the build of each spec, in order, in one real worker process
// (the test binary, as TestMain runs it) and returns each job's log; every build must
// succeed. before, when set, runs before each job with its index.
func runBuildJobs(t *testing.T, specs []*buildSpec, before func(i int)) []string {
	t.Helper()
	logged, results := runBuildJobsResults(t, specs, before)
	for i, res := range results {
		if !res.OK {
			t.Fatalf("build of %s: %+v\n%s", specs[i].Element, res, logged[i])
		}
	}
	return logged
}

// runBuildJobsResults is runBuildJobs with each job's result, whatever it is.
func runBuildJobsResults(t *testing.T, specs []*buildSpec, before func(i int)) ([]string, []job.Result) {
	t.Helper()
	pool := job.NewWorkers(job.Options{Command: []string{os.Args[0]}, Env: append(os.Environ(), childEnv+"=1")})
	defer pool.Close()
	logs := t.TempDir()
	var logged []string
	var results []job.Result
	for i, spec := range specs {
		if before != nil {
			before(i)
		}
		log := filepath.Join(logs, fmt.Sprintf("%d.log", i))
		j := runBuildJob(t, pool, i, spec, log)
		b, _ := os.ReadFile(log)
		logged, results = append(logged, string(b)), append(results, j.Wait().Result)
	}
	return logged, results
}

// runBuildJob runs the build of spec in pool as job build-i, its log at log, and
// waits a minute at most for it to end.
func runBuildJob(t *testing.T, pool *job.Workers, i int, spec *buildSpec, log string) *job.Job {
	t.Helper()
	in := spec.input()
	j, err := pool.Start(job.Spec{ID: fmt.Sprintf("build-%d", i), Action: string(queues.Build), Element: spec.Element, LogPath: log,
		Payload: in.Payload, Shared: in.Shared}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.Done():
	case <-time.After(time.Minute):
		_ = j.Kill()
		t.Fatalf("the build of %s did not end within a minute", spec.Element)
	}
	return j
}

// stamp and pid match what changes from run to run in a job log's lines.
var stamp, pid = regexp.MustCompile(`^\[\d\d:\d\d:\d\d\.\d{3}\] `), regexp.MustCompile(`pid \d+`)

// logLines is a job log's lines without their times and pids.
func logLines(log string) []string {
	var lines []string
	for l := range strings.Lines(log) {
		lines = append(lines, pid.ReplaceAllString(stamp.ReplaceAllString(strings.TrimSuffix(l, "\n"), ""), "pid "))
	}
	return lines
}

// noCommandSpec is the build of a manual element with no commands, staging deps.
func noCommandSpec(c *cache.Cache, name, sandbox string, deps ...stagedArtifact) *buildSpec {
	env := map[string]string{"GANTRY_BUILD_ROOT": "/b", "ONE": "1"}
	return &buildSpec{CacheDir: c.Root, Project: "p", Element: name, Key: cache.DigestOf([]byte(c.Root + name)).Hash, Kind: "manual",
		Sandbox: sandbox, WorkDir: c.TempName("build"), Stage: deps, DepKeys: map[string]string{},
		Host: &element.Resolved{Env: env, Commands: map[string][]string{}}, Bwrap: &element.Resolved{Env: env, Commands: map[string][]string{}}}
}

// TestBuildRunningNothingNeedsNoWorkDir: the build of an element with no commands
// whose dependencies install nothing makes no work directory (no sysroot staged, no
// HOME, no install root: the cache's tmp/ stays empty after its job) and
// prepares no sandbox, and still leaves what such a build always left: the same log
// line for line (the sandbox, the environment, the staging status), an artifact of
// the empty tree, its log stored, a record naming its dependencies. A build that
// runs a command still works in its work directory.
func TestBuildRunningNothingNeedsNoWorkDir(t *testing.T) {
	t.Cleanup(DropSpareWorkDir)
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(&cache.Artifact{Project: "p", Element: "dep.toml", Key: "k1", Success: true}); err != nil {
		t.Fatal(err)
	}
	dep := stagedArtifact{Element: "dep.toml", Key: "k1"}
	specs := []*buildSpec{noCommandSpec(c, "auto.toml", "auto", dep), noCommandSpec(c, "host.toml", "host", dep), noCommandSpec(c, "alone.toml", "auto")}
	withCommand := noCommandSpec(c, "cmd.toml", "host", dep)
	withCommand.Host = &element.Resolved{Env: map[string]string{}, Commands: map[string][]string{"build-commands": {"test -d \"$HOME\" && echo built"}}}
	specs = append(specs, withCommand)
	var staged stagedDigests
	for _, s := range specs {
		s.DepKeys = map[string]string{"dep.toml": "k1"}
		staged.Fill(c, s)
	}
	tmp := filepath.Dir(specs[0].WorkDir)
	tmpEmpty := func(when string) {
		t.Helper()
		if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
			t.Errorf("%s: the cache's tmp/ holds %d entries (%v), want none: a work directory was made", when, len(entries), err)
		}
	}
	logs := runBuildJobs(t, specs[:3], func(i int) {
		if i > 0 {
			tmpEmpty("after the build of " + specs[i-1].Element)
		}
	})
	tmpEmpty("after the build of " + specs[2].Element)
	logs = append(logs, runBuildJobs(t, specs[3:], nil)...)

	home := func(s *buildSpec) string { return "env: HOME=" + filepath.Join(s.WorkDir, "home") }
	want := func(s *buildSpec, deps int, sandbox string) []string {
		lines := []string{"[start] build " + s.Element + " (job build-0, pid )", "element: " + s.Element + ", key: " + s.Key + ", project: p"}
		if deps > 0 {
			lines = append(lines, fmt.Sprintf("[status] staging %d dependencies", deps))
		}
		lines = append(lines, "sandbox: host ("+sandbox+")", "env: GANTRY_BUILD_ROOT=/b", home(s), "env: LC_ALL=C", "env: ONE=1",
			"env: SOURCE_DATE_EPOCH=315532800", "env: TZ=UTC",
			"[slot done]", "[status] caching artifact", "[available]", "[success]")
		return lines
	}
	for i, tc := range []struct {
		spec    *buildSpec
		deps    int
		sandbox string
	}{
		{specs[0], 1, "auto: the sysroot cannot run commands under bwrap"},
		{specs[1], 1, "host sandbox requested"},
		{specs[2], 0, "auto: the sysroot cannot run commands under bwrap"},
	} {
		w := want(tc.spec, tc.deps, tc.sandbox)
		w[0] = strings.Replace(w[0], "build-0", fmt.Sprintf("build-%d", i), 1)
		if got := logLines(logs[i]); !slices.Equal(got, w) {
			t.Errorf("the log of %s:\n%s\nwant:\n%s", tc.spec.Element, strings.Join(got, "\n"), strings.Join(w, "\n"))
		}
		a, err := c.Lookup("p", tc.spec.Element, tc.spec.Key)
		if err != nil {
			t.Fatal(err)
		}
		empty, err := c.EmptyTree()
		if err != nil {
			t.Fatal(err)
		}
		if !a.Success || a.Files != empty || !a.BuildTree.IsZero() || a.Dependencies["dep.toml"] != "k1" {
			t.Errorf("the artifact of %s: success %t, files %s, build tree %s, dependencies %v; want success, the empty tree %s, no build tree, dep.toml k1",
				tc.spec.Element, a.Success, a.Files, a.BuildTree, a.Dependencies, empty)
		}
		stored, err := c.ReadBlob(a.Log)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(logs[i], string(stored)) || !strings.Contains(string(stored), "[available]") || strings.Contains(string(stored), "[success]") {
			t.Errorf("the stored log of %s is not the job's log up to its commit:\n%s", tc.spec.Element, stored)
		}
	}
	if !strings.Contains(logs[3], "] built\n") {
		t.Errorf("the build with a command did not run it in its work directory:\n%s", logs[3])
	}
}

// TestStoreLog: a job log is stored as the blob of its content, read whole when it
// is small and streamed when it is larger than logReadWhole; a missing log, or one
// that is not a file, is an error naming it.
func TestStoreLog(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, size := range []int{0, 100, logReadWhole, logReadWhole + 1} {
		content := []byte(strings.Repeat("[12:00:00.000] a log line\n", size/26+1)[:size])
		path := filepath.Join(dir, fmt.Sprintf("%d.log", size))
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := storeLog(c, path)
		if err != nil {
			t.Fatal(err)
		}
		if want := cache.DigestOf(content); d != want {
			t.Errorf("a log of %d bytes stored as %s, want %s", size, d, want)
		}
		if got, err := c.ReadBlob(d); err != nil || string(got) != string(content) {
			t.Errorf("the blob of a log of %d bytes: %d bytes (%v), want its content", size, len(got), err)
		}
	}
	missing := filepath.Join(dir, "missing.log")
	if _, err := storeLog(c, missing); err == nil || err.Error() != "storing file "+missing+": no such file or directory" {
		t.Errorf("storing a missing log: %v, want storing file %s: no such file or directory", err, missing)
	}
	if _, err := storeLog(c, dir); err == nil || err.Error() != "storing file "+dir+": not a regular file" {
		t.Errorf("storing a directory as a log: %v, want storing file %s: not a regular file", err, dir)
	}
}

// TestBuildRunningNothingFailsAndFallsBackAsBefore: a build with no commands whose
// dependency vanished from the cache fails as any build does (the dependency named,
// for the session to build it again; nothing cached) and makes no work directory; one
// whose dependency installs a file stages it in a work directory as before.
func TestBuildRunningNothingFailsAndFallsBackAsBefore(t *testing.T) {
	t.Cleanup(DropSpareWorkDir)
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(&cache.Artifact{Project: "p", Element: "gone.toml", Key: "k1", Success: true}); err != nil {
		t.Fatal(err)
	}
	commitDep(t, c, "full.toml", "k2", "a file")
	vanished := noCommandSpec(c, "vanished.toml", "auto", stagedArtifact{Element: "gone.toml", Key: "k1"})
	staging := noCommandSpec(c, "staging.toml", "host", stagedArtifact{Element: "full.toml", Key: "k2"})
	var staged stagedDigests
	staged.Fill(c, vanished)
	staged.Fill(c, staging)
	if _, err := c.Cleanup(cache.CleanupOptions{Remove: []cache.ArtifactRef{{Project: "p", Element: "gone.toml", Key: "k1"}}}); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Dir(vanished.WorkDir)
	logs, results := runBuildJobsResults(t, []*buildSpec{vanished, staging}, func(i int) {
		if entries, _ := os.ReadDir(tmp); i == 1 && len(entries) != 0 {
			t.Errorf("the failed build with no commands left %d entries in tmp/, want none", len(entries))
		}
	})
	var damaged queues.DamagedDependency
	if res := results[0]; res.OK || json.Unmarshal(res.Data, &damaged) != nil || damaged.Element != "gone.toml" ||
		!strings.Contains(res.Error, "staging dependency gone.toml: its artifact k1 is gone from the cache") {
		t.Errorf("the build of an element whose dependency vanished: %+v, want a failure naming gone.toml\n%s", res, logs[0])
	}
	if _, err := c.Lookup("p", "vanished.toml", vanished.Key); err == nil {
		t.Error("the failure of an element whose dependency vanished was cached")
	}
	if !results[1].OK {
		t.Fatalf("the build staging full.toml: %+v\n%s", results[1], logs[1])
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 1 {
		t.Errorf("tmp/ holds %d entries after a build that staged a file, want its work directory, kept for the next job", len(entries))
	}
	if !strings.Contains(logs[1], "] [status] staging 1 dependencies\n") || !strings.Contains(logs[1], "] sandbox: host (host sandbox requested)\n") {
		t.Errorf("the log of the build staging full.toml:\n%s", logs[1])
	}
}
