package cache

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestStatsEMA(t *testing.T) {
	var s Stats // the zero value is usable
	s.Observe("demo/app.toml", 100*time.Second)
	if got := s.Durations["demo/app.toml"]; got != 100*time.Second {
		t.Errorf("first sample = %v, want it as is", got)
	}
	s.Observe("demo/app.toml", 200*time.Second)
	// 0.3*200 + 0.7*100 = 130
	if got := s.Durations["demo/app.toml"]; got != 130*time.Second {
		t.Errorf("after second sample = %v, want 130s", got)
	}
	s.Observe("demo/app.toml", 30*time.Second)
	// 0.3*30 + 0.7*130 = 100
	if got := s.Durations["demo/app.toml"]; got != 100*time.Second {
		t.Errorf("after third sample = %v, want 100s", got)
	}
}

func TestStatsSaveLoad(t *testing.T) {
	c := openTestCache(t)
	s, err := c.LoadStats()
	if err != nil || len(s.Durations) != 0 {
		t.Fatalf("LoadStats on a new cache = %v, %v", s, err)
	}
	s.Observe("demo/app.toml", 3*time.Second)
	s.Observe("demo/base/gcc.toml", 90*time.Minute)
	if err := c.SaveStats(s); err != nil {
		t.Fatal(err)
	}
	got, err := c.LoadStats()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Durations) != 2 || got.Durations["demo/base/gcc.toml"] != 90*time.Minute {
		t.Errorf("loaded %v", got.Durations)
	}
}

func TestStatsConcurrentSessionsMerge(t *testing.T) {
	c := openTestCache(t)
	seed := &Stats{}
	seed.Observe("demo/a.toml", 10*time.Second)
	seed.Observe("demo/b.toml", 10*time.Second)
	if err := c.SaveStats(seed); err != nil {
		t.Fatal(err)
	}
	s1, _ := c.LoadStats()
	s2, _ := c.LoadStats()
	s1.Observe("demo/a.toml", 20*time.Second) // 13s
	s2.Observe("demo/b.toml", 40*time.Second) // 19s
	s2.Observe("demo/c.toml", 5*time.Second)
	if err := c.SaveStats(s1); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveStats(s2); err != nil {
		t.Fatal(err)
	}
	got, _ := c.LoadStats()
	want := map[string]time.Duration{"demo/a.toml": 13 * time.Second, "demo/b.toml": 19 * time.Second, "demo/c.toml": 5 * time.Second}
	for k, v := range want {
		if got.Durations[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got.Durations[k], v, got.Durations)
		}
	}
}

func TestStatsCorruptFileTolerated(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":     "\x00\x01not json",
		"truncated":   `{"version":1,"durations_ns":{"demo/a.toml":`,
		"wrong shape": `{"version":1,"durations_ns":["x"]}`,
		"future":      `{"version":99,"durations_ns":{}}`,
		"empty":       "",
	} {
		t.Run(name, func(t *testing.T) {
			c := openTestCache(t)
			if err := os.WriteFile(filepath.Join(c.Root, "stats"), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := c.LoadStats()
			if err != nil || s == nil || len(s.Durations) != 0 {
				t.Fatalf("LoadStats = %v, %v; want empty stats and no error", s, err)
			}
			s.Observe("demo/a.toml", time.Second)
			if err := c.SaveStats(s); err != nil {
				t.Fatal(err)
			}
			if got, err := c.LoadStats(); err != nil || got.Durations["demo/a.toml"] != time.Second {
				t.Errorf("after rewrite: %v, %v", got.Durations, err)
			}
		})
	}
}

// A session that learnt no duration (a null build) does not rewrite the stats file: no
// new file, no flush.
func TestStatsNotRewrittenWhenUnchanged(t *testing.T) {
	c := openTestCache(t)
	s, _ := c.LoadStats()
	s.Observe("demo/app.toml", time.Second)
	if err := c.SaveStats(s); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(c.statsPath())
	if err != nil {
		t.Fatal(err)
	}
	s, err = c.LoadStats()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SaveStats(s); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(c.statsPath())
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("the stats file was written again though nothing changed")
	}
}
