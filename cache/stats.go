package cache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"time"
)

// statsAlpha is the weight of a new sample in the moving average of build
// durations.
const statsAlpha = 0.3

// Stats holds build durations learned from earlier builds, for the
// scheduler's critical-path estimates. It is not safe for concurrent use.
type Stats struct {
	// Durations is keyed by "project/element".
	Durations map[string]time.Duration

	loaded map[string]time.Duration // as read by LoadStats, to merge on save
}

// statsFileContent is the stats file: JSON, durations in nanoseconds.
type statsFileContent struct {
	Version   int              `json:"version"`
	Durations map[string]int64 `json:"durations_ns"`
}

const statsVersion = 1

// Observe adds a measured build duration to the exponential moving average
// for key (α = 0.3); the first sample is taken as is.
func (s *Stats) Observe(key string, d time.Duration) {
	if s.Durations == nil {
		s.Durations = map[string]time.Duration{}
	}
	old, ok := s.Durations[key]
	if !ok {
		s.Durations[key] = d
		return
	}
	s.Durations[key] = time.Duration(statsAlpha*float64(d) + (1-statsAlpha)*float64(old))
}

func (c *Cache) statsPath() string { return filepath.Join(c.Root, statsFile) }

// LoadStats reads the learned durations. A missing or corrupt stats file gives
// empty stats and no error: estimates are only hints and must never stop a
// build. Other read errors (permissions) are returned together with empty,
// usable stats, for the caller to show as a warning.
func (c *Cache) LoadStats() (*Stats, error) {
	durations, err := c.readStats()
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errCorruptStats) {
		durations, err = nil, nil
	}
	s := &Stats{Durations: durations, loaded: maps.Clone(durations)}
	if s.Durations == nil {
		s.Durations = map[string]time.Duration{}
	}
	return s, err
}

var errCorruptStats = errors.New("corrupt stats file")

func (c *Cache) readStats() (map[string]time.Duration, error) {
	data, err := os.ReadFile(c.statsPath())
	if err != nil {
		return nil, fmt.Errorf("reading build statistics: %w", err)
	}
	var f statsFileContent
	if err := json.Unmarshal(data, &f); err != nil || f.Version != statsVersion {
		return nil, errCorruptStats
	}
	durations := make(map[string]time.Duration, len(f.Durations))
	for k, ns := range f.Durations {
		if ns < 0 {
			continue
		}
		durations[k] = time.Duration(ns)
	}
	return durations, nil
}

// SaveStats writes s atomically. It merges with the file as it is now, so
// that gantry processes sharing the cache do not undo each other's updates:
// entries of s that changed since LoadStats (or that the file lacks) win,
// every other entry of the file is kept.
func (c *Cache) SaveStats(s *Stats) error {
	if maps.Equal(s.Durations, s.loaded) {
		return nil // nothing learnt: a null build writes nothing (and flushes nothing)
	}
	merged, err := c.readStats()
	if err != nil {
		merged = map[string]time.Duration{} // missing or corrupt: rewrite it
	}
	for k, v := range s.Durations {
		_, onDisk := merged[k]
		if old, loaded := s.loaded[k]; !loaded || old != v || !onDisk {
			merged[k] = v
		}
	}
	f := statsFileContent{Version: statsVersion, Durations: make(map[string]int64, len(merged))}
	for k, v := range merged {
		f.Durations[k] = int64(v)
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding build statistics: %w", err)
	}
	if err := c.writeFileAtomic(c.statsPath(), append(data, '\n'), 0o644, fileSynced); err != nil {
		return fmt.Errorf("saving build statistics: %w", err)
	}
	s.loaded = maps.Clone(s.Durations)
	return nil
}
