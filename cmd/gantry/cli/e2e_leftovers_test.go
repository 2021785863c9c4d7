package cli

// What sessions killed outright leave in the cache's tmp/: the next session removes
// it at its start, and never touches what a live session has there.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tmpEntries lists the names in the cache's tmp/.
func tmpEntries(t *testing.T, p *e2eProject) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(p.cache, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names
}

// killWholeSession kills every process of the session g at once, its job workers
// too (pkill -9 gantry, the OOM killer): none of them cleans up. They are stopped
// first, round after round until no new one shows (a build's shell may fork its
// next command while the others are being stopped), then killed.
func killWholeSession(t *testing.T, p *e2eProject, g *gantryProc, marker, when string) {
	t.Helper()
	home := "HOME=" + filepath.Join(filepath.Dir(p.root), "home") + "\x00"
	stopped := map[int]bool{}
	for fresh := true; fresh; {
		fresh = false
		for _, pid := range append(processesWith("environ", home), markedProcesses(marker)...) {
			if !stopped[pid] {
				stopped[pid], fresh = true, true
				_ = syscall.Kill(pid, syscall.SIGSTOP)
			}
		}
	}
	for pid := range stopped {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	g.wait(e2eTimeout)
	noneLeft(t, p, marker, when)
}

func TestE2ESessionRemovesWhatKilledSessionsLeftInTmp(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("gantry-leftover-%d", time.Now().UnixNano())
	killMarkedOnCleanup(t, marker)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("quick.toml")})
	ready, held, release := p.scratch("ready"), p.scratch("held"), p.scratch("release")
	// An install root of 1 MB, then a wait of minutes: killed there, it is left.
	p.write("elements/slow.toml", manualElement(nil,
		"head -c 1048576 /dev/urandom > %{install-root}/big",
		fmt.Sprintf("ln -s \"$(command -v sleep)\" ./%s; touch %s; ./%s 300", marker, ready, marker)))
	p.write("elements/held.toml", manualElement(nil,
		"head -c 65536 /dev/urandom > %{install-root}/data",
		fmt.Sprintf("touch %s; while [ ! -e %s ]; do sleep 0.02; done", held, release)))
	p.write("elements/quick.toml", manualElement(nil, "true"))

	dead := map[string]bool{}
	for k := range 2 {
		os.Remove(ready)
		g := p.start("build", "--ui", "json", "--sandbox", "host", "slow.toml")
		eventually(t, e2eTimeout, "the slow build waits", func() bool { _, err := os.Stat(ready); return err == nil })
		killWholeSession(t, p, g, marker, fmt.Sprintf("kill %d", k+1))
		for name := range tmpEntries(t, p) {
			dead[name] = true
		}
		if len(dead) <= k {
			t.Fatalf("kill %d left nothing in tmp/: the test kills nothing that matters", k+1)
		}
	}

	live := p.start("build", "--ui", "json", "--sandbox", "host", "held.toml")
	eventually(t, e2eTimeout, "the held build waits", func() bool { _, err := os.Stat(held); return err == nil })
	liveEntries := map[string]bool{}
	for name := range tmpEntries(t, p) {
		if !dead[name] {
			liveEntries[name] = true
		}
	}
	if len(liveEntries) == 0 {
		t.Fatal("the live build has nothing in tmp/: the test protects nothing")
	}

	p.mustRun(0, "build", "--ui", "json", "--sandbox", "host", "quick.toml")
	after := tmpEntries(t, p)
	for name := range dead {
		if after[name] {
			t.Errorf("%s, left by a session killed outright, is still in tmp/ after the next session started", name)
		}
	}
	for name := range liveEntries {
		if !after[name] {
			t.Errorf("%s, of a live session, was removed from tmp/", name)
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := live.wait(e2eTimeout); code != 0 {
		t.Fatalf("the live session exited %d:\n%s", code, live.output())
	}
	if left := tmpEntries(t, p); len(left) > 0 {
		t.Errorf("tmp/ holds %v after every session ended", left)
	}
	if entries, _ := os.ReadDir(filepath.Join(p.cache, "sessions")); len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("sessions/ holds %v after every session ended", names)
	}
}

// `cache gc` lists, counts and removes what a session killed outright left in tmp/,
// and with --dry-run removes none of it; a quota does not take artifacts for space
// that the leftovers free.
func TestE2EGCCountsWhatKilledSessionsLeft(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("gantry-gc-leftover-%d", time.Now().UnixNano())
	killMarkedOnCleanup(t, marker)
	p := newE2EProject(t, map[string]string{"project.toml": projectTOML("quick.toml")})
	ready := p.scratch("ready")
	p.write("elements/slow.toml", manualElement(nil, "head -c 2097152 /dev/urandom > %{install-root}/big", longLivedBuild(marker, ready)))
	p.write("elements/quick.toml", manualElement(nil, "echo quick > %{install-root}/quick"))
	p.mustRun(0, "build", "--ui", "json", "--sandbox", "host", "quick.toml")

	g := p.start("build", "--ui", "json", "--sandbox", "host", "slow.toml")
	eventually(t, e2eTimeout, "the slow build waits", func() bool { _, err := os.Stat(ready); return err == nil })
	killWholeSession(t, p, g, marker, "the kill")
	left := tmpEntries(t, p)
	if len(left) == 0 {
		t.Fatal("the kill left nothing in tmp/: the test kills nothing that matters")
	}

	// The quota is well above the artifacts and below them with the leftovers.
	out, _ := p.mustRun(0, "cache", "gc", "--dry-run", "--quota", "1M")
	for name := range left {
		if !strings.Contains(out, "would remove leftover "+filepath.Join(p.cache, "tmp", name)+"\n") {
			t.Errorf("gc --dry-run does not list %s, left by the killed session:\n%s", name, out)
		}
	}
	if strings.Contains(out, "would remove artifact") {
		t.Errorf("gc --dry-run --quota 1M would remove an artifact for space the leftovers free:\n%s", out)
	}
	if after := tmpEntries(t, p); len(after) != len(left) {
		t.Errorf("gc --dry-run removed from tmp/: %d entries before, %d after:\n%s", len(left), len(after), out)
	}

	out, _ = p.mustRun(0, "cache", "gc", "--quota", "1M")
	if !strings.Contains(out, fmt.Sprintf("removed 0 artifacts, 0 blobs, %d leftovers: ", len(left))) {
		t.Errorf("gc does not count the %d leftovers of the killed session, or removed an artifact:\n%s", len(left), out)
	}
	if after := tmpEntries(t, p); len(after) > 0 {
		t.Errorf("gc left %v in tmp/", after)
	}
	if _, freed, ok := strings.Cut(out, "leftovers: "); !ok || !strings.HasPrefix(freed, "2.") {
		t.Errorf("gc does not say it freed the 2M the killed session left:\n%s", out)
	}
	p.mustRun(0, "cache", "verify")
}
