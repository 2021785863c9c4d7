package job

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Resident is what a handler keeps for the life of its worker process, for the
// jobs the worker runs after it: a connection to a server, whose dial and
// handshake a job should not pay again (Reporter.Keep). The descriptors and
// goroutines its opening made are the worker's own, not a job's leftovers;
// anything else a job leaves still retires the worker (see workerState).
type Resident interface {
	// Broken says it can serve no further job: Keep closes it and opens
	// another. A resident whose descriptors changed since it was opened (a
	// connection closed, or another made) must say so: the new ones would
	// retire the worker, and the closed ones' numbers are a job's to reuse.
	Broken() bool
	Close() error
}

// residentLabel is the pprof label that marks the goroutines of a kept
// resident: goroutines inherit their creator's labels, so every goroutine its
// open started, and those they start, carries it.
const residentLabel = "gantry-job-resident"

// residents are the worker's kept residents, by key.
type residents struct {
	mu    sync.Mutex
	kept  map[string]keptResident
	count int // residents opened: each one's label is its own
}

type keptResident struct {
	res   Resident
	label string   // the residentLabel value of its goroutines
	fds   []string // the descriptors its opening made
}

// Keep returns the worker's resident of key, opening it with open when the
// worker has none (its first job of the kind) or the one it has is Broken (it
// is closed first, and the log says so). Every goroutine open starts, and what
// those start, and every descriptor open leaves open, belong to the resident
// while it is kept: the check of the worker after each job counts them as the
// worker's own. open runs alone: what another goroutine of the job opens
// meanwhile would count as the resident's.
// A resident must not hold the job's context: it outlives the job. The worker
// closes its residents when it exits.
func (r *Reporter) Keep(key string, open func() (Resident, error)) (Resident, error) {
	k := r.residents
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.kept[key]; ok {
		if !old.res.Broken() {
			return old.res, nil
		}
		delete(k.kept, key)
		err := old.res.Close()
		r.logOnly(fmt.Sprintf("[resident] %s is broken: closed (%v), opening another", key, err))
	}
	k.count++
	label := key + "#" + strconv.Itoa(k.count)
	before, err := openFiles()
	if err != nil {
		return nil, err
	}
	var res Resident
	pprof.Do(context.Background(), pprof.Labels(residentLabel, label), func(context.Context) { res, err = open() })
	if err != nil {
		return nil, err
	}
	after, err := openFiles()
	if err != nil {
		return nil, errors.Join(err, res.Close())
	}
	if k.kept == nil {
		k.kept = map[string]keptResident{}
	}
	k.kept[key] = keptResident{res: res, label: label, fds: slices.DeleteFunc(after, func(fd string) bool { return slices.Contains(before, fd) })}
	return res, nil
}

// empty says whether nothing is kept.
func (k *residents) empty() bool {
	if k == nil {
		return true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.kept) == 0
}

// descriptors are the kept residents' file descriptors, as /proc/self/fd names
// them.
func (k *residents) descriptors() map[string]bool {
	fds := map[string]bool{}
	if k == nil {
		return fds
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, kr := range k.kept {
		for _, fd := range kr.fds {
			fds[fd] = true
		}
	}
	return fds
}

// goroutines counts the goroutines of the kept residents (by their labels).
func (k *residents) goroutines() int {
	if k.empty() {
		return 0
	}
	k.mu.Lock()
	labels := map[string]bool{}
	for _, kr := range k.kept {
		labels[kr.label] = true
	}
	k.mu.Unlock()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return 0
	}
	return countLabelled(buf.Bytes(), labels)
}

// countLabelled counts the goroutines of a goroutine profile (debug=1: "N @
// pcs" then, for labelled ones, `# labels: {"k":"v", ...}`) whose residentLabel
// is one of labels.
func countLabelled(profile []byte, labels map[string]bool) int {
	n, group := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(profile))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if count, _, ok := strings.Cut(line, " @ "); ok {
			group, _ = strconv.Atoi(count)
			continue
		}
		rest, ok := strings.CutPrefix(line, "# labels: ")
		if !ok {
			continue
		}
		for label := range labels {
			if strings.Contains(rest, strconv.Quote(residentLabel)+":"+strconv.Quote(label)) {
				n += group
				break
			}
		}
		group = 0
	}
	return n
}

// closeAll closes every kept resident: the worker exits.
func (k *residents) closeAll() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, kr := range k.kept {
		_ = kr.res.Close() // the process exits: nothing to tell
		delete(k.kept, key)
	}
}
