// Command commit stores a directory tree in a gantry cache and commits it as an
// artifact, as a build job does with its install root, and prints the seconds it took.
// bench/commit.sh runs it beside `cp -a && sync` of the same tree.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gantry-build/gantry/cache"
)

func main() {
	dir := flag.String("dir", "", "tree to commit (required)")
	cacheDir := flag.String("cache", "", "cache directory (required unless -generate)")
	take := flag.Bool("take", false, "commit as a build job does: copy -dir into the cache's tmp/ first (not timed, not synced) and move its files in (TakeTree)")
	generate := flag.String("generate", "", "write a tree into -dir instead: small (50,000 files of 100 bytes) or large (5 files of 100 MB)")
	flag.Parse()
	if *dir != "" && *generate != "" {
		if err := write(*dir, *generate); err != nil {
			fmt.Fprintln(os.Stderr, "commit:", err)
			os.Exit(1)
		}
		return
	}
	if *dir == "" || *cacheDir == "" {
		fmt.Fprintln(os.Stderr, "commit: -dir and -cache are required")
		os.Exit(2)
	}
	c, err := cache.Open(*cacheDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "commit:", err)
		os.Exit(1)
	}
	store, tree := c.StoreTree, *dir
	if *take {
		if tree, err = c.TempDir("install"); err == nil {
			err = exec.Command("cp", "-a", *dir+"/.", tree).Run()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "commit: preparing the install root:", err)
			os.Exit(1)
		}
		store = c.TakeTree
	}
	start := time.Now()
	files, err := store(tree)
	if err == nil {
		err = c.Commit(&cache.Artifact{Project: "bench", Element: "tree.toml", Key: "k", Success: true, Files: files})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "commit:", err)
		os.Exit(1)
	}
	fmt.Printf("%.2f\n", time.Since(start).Seconds())
}

// write generates the tree of the given shape under dir.
func write(dir, shape string) error {
	dirs, files, size := 0, 0, 0
	switch shape {
	case "small":
		dirs, files, size = 500, 100, 100
	case "large":
		dirs, files, size = 1, 5, 100<<20
	default:
		return fmt.Errorf("-generate %q: use small or large", shape)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, size)
	for d := range dirs {
		sub := filepath.Join(dir, fmt.Sprint("d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		for f := range files {
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprint("f", f)), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
