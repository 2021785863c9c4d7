package cli

// The kill -9 campaign: gantry killed outright at random instants of a build of
// a few hundred elements with real files. After every kill no build process is
// left, `gantry cache verify` is clean, and nothing committed is ever built again.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/bench/synth"
	"github.com/gantry-build/gantry/internal/proctest"
)

// campaignSize is the campaign's shape: CI runs the reduced one; GANTRY_CAMPAIGN=long
// runs the full one (a few minutes).
func campaignSize() (elements, kills int) {
	if os.Getenv("GANTRY_CAMPAIGN") == "long" {
		return 400, 12
	}
	return 100, 3
}

// campaignProject writes a synth graph of n elements whose builds install real files
// (text and random bytes) and run processes carrying marker: one for a few
// milliseconds, and a daemon (setsid) meant to live for minutes, which must die with
// its job.
func campaignProject(t *testing.T, n int, seed uint64, marker string) *e2eProject {
	g, err := synth.Generate(synth.Config{N: n, FanIn: 3, Seed: seed, SleepMS: 30})
	if err != nil {
		t.Fatal(err)
	}
	p := newE2EProject(t, map[string]string{"project.toml": string(g.ProjectTOML())})
	for i := range n {
		deps := make([]string, len(g.Deps[i]))
		for j, d := range g.Deps[i] {
			deps[j] = g.ElementName(d)
		}
		ms := g.DurMS[i]
		p.write(synth.ElementDir+"/"+g.ElementName(i), manualElement(deps,
			fmt.Sprintf("ln -s \"$(command -v sleep)\" ./%[1]s; setsid ./%[1]s 300 >/dev/null 2>&1 & ./%[1]s %[2]d.%03[3]d", marker, ms/1000, ms%1000),
			fmt.Sprintf("mkdir -p %%{install-root}/share/%[1]s && echo %[1]s > %%{install-root}/share/%[1]s/name.txt", g.Base(i)),
			fmt.Sprintf("head -c %d /dev/urandom > %%{install-root}/share/%s/data.bin", 1024+i*37%4096, g.Base(i))))
	}
	p.write(synth.ElementDir+"/"+synth.AllElement, string(g.AllTOML()))
	return p
}

// noneLeft waits until no process carries marker in its command line and no job of
// project p (found by its private HOME in their environment) is left, and names those
// left if some are.
func noneLeft(t *testing.T, p *e2eProject, marker, when string) {
	t.Helper()
	home := "HOME=" + filepath.Join(filepath.Dir(p.root), "home") + "\x00"
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := append(markedProcesses(marker), processesWith("environ", home)...)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, pid := range left {
				pi, _ := proctest.Read(pid)
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				desc = append(desc, fmt.Sprintf("pid %d ppid %d pgrp %d state %c: %q", pid, pi.PPID, pi.PGrp, pi.State, cmd))
			}
			t.Fatalf("%s: build processes are left:\n  %s", when, strings.Join(desc, "\n  "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// buildStarts counts the build jobs a finished or killed run started.
func buildStarts(evs []e2eEvent) int {
	n := 0
	for _, e := range evs {
		if e.is("job-start", "build", "") {
			n++
		}
	}
	return n
}

func TestE2EKill9Campaign(t *testing.T) {
	t.Parallel()
	n, kills := campaignSize()
	seed := uint64(time.Now().UnixNano())
	t.Logf("campaign: %d elements, %d kills, seed %d", n, kills, seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	marker := fmt.Sprintf("gantry-campaign-%d", seed)
	killMarkedOnCleanup(t, marker)
	p := campaignProject(t, n, seed, marker)
	total := n + 1 // and the "all" stack
	args := []string{"build", "--ui", "json", "--sandbox", "host", "--builders", "4"}

	committed := 0
	started := time.Now()
	for k := range kills {
		// Kill after a random number of build jobs have started in this run, so the
		// kill lands while jobs stage, run commands or commit.
		after := 1 + rng.IntN(max(1, (total-committed)/(kills-k+1)))
		g := p.start(args...)
		g.waitFor(fmt.Sprintf("%d build jobs started", after), func(evs []e2eEvent) bool { return buildStarts(evs) >= after })
		g.signal(syscall.SIGKILL)
		g.wait(e2eTimeout)
		noneLeft(t, p, marker, fmt.Sprintf("kill %d", k+1))
		p.mustRun(0, "cache", "verify")
		rep := p.verifyCache()
		if rep.Refs < committed {
			t.Fatalf("kill %d: %d refs, fewer than the %d committed before", k+1, rep.Refs, committed)
		}
		t.Logf("kill %d after %d build starts: %d artifacts committed", k+1, after, rep.Refs)
		committed = rep.Refs
	}

	_, stderr := p.mustRun(0, args...)
	built := buildStarts(parseEvents(stderr))
	if built != total-committed {
		t.Errorf("the final build built %d elements, want %d (%d of %d were committed before)", built, total-committed, committed, total)
	}
	t.Logf("the final build built %d elements, the %d not committed before", built, total-committed)
	if rep := p.verifyCache(); rep.Refs != total {
		t.Errorf("%d artifacts after the final build, want %d", rep.Refs, total)
	}
	_, stderr = p.mustRun(0, args...)
	if built := buildStarts(parseEvents(stderr)); built != 0 {
		t.Errorf("a build after the complete one built %d elements, want none", built)
	}
	noneLeft(t, p, marker, "after the campaign")
	t.Logf("campaign of %d elements and %d kills took %v", n, kills, time.Since(started).Round(time.Millisecond))
}
