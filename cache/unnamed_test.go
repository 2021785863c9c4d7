package cache

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestCommitWithoutTemporaryNames: on Linux, a commit's blobs (PutBlob, PutFile), record
// and ref are written as files with no name (O_TMPFILE) and linked into place: here with
// tmp/ replaced by a plain file, where no temporary name can be made. A ref replaced goes
// through a second name under tmp/; where O_TMPFILE is not to be had, every file goes
// through a temporary name as before.
func TestCommitWithoutTemporaryNames(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("O_TMPFILE is Linux's")
	}
	c := openTestCache(t)
	if err := os.Remove(c.tmpPath()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.tmpPath(), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(logFile, []byte("a build log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := c.PutFile(logFile)
	if err != nil {
		t.Fatalf("PutFile needed a temporary name: %v", err)
	}
	a := &Artifact{Project: "demo", Element: "app.toml", Key: "k1", Success: true, Log: log}
	if err := c.Commit(a); err != nil {
		t.Fatalf("Commit needed a temporary name: %v", err)
	}
	if got, err := c.Lookup("demo", "app.toml", "k1"); err != nil || got.Record != a.Record {
		t.Fatalf("Lookup = %+v, %v; want record %s", got, err, a.Record)
	}
	for _, d := range []Digest{a.Record, log} {
		fi, err := os.Stat(c.BlobPath(d))
		if err != nil || fi.Mode().Perm() != blobMode {
			t.Errorf("blob %s: %v, mode %v; want mode %v", d, err, fi.Mode().Perm(), os.FileMode(blobMode))
		}
	}
	if err := c.Commit(&Artifact{Project: "demo", Element: "app.toml", Key: "k1", Success: false, Error: "again"}); err == nil {
		t.Fatal("replacing a ref with no tmp/ directory succeeded; want it to need a second name there")
	}

	if err := os.Remove(c.tmpPath()); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(c.tmpPath(), 0o755); err != nil {
		t.Fatal(err)
	}
	again := &Artifact{Project: "demo", Element: "app.toml", Key: "k1", Success: false, Error: "again"}
	if err := c.Commit(again); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Lookup("demo", "app.toml", "k1"); err != nil || got.Error != "again" {
		t.Fatalf("the replaced ref: %+v, %v", got, err)
	}

	unnamedOff.Store(true)
	t.Cleanup(func() { unnamedOff.Store(false) })
	if err := c.Commit(&Artifact{Project: "demo", Element: "lib.toml", Key: "k2", Success: true}); err != nil {
		t.Fatalf("Commit without O_TMPFILE: %v", err)
	}
	if _, err := c.Lookup("demo", "lib.toml", "k2"); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(c.tmpPath()); err != nil || len(entries) != 0 {
		t.Errorf("tmp/ holds %d entries after the commits (%v), want none", len(entries), err)
	}
	if _, err := openUnnamed(c.Root, 0o600); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("openUnnamed once found unsupported: %v, want errors.ErrUnsupported", err)
	}
}
