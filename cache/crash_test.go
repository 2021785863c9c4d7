package cache

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const crashHelperEnv = "GANTRY_CACHE_CRASH_HELPER"

// TestKillDuringCommits kills (SIGKILL) a process that is busy storing trees
// and committing artifacts, and checks that Verify finds the cache clean and
// every visible artifact complete.
func TestKillDuringCommits(t *testing.T) {
	if root := os.Getenv(crashHelperEnv); root != "" {
		crashHelper(root) // never returns
	}
	if testing.Short() {
		t.Skip("spawns a process")
	}
	root := filepath.Join(t.TempDir(), "cache")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringCommits$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Let it commit a few artifacts, then kill it wherever it is.
	lines := bufio.NewScanner(out)
	for i := 0; i < 5 && lines.Scan(); i++ {
	}
	cmd.Process.Kill()
	cmd.Wait()

	c, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Refs < 5 {
		t.Errorf("Verify after kill -9 = %+v, want clean with at least 5 refs", rep)
	}
	arts, err := c.List("demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arts {
		if err := c.Checkout(a.Files, t.TempDir(), CheckoutOptions{}); err != nil {
			t.Errorf("artifact %s visible but not complete: %v", a.Name(), err)
		}
	}
}

// crashHelper commits artifacts with fresh content until it is killed,
// printing a line after each commit.
func crashHelper(root string) {
	c, err := Open(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	src := root + "-src" // inside the parent test's TempDir
	for i := 0; ; i++ {
		// Every other tree is an install root under tmp/, moved in (TakeTree).
		dir, store := filepath.Join(src, fmt.Sprint(i)), c.StoreTree
		if i%2 == 1 {
			if dir, err = c.TempDir("install"); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			store = c.TakeTree
		}
		for j := range 20 {
			p := filepath.Join(dir, fmt.Sprint("d", j%4), fmt.Sprint("f", j))
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte(fmt.Sprintf("content %d %d", i, j)), 0o644)
		}
		files, err := store(dir)
		if err == nil {
			err = c.Commit(&Artifact{Project: "demo", Element: "app.toml", Key: fmt.Sprint("k", i), Success: true, Files: files})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(i)
	}
}
