// Command tracediff compares two build traces written by `gantry build --trace`: the
// session's wall time, the time spent per queue and waiting in queues, and the jobs whose
// duration changed the most.
//
//	go run ./bench/tracediff [-top N] BEFORE.json AFTER.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"
)

type event struct {
	Name string `json:"name"`
	Cat  string `json:"cat"`
	Ph   string `json:"ph"`
	Ts   int64  `json:"ts"`
	Dur  int64  `json:"dur"`
	ID   string `json:"id"`
}

// summary is what one trace adds up to.
type summary struct {
	wall  time.Duration
	perQ  map[string]time.Duration // queue -> sum of its jobs' durations
	jobs  map[string]time.Duration // "queue element" -> its job's duration (the last attempt's)
	waits time.Duration            // sum of queue waits
}

func load(path string) (*summary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		TraceEvents []event `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("reading trace %s: %w (is it a file written by gantry build --trace?)", path, err)
	}
	s := &summary{perQ: map[string]time.Duration{}, jobs: map[string]time.Duration{}}
	begin := map[string]int64{}
	us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
	for _, e := range doc.TraceEvents {
		switch {
		case e.Ph == "X" && e.Cat == "session" && e.Name == "session":
			s.wall = us(e.Dur)
		case e.Ph == "X" && e.Cat != "session":
			s.perQ[e.Cat] += us(e.Dur)
			s.jobs[e.Cat+" "+e.Name] = us(e.Dur)
		case e.Ph == "b" && e.Cat == "wait":
			begin[e.ID] = e.Ts
		case e.Ph == "e" && e.Cat == "wait":
			s.waits += us(e.Ts - begin[e.ID])
		}
	}
	return s, nil
}

func main() {
	top := flag.Int("top", 10, "how many jobs with the largest change to list")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: tracediff [-top N] BEFORE.json AFTER.json")
		os.Exit(2)
	}
	a, err := load(flag.Arg(0))
	if err == nil {
		var b *summary
		if b, err = load(flag.Arg(1)); err == nil {
			report(a, b, *top)
			return
		}
	}
	fmt.Fprintln(os.Stderr, "tracediff:", err)
	os.Exit(1)
}

func report(a, b *summary, top int) {
	row := func(what string, x, y time.Duration) {
		pct := ""
		if x > 0 {
			pct = fmt.Sprintf("%+.1f%%", 100*float64(y-x)/float64(x))
		}
		fmt.Printf("%-28s %12v %12v %9s\n", what, x.Round(time.Millisecond), y.Round(time.Millisecond), pct)
	}
	fmt.Printf("%-28s %12s %12s %9s\n", "", "before", "after", "change")
	row("wall time", a.wall, b.wall)
	row("queue waits (sum)", a.waits, b.waits)
	var queues []string
	for q := range a.perQ {
		queues = append(queues, q)
	}
	for q := range b.perQ {
		if _, ok := a.perQ[q]; !ok {
			queues = append(queues, q)
		}
	}
	slices.Sort(queues)
	for _, q := range queues {
		row(q+" jobs (sum)", a.perQ[q], b.perQ[q])
	}
	type change struct {
		job  string
		x, y time.Duration
	}
	var changes []change
	for j, x := range a.jobs {
		if y, ok := b.jobs[j]; ok {
			changes = append(changes, change{j, x, y})
		}
	}
	abs := func(d time.Duration) time.Duration { return max(d, -d) }
	slices.SortFunc(changes, func(p, q change) int { return int(abs(q.y-q.x) - abs(p.y-p.x)) })
	if len(changes) > top {
		changes = changes[:top]
	}
	if len(changes) > 0 {
		fmt.Printf("\nlargest changes, of %d jobs in both traces:\n", len(a.jobs))
	}
	for _, c := range changes {
		row(c.job, c.x, c.y)
	}
}
