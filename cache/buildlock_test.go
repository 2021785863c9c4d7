package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func requireOFDLocks(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("build-once locks are open file description locks: Linux only")
	}
}

// Two holders of one key's lock exclude each other, even in one process (each
// BuildLock is its own open file description); other keys are not held up.
func TestBuildLockExcludes(t *testing.T) {
	requireOFDLocks(t)
	c := openTestCache(t)
	a, err := c.BuildLock("p", "app.toml", "k1")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if ok, err := a.TryLock(); !ok || err != nil {
		t.Fatalf("first TryLock: %v, %v; want it taken", ok, err)
	}
	b, _ := c.BuildLock("p", "app.toml", "k1")
	defer b.Close()
	if ok, err := b.TryLock(); ok || err != nil {
		t.Fatalf("second TryLock of a held key: %v, %v; want false", ok, err)
	}
	other, _ := c.BuildLock("p", "app.toml", "k2")
	defer other.Close()
	if ok, err := other.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock of another key: %v, %v; want it taken", ok, err)
	}
	a.Close()
	if ok, err := b.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock after the holder closed: %v, %v; want it taken", ok, err)
	}
}

// Lock waits in the kernel until the holder lets go, and can be given up at once:
// the abandoned wait then frees the lock as soon as it gets it.
func TestBuildLockWaits(t *testing.T) {
	requireOFDLocks(t)
	c := openTestCache(t)
	holder, _ := c.BuildLock("p", "lib.toml", "k")
	if ok, _ := holder.TryLock(); !ok {
		t.Fatal("the first TryLock did not take the lock")
	}
	// Given up: returns at once with the cause.
	gaveUp, _ := c.BuildLock("p", "lib.toml", "k")
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("the session ended")
	cancel(stop)
	if err := gaveUp.Lock(ctx); !errors.Is(err, stop) {
		t.Fatalf("Lock with its context ended: %v, want the cause", err)
	}
	// A waiter gets the lock when the holder closes it.
	waiter, _ := c.BuildLock("p", "lib.toml", "k")
	defer waiter.Close()
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(context.Background()) }()
	// That the waiter waited is shown below: once it returns, it holds the lock
	// (TryLock fails), which a Lock that did not wait for the holder would not.
	holder.Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Lock after the holder closed: %v", err)
		}
		other, _ := c.BuildLock("p", "lib.toml", "k")
		if ok, err := other.TryLock(); ok || err != nil {
			t.Fatalf("TryLock while the waiter holds the lock: %v, %v; want false", ok, err)
		}
		other.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("Lock did not return within 5s of the holder closing the lock")
	}
	// The abandoned wait took the lock after the holder and let it go; the
	// waiter's release frees it for the next.
	waiter.Close()
	next, _ := c.BuildLock("p", "lib.toml", "k")
	defer next.Close()
	ctx, cancelNext := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelNext()
	if err := next.Lock(ctx); err != nil {
		t.Fatalf("the lock is still held after every holder let go: %v", err)
	}
}

// However many keys are locked, building/ holds one empty file.
func TestBuildLockFileNeverGrows(t *testing.T) {
	requireOFDLocks(t)
	c := openTestCache(t)
	for i := range 1000 {
		l, err := c.BuildLock("p", "e.toml", fmt.Sprintf("key%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := l.TryLock(); !ok || err != nil {
			t.Fatalf("TryLock of key%d: %v, %v", i, ok, err)
		}
		l.Close()
	}
	entries, err := os.ReadDir(filepath.Join(c.Root, buildingDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != buildLockFile {
		t.Fatalf("building/ holds %v, want only %s", entries, buildLockFile)
	}
	if fi, _ := entries[0].Info(); fi.Size() != 0 {
		t.Errorf("%s is %d bytes, want 0", buildLockFile, fi.Size())
	}
	// It is gantry's own: verify finds nothing to say about it, usage nothing
	// wrong, and a cleanup of everything, leftovers included, leaves it and a
	// live session's lock in it alone.
	held, _ := c.BuildLock("p", "e.toml", "live")
	defer held.Close()
	if ok, _ := held.TryLock(); !ok {
		t.Fatal("TryLock of a free key failed")
	}
	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Errorf("verify with building/ present: %v", rep.Problems)
	}
	if usage, err := c.Report(10); err != nil || len(usage.Problems) > 0 {
		t.Errorf("usage with building/ present: %v, %v", err, usage)
	}
	if _, err := c.Cleanup(CleanupOptions{Target: 1, Leftovers: true}); err != nil {
		t.Fatal(err)
	}
	other, _ := c.BuildLock("p", "e.toml", "live")
	defer other.Close()
	if ok, err := other.TryLock(); ok || err != nil {
		t.Errorf("after a cleanup the live lock is free (%v, %v): its file was removed", ok, err)
	}
}
