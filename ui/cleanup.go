package ui

import (
	"fmt"

	"github.com/gantry-build/gantry/internal/units"
	"github.com/gantry-build/gantry/queues"
)

// cleanupText says what a cache cleanup did: "freed 1.2 MiB (5 artifacts) in 0.3s,
// cache 3.4 MiB of 4.0 MiB".
func cleanupText(e queues.CacheCleanup) string {
	text := fmt.Sprintf("freed %s (%d artifacts) in %s, cache %s of %s", units.Bytes(e.Freed), e.Artifacts,
		formatDuration(e.Duration), units.Bytes(e.After), units.Bytes(e.Quota))
	if e.Live > 0 {
		text += fmt.Sprintf("; kept %d artifacts (%s) other running sessions need", e.Live, units.Bytes(e.LiveBytes))
	}
	return text
}

// jsonCleanup is the "cleanup" member of a cache-cleanup event.
type jsonCleanup struct {
	Freed     int64   `json:"freed"`
	Before    int64   `json:"before"`
	After     int64   `json:"after"`
	Quota     int64   `json:"quota"`
	Artifacts int     `json:"artifacts"`
	Duration  float64 `json:"duration"`
	Live      int     `json:"live"`       // artifacts kept for other running sessions
	LiveBytes int64   `json:"live-bytes"` // the space they take
}

func cleanupJSON(e queues.CacheCleanup) jsonEvent {
	return jsonEvent{Time: e.Time, Event: "cache-cleanup", Action: queues.Cleanup, Text: cleanupText(e), Cleanup: &jsonCleanup{
		Freed: e.Freed, Before: e.Before, After: e.After, Quota: e.Quota, Artifacts: e.Artifacts, Duration: *seconds(e.Duration),
		Live: e.Live, LiveBytes: e.LiveBytes}}
}
