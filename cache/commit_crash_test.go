package cache

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// commitChildEnv makes the test binary a committing process of TestCommitCrash or
// TestGroupCommitCrash: the value is the test's directory, then a space and the
// process's number.
const commitChildEnv = "GANTRY_TEST_COMMIT_CHILD"

// TestCommitCrash: four processes commit artifacts into one cache at once, and are
// killed with SIGKILL at random instants and started again,
// forty times; each writes every durability event to a shared trace as it happens. Then,
// for a power loss at any instant of the run, no ref that was in place may reach a blob
// that was not durable: every blob the ref's artifact reaches (record, log, every
// directory and file of its tree) was written before a syncfs began (of any process)
// that ended before the ref was placed.
//
// What it proves: that the order of writes, flushes and refs never lets a ref be placed,
// by a process killed or not, before a syncfs that covers its blobs has ended, whatever
// the other processes do meanwhile, assuming syncfs(2) makes durable everything written
// to the filesystem before it began. It does not test the kernel or
// the disk: dropping the page cache (it drops only clean pages) would prove nothing more,
// and a block-level fault injector (dm-log-writes) is not at hand here.
func TestCommitCrash(t *testing.T) {
	if v := os.Getenv(commitChildEnv); v != "" {
		commitChild(t, v, false)
		return
	}
	commitCrash(t, "TestCommitCrash")
}

// TestGroupCommitCrash is TestCommitCrash with group commits, as a session commits
// its build jobs' artifacts: in each of the four processes three goroutines store
// artifacts (StoreBlobs) and commit them through one GroupCommitter, whose syncfs
// each serves every artifact queued before it began and whose refs are placed only
// after it ended. The same check: after a power loss at any instant, no ref in
// place reaches a blob that no finished syncfs begun after its write covers; and
// the refs are fewer than the syncfs calls, or the group shared nothing.
func TestGroupCommitCrash(t *testing.T) {
	if v := os.Getenv(commitChildEnv); v != "" {
		commitChild(t, v, true)
		return
	}
	if shared := commitCrash(t, "TestGroupCommitCrash"); shared < 2 {
		t.Errorf("no syncfs served more than %d ref: the groups shared none", shared)
	}
}

// commitCrash runs the committing processes of test, kills them at random instants,
// and checks the trace; it returns the most refs a process placed after one syncfs.
func commitCrash(t *testing.T, test string) int {
	if runtime.GOOS != "linux" {
		t.Skip("syncfs is Linux's")
	}
	dir := t.TempDir()
	c, err := Open(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(dir, "trace")
	if err := os.WriteFile(trace, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	next := 0
	start := func() *exec.Cmd {
		next++
		cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", commitChildEnv, dir, next))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	procs := make([]*exec.Cmd, 4)
	for i := range procs {
		procs[i] = start()
	}
	for range 40 {
		// A random instant: this is the test's crash schedule, not a wait for an event.
		time.Sleep(time.Duration(rand.IntN(30)+5) * time.Millisecond)
		i := rand.IntN(len(procs))
		_ = procs[i].Process.Signal(syscall.SIGKILL)
		_ = procs[i].Wait()
		procs[i] = start()
	}
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGKILL)
		_ = p.Wait()
	}
	return checkCommitTrace(t, c, trace)
}

// checkCommitTrace checks the trace of TestCommitCrash; it returns the most refs a
// process placed after one syncfs (before its next).
func checkCommitTrace(t *testing.T, c *Cache, trace string) int {
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type flush struct{ begin, end int }
	var (
		written = map[string]int{} // blob path -> the event (index) that last wrote it
		flushes []flush            // ended flushes
		begun   = map[string]int{} // process -> its flush begun, not ended
		refs    = 0
		group   = map[string]int{} // process -> refs placed since its last syncfs ended
		shared  = 0
	)
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		proc, rest, _ := strings.Cut(sc.Text(), " ")
		event, path, _ := strings.Cut(rest, " ")
		switch event {
		case eventBlob:
			written[path] = i
		case eventSyncBegin:
			begun[proc] = i
		case eventSyncEnd:
			b, ok := begun[proc]
			if !ok {
				t.Fatalf("trace line %d: process %s ended a syncfs it never began", i+1, proc)
			}
			delete(begun, proc)
			flushes = append(flushes, flush{b, i})
			group[proc] = 0
		case eventRef:
			refs++
			group[proc]++
			shared = max(shared, group[proc])
			rel, err := filepath.Rel(filepath.Join(c.Root, refsDir), path)
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(rel, string(filepath.Separator))
			a, err := c.Lookup(parts[0], parts[1], parts[2])
			if err != nil {
				t.Fatalf("trace line %d: ref %s: %v", i+1, path, err)
			}
			blobs := []Digest{a.Record, a.Files, a.Log}
			if err := c.WalkTree(a.Files, func(e TreeEntry) error {
				if e.Type != TypeSymlink {
					blobs = append(blobs, e.Digest)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for _, d := range blobs {
				w, ok := written[c.BlobPath(d)]
				if !ok {
					t.Errorf("trace line %d: ref %s reaches blob %s, never written before it", i+1, path, d)
					continue
				}
				covered := false
				for _, fl := range flushes {
					if fl.begin > w && fl.end < i {
						covered = true
						break
					}
				}
				if !covered {
					t.Errorf("trace line %d: a power loss right after ref %s would lose blob %s (written at line %d): no syncfs began after it and ended before the ref", i+1, path, d, w+1)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d refs, %d syncfs", refs, len(flushes))
	if refs < 20 {
		t.Errorf("only %d artifacts were committed: the test proves little", refs)
	}
	return shared
}

// commitChild commits artifacts of unique content until it is killed, noting every
// durability event in the shared trace: one after the other with Commit, or, with
// group, from three goroutines through one GroupCommitter.
func commitChild(t *testing.T, v string, group bool) {
	dir, id, _ := strings.Cut(v, " ")
	c, err := Attach(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	trace, err := os.OpenFile(filepath.Join(dir, "trace"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.trace = func(event, path string) {
		_, _ = trace.WriteString(id + " " + event + " " + path + "\n") // one write(2): appended whole
	}
	var mu sync.Mutex // one trace line at a time: one write(2) each
	note := c.trace
	c.trace = func(event, path string) {
		mu.Lock()
		defer mu.Unlock()
		note(event, path)
	}
	if !group {
		commitArtifacts(t, c, filepath.Join(dir, "src-"+id), id, c.Commit)
		return
	}
	g := c.NewGroupCommitter()
	for w := range 3 {
		go commitArtifacts(t, c, filepath.Join(dir, fmt.Sprint("src-", id, "-", w)), fmt.Sprint(id, "-", w), func(a *Artifact) error {
			p, err := c.StoreBlobs(a)
			if err != nil {
				return err
			}
			return g.Commit(p)
		})
	}
	select {} // until killed
}

// commitArtifacts makes trees of unique content under src and commits them with
// commit until the process is killed.
func commitArtifacts(t *testing.T, c *Cache, src, id string, commit func(*Artifact) error) {
	for i := 0; ; i++ {
		tree := filepath.Join(src, fmt.Sprint(i))
		for j := range 3 {
			sub := filepath.Join(tree, fmt.Sprint("d", j))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				panic(err)
			}
			if err := os.WriteFile(filepath.Join(sub, "f"), []byte(fmt.Sprintf("process %s artifact %d file %d\n", id, i, j)), 0o644); err != nil {
				panic(err)
			}
		}
		files, err := c.StoreTree(tree)
		if err != nil {
			panic(err)
		}
		log, err := c.PutBlob([]byte(fmt.Sprintf("log of process %s artifact %d\n", id, i)))
		if err != nil {
			panic(err)
		}
		a := &Artifact{Project: "demo", Element: "app.toml", Key: fmt.Sprintf("p%s-%d", id, i), Success: true, Files: files, Log: log}
		if err := commit(a); err != nil {
			panic(err)
		}
	}
}
