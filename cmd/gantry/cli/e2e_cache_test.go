package cli

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
)

// bigChain is a project of n elements, each build-depending on the one before and
// installing size bytes of random data, and a small target app.toml on top.
func bigChain(n, size int) map[string]string {
	files := map[string]string{"project.toml": projectTOML("app.toml")}
	prev := ""
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("big%d.toml", i)
		el := "kind = \"manual\"\n"
		if prev != "" {
			el += "build-depends = " + tomlList(prev) + "\n"
		}
		el += "[config]\ninstall-commands = " + tomlList(fmt.Sprintf("head -c %d /dev/urandom > %%{install-root}/blob", size)) + "\n"
		files["elements/"+name] = el
		prev = name
	}
	files["elements/app.toml"] = "kind = \"manual\"\nbuild-depends = " + tomlList(prev) +
		"\n[config]\ninstall-commands = [\"echo app > %{install-root}/app\"]\n"
	return files
}

func cacheUsage(t *testing.T, dir string) int64 {
	t.Helper()
	c, err := cache.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Usage()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A project whose artifacts total several times the quota builds; cleanups run during
// the session, the cache ends under the quota, the target is still cached and the
// cache verifies clean.
func TestE2EQuotaCleanup(t *testing.T) {
	const quota = 1 << 20
	p := newE2EProject(t, bigChain(6, 300<<10)) // 1.8M of artifacts
	_, stderr := p.mustRun(0, "build", "--ui", "json", "--cache-quota", "1M")
	evs := parseEvents(stderr)
	cleanup, ok := findEvent(evs, "cache-cleanup", "cleanup", "")
	if !ok {
		t.Fatalf("no cache-cleanup event:\n%s", stderr)
	}
	if !strings.Contains(cleanup.Text, "freed") {
		t.Fatalf("cleanup event %q", cleanup.Raw)
	}
	if used := cacheUsage(t, p.cache); used > quota {
		t.Fatalf("the cache takes %d bytes after the build, over the %d quota", used, quota)
	}
	if st := p.state("app.toml"); st != "cached" {
		t.Fatalf("app.toml is %q after the build, want cached", st)
	}
	p.verifyCache()
	// Nothing to do the second time: the target is cached.
	_, stderr = p.mustRun(0, "build", "--ui", "json", "--cache-quota", "1M")
	if _, ok := findEvent(parseEvents(stderr), "job-start", "build", ""); ok {
		t.Fatalf("a second build started jobs:\n%s", stderr)
	}
}

// stressRounds is how many rounds the concurrency test runs: 1 in CI; set
// GANTRY_TEST_STRESS_SECONDS to keep going that long (a minute, say) by hand.
func stressDeadline() time.Time {
	if v, err := strconv.Atoi(os.Getenv("GANTRY_TEST_STRESS_SECONDS")); err == nil && v > 0 {
		return time.Now().Add(time.Duration(v) * time.Second)
	}
	return time.Time{}
}

// manyFiles is a project named name of n elements, each staging the one before and
// installing a few files, some the same in every element.
func manyFiles(name string, n int) map[string]string {
	files := map[string]string{"project.toml": "name = \"" + name + "\"\ndefault-targets = [\"top.toml\"]\n"}
	var all []string
	for i := 1; i <= n; i++ {
		el := fmt.Sprintf("e%d.toml", i)
		s := "kind = \"manual\"\n"
		if i > 1 {
			s += fmt.Sprintf("build-depends = [\"e%d.toml\"]\n", i-1)
		}
		s += "[config]\ninstall-commands = " + tomlList(
			"mkdir -p %{install-root}/share/"+strconv.Itoa(i),
			fmt.Sprintf("for f in 1 2 3 4 5 6 7 8; do echo %s-%d-$f > %%{install-root}/share/%d/$f; head -c 4096 /dev/urandom > %%{install-root}/share/%d/r$f; done", name, i, i, i),
			"echo common > %{install-root}/share/common-"+strconv.Itoa(i)) + "\n"
		files["elements/"+el] = s
		all = append(all, el)
	}
	files["elements/top.toml"] = "kind = \"stack\"\ndepends = " + tomlList(all...) + "\n"
	return files
}

// Two build sessions of different projects and a `cache gc` loop share one cache:
// both builds succeed, everything they built is cached and the cache verifies clean.
func TestE2EConcurrentSessionsAndGC(t *testing.T) {
	a := newE2EProject(t, manyFiles("alpha", 8))
	b := newE2EProject(t, manyFiles("beta", 8))
	b.cache = a.cache
	deadline := stressDeadline()
	for round := 1; ; round++ {
		pa := a.start("build", "--ui", "json", "--builders", "2")
		pb := b.start("build", "--ui", "json", "--builders", "2")
		gcs := 0
		for !(exited(pa) && exited(pb)) {
			a.mustRun(0, "cache", "gc")
			gcs++
		}
		if code := pa.wait(e2eTimeout); code != 0 {
			t.Fatalf("round %d: alpha build exited %d:\n%s", round, code, pa.output())
		}
		if code := pb.wait(e2eTimeout); code != 0 {
			t.Fatalf("round %d: beta build exited %d:\n%s", round, code, pb.output())
		}
		for _, p := range []*e2eProject{a, b} {
			for i := 1; i <= 8; i++ {
				if st := p.state(fmt.Sprintf("e%d.toml", i)); st != "cached" {
					t.Fatalf("round %d: e%d.toml is %s after the build", round, i, st)
				}
			}
		}
		a.mustRun(0, "cache", "gc")
		a.verifyCache()
		t.Logf("round %d: %d gc runs beside the builds", round, gcs)
		if time.Now().After(deadline) {
			break
		}
		a.mustRun(0, "artifact", "delete", "e*.toml")
		b.mustRun(0, "artifact", "delete", "e*.toml")
	}
}

func exited(g *gantryProc) bool {
	select {
	case <-g.exited:
		return true
	default:
		return false
	}
}

// kill -9 of `cache gc` in the middle of a cleanup leaves a cache that verifies clean
// and no stale lock: the next gc and build proceed at once.
func TestE2EKill9DuringCleanup(t *testing.T) {
	p := newE2EProject(t, manyFiles("gamma", 6))
	p.mustRun(0, "build", "--ui", "plain")
	cmd := p.command("cache", "gc", "--quota", "1")
	cmd.Env = append(cmd.Env, "GANTRY_TEST_GC_PAUSE=1")
	stdin, err := cmd.StdinPipe() // kept open: gc pauses until it closes
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	paused := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "paused for a test") {
				paused <- true
				return
			}
		}
		paused <- false
	}()
	select {
	case ok := <-paused:
		if !ok {
			cmd.Wait()
			t.Fatal("gc ended without pausing in its cleanup")
		}
	case <-time.After(e2eTimeout):
		t.Fatal("gc did not reach its cleanup")
	}
	c, err := cache.Open(p.cache)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := c.TryLock(cache.Shared); l != nil {
		t.Fatal("the paused gc does not hold the cache lock exclusively")
	}
	missing := 0
	for i := 1; i <= 6; i++ {
		if p.state(fmt.Sprintf("e%d.toml", i)) != "cached" {
			missing++
		}
	}
	if missing == 0 {
		t.Fatal("the paused gc had removed nothing: the test would not interrupt a cleanup")
	}
	// A build now waits for the lock, and says so.
	build := p.start("build", "--ui", "json")
	build.waitFor("a notice that the build waits for the cache lock", func(evs []e2eEvent) bool {
		for _, e := range evs {
			if e.Event == "notice" && strings.Contains(e.Text, "waiting for the cache lock") {
				return true
			}
		}
		return false
	})
	syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	// The kernel released the dead gc's lock: the build proceeds.
	if code := build.wait(e2eTimeout); code != 0 {
		t.Fatalf("the build after kill -9 of gc exited %d:\n%s", code, build.output())
	}
	p.verifyCache()
	l, err := c.TryLock(cache.Exclusive)
	if err != nil || l == nil {
		t.Fatalf("the cache lock is still held after kill -9: %v", err)
	}
	l.Unlock()
	p.mustRun(0, "cache", "gc")
	p.verifyCache()
}

// The executable twins a linked staging makes count towards the quota: a stack
// staging an artifact that holds a large executable takes the cache over its quota
// with the executable's twin, and the session cleans up.
func TestE2EQuotaCountsExecutableTwins(t *testing.T) {
	t.Parallel()
	p := newE2EProject(t, map[string]string{
		"project.toml": projectTOML("top.toml"),
		"elements/tool.toml": "kind = \"manual\"\n[config]\ninstall-commands = " + tomlList(
			"head -c 600000 /dev/urandom > %{install-root}/tool", "chmod 0755 %{install-root}/tool") + "\n",
		// A compose stages its dependencies as hard links (a stack stages nothing).
		"elements/top.toml": "kind = \"compose\"\nbuild-depends = [\"tool.toml\"]\n",
	})
	_, stderr := p.mustRun(0, "build", "--ui", "json", "--sandbox", "host", "--cache-quota", "1M")
	if _, ok := findEvent(parseEvents(stderr), "cache-cleanup", "cleanup", ""); !ok {
		t.Errorf("no cleanup after a build whose blob and executable twin take 1.2 MB, over a 1M quota:\n%s", stderr)
	}
	c, err := cache.Open(p.cache)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := c.Report(1); err != nil || rep.Twins != 1 {
		t.Errorf("usage = %+v, %v; want one executable twin", rep, err)
	}
	if st := p.state("top.toml"); st != "cached" {
		t.Errorf("top.toml is %s, want cached", st)
	}
	p.verifyCache()
}
