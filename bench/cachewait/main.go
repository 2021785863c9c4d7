// Command cachewait reads the `--ui json` events of a gantry build on stdin and says how
// long builds waited for the cache: for each cleanup job, how long it waited for running
// builds to release CACHE (from the end of the build that asked for it, after which no
// build starts, to its start), how long it held CACHE exclusively, and what it freed; for
// each build job that waited for another process's cache lock, how long.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

type event struct {
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Action  string    `json:"action"`
	Job     string    `json:"job"`
	Element string    `json:"element"`
	Text    string    `json:"text"`
	Cleanup *struct {
		Freed    int64   `json:"freed"`
		Duration float64 `json:"duration"`
	} `json:"cleanup"`
}

func main() {
	var evs []event
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Event != "" {
			evs = append(evs, e)
		}
	}
	var lastBuildEnd time.Time // the end of a build after which no build started
	var cleanupStart time.Time
	waiting := map[string]time.Time{} // job -> when it said it waits for the lock
	var drained, held time.Duration
	cleanups := 0
	for _, e := range evs {
		switch {
		case e.Event == "job-start" && e.Action == "build":
			lastBuildEnd = time.Time{}
		case e.Event == "job-end" && e.Action == "build":
			if lastBuildEnd.IsZero() {
				lastBuildEnd = e.Time
			}
		case e.Event == "job-start" && e.Action == "cleanup":
			cleanupStart = e.Time
			if !lastBuildEnd.IsZero() {
				drained += e.Time.Sub(lastBuildEnd)
			}
		case e.Event == "job-end" && e.Action == "cleanup":
			cleanups++
			held += e.Time.Sub(cleanupStart)
			fmt.Printf("cleanup %d: waited for builds to release CACHE %s, held it %s (%s), %s\n", cleanups,
				sinceOr(cleanupStart, lastBuildEnd), e.Time.Sub(cleanupStart).Round(time.Millisecond), e.Job, e.Text)
		case e.Event == "cache-cleanup":
			fmt.Printf("  %s\n", e.Text)
		case e.Event == "notice" && strings.HasPrefix(e.Text, "waiting for the cache lock"):
			waiting[e.Element] = e.Time
		case e.Event == "job-status" && !waiting[e.Element].IsZero():
			fmt.Printf("%s %s waited %s for another process's cache lock\n", e.Action, e.Element, e.Time.Sub(waiting[e.Element]).Round(time.Millisecond))
			delete(waiting, e.Element)
		}
	}
	fmt.Printf("total: %d cleanups; builds held back %s (draining %s, cleanup holding CACHE %s)\n",
		cleanups, (drained + held).Round(time.Millisecond), drained.Round(time.Millisecond), held.Round(time.Millisecond))
}

func sinceOr(t, from time.Time) string {
	if from.IsZero() {
		return "0s"
	}
	return t.Sub(from).Round(time.Millisecond).String()
}
