package cache

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestGroupCommitSharesAFlush: commits that finish while another process flushes the
// filesystem wait for it and make no syncfs of their own when it began after their
// writes; a commit after it flushes itself, and counters that make no sense (done beyond
// started) never excuse a flush.
func TestGroupCommitSharesAFlush(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("group commits are Linux's")
	}
	c := openTestCache(t)
	var mu sync.Mutex
	counts := map[string]int{}
	waiting := make(chan struct{}, 16)
	c.trace = func(event, _ string) {
		mu.Lock()
		counts[event]++
		mu.Unlock()
		if event == eventSyncWait {
			waiting <- struct{}{}
		}
	}
	count := func(event string) int {
		mu.Lock()
		defer mu.Unlock()
		return counts[event]
	}
	if err := c.syncBlobs(); err != nil { // makes building/syncs
		t.Fatal(err)
	}
	<-waiting
	if got := count(eventSyncBegin); got != 1 {
		t.Fatalf("the first commit made %d syncfs, want 1", got)
	}

	// "Another process" holds the lock, as while it flushes.
	fd, counters, err := c.openSyncCounters()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	defer unix.Munmap(counters)
	if err := flockFD(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	const n = 3
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.syncBlobs()
		}()
	}
	for range n {
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("the commits never came to the lock")
		}
	}
	// Its syncfs began after their writes: it serves them all.
	started := (*atomic.Uint64)(unsafe.Pointer(&counters[0]))
	done := (*atomic.Uint64)(unsafe.Pointer(&counters[8]))
	s := started.Add(1)
	if err := syncFS(c.Root); err != nil {
		t.Fatal(err)
	}
	done.Store(s)
	if err := flockFD(fd, unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, shared := count(eventSyncBegin), count(eventSyncShared); got != 1 || shared != n {
		t.Errorf("%d commits waiting on another's flush made %d syncfs (%d shared), want none (%d shared)", n, got-1, shared, n)
	}

	// Nobody flushes after this one's writes: it flushes.
	if err := c.syncBlobs(); err != nil {
		t.Fatal(err)
	}
	<-waiting
	if got := count(eventSyncBegin); got != 2 {
		t.Errorf("a commit alone made %d syncfs, want 1", got-1)
	}
	// Damaged counters: done beyond started.
	done.Store(started.Load() + 100)
	if err := c.syncBlobs(); err != nil {
		t.Fatal(err)
	}
	<-waiting
	if got := count(eventSyncBegin); got != 3 {
		t.Errorf("a commit with done beyond started made %d syncfs, want 1", got-2)
	}
	// A flush killed midway: started beyond done.
	started.Add(1)
	if err := c.syncBlobs(); err != nil {
		t.Fatal(err)
	}
	<-waiting
	if got := count(eventSyncBegin); got != 4 {
		t.Errorf("a commit after a flush that never ended made %d syncfs, want 1", got-3)
	}
}
