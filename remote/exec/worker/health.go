package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/rwapipb"
)

// Health. The bot checks every Config.HealthInterval that it can do work: its work
// directory is writable and has Config.MinFree bytes free, the sandbox passes its
// self-check (Config.SandboxCheck), the CAS answers. While one fails it reports
// UNHEALTHY (BuildGrid assigns leases to OK bots only), hands back at once any
// lease it is given, and says why once; it reports OK again when all pass.
const (
	// DefaultHealthInterval is how often the bot checks itself.
	DefaultHealthInterval = 10 * time.Second
	// DefaultMinFree is the free space the work directory needs.
	DefaultMinFree = 256 << 20
	// casDownAfter is how many checks in a row the CAS must fail for the bot to be
	// unhealthy: one failed call is a blip, not a reason to leave the cluster.
	casDownAfter = 2
)

// workerUnhealthyPoll is how often an unhealthy bot reports: BuildGrid answers a
// bot that is not OK at once, without waiting for leases.
var workerUnhealthyPoll = 2 * time.Second

// health is the bot's state as the checks last found it.
type health struct {
	mu          sync.Mutex
	reason      string // why the bot cannot work; "": it can
	casFailures int    // checks in a row the CAS failed
	casSince    time.Time
}

// status is the BotStatus to report and, when not OK, why.
func (b *bot) status() (rwapipb.BotStatus, string) {
	b.health.mu.Lock()
	defer b.health.mu.Unlock()
	if b.health.reason != "" {
		return rwapipb.BotStatus_UNHEALTHY, b.health.reason
	}
	return rwapipb.BotStatus_OK, ""
}

// checkHealth runs the checks, records the result and, when it changed, logs it
// and wakes the bot loop to report it.
func (b *bot) checkHealth(ctx context.Context) {
	reason := b.workDirProblem()
	if reason == "" && b.cfg.SandboxCheck != nil {
		if err := b.cfg.SandboxCheck(); err != nil {
			reason = "the sandbox fails its self-check: " + err.Error()
		}
	}
	casReason := b.casProblem(ctx)
	if reason == "" {
		reason = casReason
	}
	if ctx.Err() != nil {
		return
	}
	b.health.mu.Lock()
	was := b.health.reason
	b.health.reason = reason
	b.health.mu.Unlock()
	switch {
	case reason == was:
		return
	case reason != "":
		b.logf("UNHEALTHY, taking no leases: %s", reason)
	default:
		b.logf("healthy again (was: %s)", was)
	}
	b.wake()
}

// workDirProblem says why the work directory cannot hold an action, or "".
func (b *bot) workDirProblem() string {
	if err := os.MkdirAll(b.runDir, 0o755); err != nil {
		return fmt.Sprintf("the work directory %s is not writable (%v): fix its permissions or give another --work-dir", b.cfg.WorkDir, err)
	}
	probe := filepath.Join(b.runDir, ".health")
	if err := os.WriteFile(probe, []byte("gantry worker health check\n"), 0o644); err != nil {
		return fmt.Sprintf("the work directory %s is not writable (%v): fix its permissions, free space or give another --work-dir", b.cfg.WorkDir, err)
	}
	_ = os.Remove(probe)
	var st unix.Statfs_t
	if err := unix.Statfs(b.cfg.WorkDir, &st); err == nil {
		if free := int64(st.Bavail) * int64(st.Bsize); free < b.cfg.MinFree {
			return fmt.Sprintf("the work directory %s is full: %d MiB free, under the %d MiB needed: free space or give another --work-dir",
				b.cfg.WorkDir, free>>20, b.cfg.MinFree>>20)
		}
	}
	return ""
}

// casProblem asks the CAS for a blob: it says why the CAS is down once it has
// failed casDownAfter checks in a row, else "".
func (b *bot) casProblem(ctx context.Context) string {
	call, stop := context.WithTimeout(ctx, workerCallLimit)
	defer stop()
	_, err := b.store.FindMissing(call, []cache.Digest{cache.DigestOf(nil)})
	b.health.mu.Lock()
	defer b.health.mu.Unlock()
	if err == nil {
		b.health.casFailures = 0
		return ""
	}
	if b.health.casFailures == 0 {
		b.health.casSince = time.Now()
	}
	b.health.casFailures++
	if b.health.casFailures < casDownAfter {
		return ""
	}
	return fmt.Sprintf("the CAS %s has not answered since %s (%v): check that it runs and that --cas reaches it",
		b.cfg.CAS.Display(), b.health.casSince.Format(time.TimeOnly), err)
}

// watchHealth checks the bot's health every HealthInterval until ctx ends.
func (b *bot) watchHealth(ctx context.Context) {
	tick := time.NewTicker(b.cfg.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			b.checkHealth(ctx)
		}
	}
}

// wake ends the bot loop's wait (a long poll, a heartbeat) to report a change.
func (b *bot) wake() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}
