package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"testing"
	"time"
)

// TestGroupCommitSharesAFlush: artifacts queued while a GroupCommitter's syncfs runs
// are made durable by the next one, all of them: four commits, three syncfs (the
// first artifact's blobs; its ref and the three others' blobs; their refs). No ref
// is placed before a syncfs that began after its artifact was queued has ended, and
// Commit returns only after a syncfs that began after its ref was placed has ended.
func TestGroupCommitSharesAFlush(t *testing.T) {
	c := openTestCache(t)
	var (
		mu     sync.Mutex
		events []string
		syncs  int
	)
	first := make(chan struct{})
	release := make(chan struct{})
	queued := make(chan struct{}, 4)
	c.trace = func(event, path string) {
		mu.Lock()
		if event != eventQueued {
			events = append(events, event)
		}
		if event == eventSyncBegin {
			syncs++
		}
		n := syncs
		mu.Unlock()
		if event == eventQueued && n == 1 {
			queued <- struct{}{} // one behind the first syncfs
		}
		if event == eventSyncBegin && n == 1 {
			close(first)
			<-release // the first syncfs "runs" until the others are queued
		}
	}
	g := c.NewGroupCommitter()
	pending := func(i int) PendingRef {
		log, err := c.PutBlob([]byte(fmt.Sprintf("log %d\n", i)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.StoreBlobs(&Artifact{Project: "demo", Element: fmt.Sprint("e", i, ".toml"), Key: "k", Success: true, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	errs := make(chan error, 4)
	p0 := pending(0)
	go func() { errs <- g.Commit(p0) }()
	<-first
	for i := 1; i < 4; i++ {
		p := pending(i)
		go func() { errs <- g.Commit(p) }()
	}
	// Queued behind the running syncfs: none returns before the syncfs ends.
	timeout := time.After(10 * time.Second)
	for n := 0; n < 3; n++ {
		select {
		case <-queued:
		case <-timeout:
			t.Fatalf("%d commits queued, want 3", n)
		}
	}
	for i := 1; i < 4; i++ {
		if _, err := c.Lookup("demo", fmt.Sprint("e", i, ".toml"), "k"); !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrNotFound) {
			t.Fatalf("artifact %d has a ref before any syncfs covering it ended: %v", i, err)
		}
	}
	close(release)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if _, err := c.Lookup("demo", fmt.Sprint("e", i, ".toml"), "k"); err != nil {
			t.Errorf("artifact %d: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var got []string
	for _, e := range events {
		if e != eventBlob && e != eventSync {
			got = append(got, e)
		}
	}
	want := fmt.Sprint([]string{eventSyncBegin, eventSyncEnd, eventRef,
		eventSyncBegin, eventSyncEnd, eventRef, eventRef, eventRef,
		eventSyncBegin, eventSyncEnd})
	if fmt.Sprint(got) != want {
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestGroupCommitFlushError: a syncfs that fails fails every commit it was to make
// durable, with the cache's path, and places no ref.
func TestGroupCommitFlushError(t *testing.T) {
	c := openTestCache(t)
	p, err := c.StoreBlobs(&Artifact{Project: "demo", Element: "app.toml", Key: "k", Success: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Root += "-gone" // syncfs cannot open it
	err = c.NewGroupCommitter().Commit(p)
	want := "committing artifact demo/app.toml: making the blobs in " + c.Root + " durable: "
	if err == nil || len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Fatalf("Commit = %v, want %q…", err, want)
	}
}

// TestGroupCommitAloneCostsACommit: a commit with no other behind it costs what
// Commit does — one syncfs, then its ref placed and its directory fsynced — not a
// second syncfs for the ref.
func TestGroupCommitAloneCostsACommit(t *testing.T) {
	c := openTestCache(t)
	var events []string
	c.trace = func(event, _ string) {
		if event != eventBlob && event != eventSync && event != eventQueued {
			events = append(events, event)
		}
	}
	p, err := c.StoreBlobs(&Artifact{Project: "demo", Element: "app.toml", Key: "k", Success: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.NewGroupCommitter().Commit(p); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint([]string{eventSyncBegin, eventSyncEnd, eventRef}); fmt.Sprint(events) != want {
		t.Errorf("events %v, want %v", events, want)
	}
	if _, err := c.Lookup("demo", "app.toml", "k"); err != nil {
		t.Error(err)
	}
}
