package bgserve

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testreapi"
)

// DirEnv names the directory TestServe writes the server's URL into (file url);
// without it TestServe skips.
const DirEnv = "GANTRY_BENCH_BUILDGRID_DIR"

// PollEnv, a duration, sets BuildGrid's poll intervals (BuildGridOptions.PollInterval;
// unset: BuildGrid's defaults of 1 s).
const PollEnv = "GANTRY_BENCH_BUILDGRID_POLL"

// TestServe starts BuildGrid (testreapi.StartBuildGrid), writes its URL to
// $GANTRY_BENCH_BUILDGRID_DIR/url and serves until SIGTERM or SIGINT; then the
// helper's cleanup stops BuildGrid and its PostgreSQL.
func TestServe(t *testing.T) {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		t.Skip("bench/remote-exec.sh runs it with SERVER=buildgrid (" + DirEnv + " names where the URL goes)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Threads enough for every Execute stream and bot poll the benchmark holds.
	opts := testreapi.BuildGridOptions{ThreadPoolSize: 256}
	if v := os.Getenv(PollEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", PollEnv, v, err)
		}
		opts.PollInterval = d
	}
	bg := testreapi.StartBuildGrid(t, opts)
	tmp := filepath.Join(dir, "url.tmp")
	if err := os.WriteFile(tmp, []byte(bg.URL()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "url")); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
}
