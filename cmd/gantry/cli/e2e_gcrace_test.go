package cli

// Maintenance beside live builds: build sessions of two projects share one cache
// with a `cache gc --quota 1M` loop. No build fails because of the gc, and gc never
// removes what a live session reported as built.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gcRaceDuration is how long the sessions build beside the gc loop: 25 s in the
// suite (the test runs beside the others), 2 minutes with GANTRY_LONG_TESTS set.
func gcRaceDuration() time.Duration {
	if os.Getenv("GANTRY_LONG_TESTS") != "" {
		return 2 * time.Minute
	}
	return 25 * time.Second
}

// raceProject is a project named name of n elements, each depending on up to three
// earlier ones (so builds stage many artifacts) and installing 40 KB of files, the
// whole larger than a 1M quota.
func raceProject(name string, n int) map[string]string {
	files := map[string]string{"project.toml": "name = \"" + name + "\"\ndefault-targets = [\"all.toml\"]\n"}
	var all []string
	for i := 1; i <= n; i++ {
		var deps []string
		for _, d := range []int{i - 1, i / 2, i / 3} {
			if d >= 1 && d < i && !slices.Contains(deps, fmt.Sprintf("e%02d.toml", d)) {
				deps = append(deps, fmt.Sprintf("e%02d.toml", d))
			}
		}
		files[fmt.Sprintf("elements/e%02d.toml", i)] = manualElement(deps,
			fmt.Sprintf("mkdir -p %%{install-root}/share/%[1]s/%[2]d && for f in 1 2 3 4 5 6 7 8 9 10; do head -c 4096 /dev/urandom > %%{install-root}/share/%[1]s/%[2]d/r$f; done", name, i))
		all = append(all, fmt.Sprintf("e%02d.toml", i))
	}
	files["elements/all.toml"] = "kind = \"stack\"\ndepends = " + tomlList(all...) + "\n"
	return files
}

// raceRun is one finished build session: when it exited and what it reported built.
type raceRun struct {
	project string
	exited  time.Time
	built   [][2]string // element, key
}

// gcRun is one `cache gc` run: when it ended, the artifacts it removed
// ("project/element shortkey"), and whether it kept some for live sessions.
type gcRun struct {
	ended   time.Time
	removed map[string]bool
	kept    bool
}

func TestE2EGCBesideLiveSessions(t *testing.T) {
	t.Parallel()
	const n = 24
	a := newE2EProject(t, raceProject("alpha", n))
	b := newE2EProject(t, raceProject("beta", n))
	b.cache = a.cache
	a.mustRun(0, "cache", "usage") // makes nothing; the builds make the cache
	until := time.Now().Add(gcRaceDuration())
	// On a loaded machine the first builds may outlast the duration: the sessions
	// then go on until a gc has removed an artifact and one has kept some for live
	// sessions, or the duration has passed thrice.
	var removedSome, keptSome atomic.Bool
	raced := func() bool { return removedSome.Load() && keptSome.Load() }
	hardStop := time.Now().Add(3 * gcRaceDuration())

	var mu sync.Mutex
	var runs []raceRun
	var wg sync.WaitGroup
	stop := make(chan struct{})
	failed := make(chan string, 4) // room for each sender: three builds and the gc loop
	session := func(p *e2eProject, project string) {
		defer wg.Done()
		for first := true; first || time.Now().Before(until) || !raced() && time.Now().Before(hardStop); first = false {
			g := p.start("build", "--ui", "json", "--builders", "2", "--sandbox", "host")
			code := g.wait(4 * e2eTimeout)
			run := raceRun{project: project, exited: g.exitedAt}
			for _, e := range g.snapshot() {
				if e.is("job-end", "build", "") && e.Result == "success" {
					run.built = append(run.built, [2]string{e.Element, e.Key})
				}
			}
			mu.Lock()
			runs = append(runs, run)
			mu.Unlock()
			if code != 0 {
				failed <- fmt.Sprintf("a build of %s exited %d:\n%s", project, code, g.output())
				return
			}
			// The next run builds again what gc removed meanwhile.
		}
	}
	wg.Add(3)
	go session(a, "alpha")
	go session(a, "alpha")
	go session(b, "beta")
	sessionsDone := make(chan struct{})
	go func() { wg.Wait(); close(sessionsDone) }()

	var gcs []gcRun
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			stdout, stderr, code := a.run("cache", "gc", "--quota", "1M")
			if code != 0 {
				failed <- fmt.Sprintf("cache gc exited %d:\n%s%s", code, stdout, stderr)
				return
			}
			r := gcRun{ended: time.Now(), removed: map[string]bool{}, kept: strings.Contains(stdout, "that running gantry sessions need")}
			for _, line := range strings.Split(stdout, "\n") {
				if rest, ok := strings.CutPrefix(line, "removed artifact "); ok {
					f := strings.Fields(rest)
					if len(f) >= 2 {
						r.removed[f[0]+" "+f[1]] = true
					}
				}
			}
			gcs = append(gcs, r)
			if len(r.removed) > 0 {
				removedSome.Store(true)
			}
			if r.kept {
				keptSome.Store(true)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	select {
	case <-sessionsDone:
	case msg := <-failed:
		close(stop)
		<-gcDone
		t.Fatal(msg)
	}
	close(stop)
	<-gcDone
	select {
	case msg := <-failed:
		t.Fatal(msg)
	default:
	}

	removed, kept := 0, 0
	for _, g := range gcs {
		removed += len(g.removed)
		if g.kept {
			kept++
		}
	}
	t.Logf("%d build sessions, %d gc runs removing %d artifacts, %d of them keeping some for live sessions", len(runs), len(gcs), removed, kept)
	if removed == 0 || kept == 0 {
		t.Errorf("no gc removed an artifact, or none kept one for a live session: the test raced nothing")
	}
	// Every artifact a session reported built is still cached, unless a gc that
	// ended after the session did removed it.
	for _, r := range runs {
		for _, b := range r.built {
			ref := filepath.Join(a.cache, "refs", r.project, b[0], b[1])
			if _, err := os.Stat(ref); err == nil {
				continue
			}
			name := r.project + "/" + b[0] + " " + b[1][:8]
			later := false
			for _, g := range gcs {
				if g.removed[name] && g.ended.After(r.exited) {
					later = true
				}
			}
			if !later {
				t.Errorf("%s, reported built by a session that ended at %s, is gone though no gc removed it after that",
					name, r.exited.Format("15:04:05.000"))
			}
		}
	}
	a.mustRun(0, "cache", "verify")
	a.verifyCache()
}
