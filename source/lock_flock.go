//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockPoll is how often lockFile tries again for a lock another process holds.
const lockPoll = 50 * time.Millisecond

// lockFile takes an exclusive lock on the file p (created if needed), waiting until it is
// free or ctx ends. Other gantry processes sharing the source cache take the same lock
// before changing a git mirror.
func lockFile(ctx context.Context, p string) (unlock func(), err error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	poll := time.NewTicker(lockPoll)
	defer poll.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", p, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the lock %s: %w", p, context.Cause(ctx))
		case <-poll.C:
		}
	}
}
