// Command cachegen fills a gantry cache with synthetic artifacts, for measuring cache
// maintenance (cache usage, cleanup, gc) on a large cache: by default 20,000 artifacts
// over 4 projects, each with 8 files of its own and one shared by its project, so
// 200,000 blobs (record, root Directory and 8 files per artifact) plus the shared ones.
// Last uses are spread over the past 30 days, so that cleanup has an order to follow.
package main

import (
	"crypto/rand"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/cache"
)

func main() {
	out := flag.String("out", "", "cache directory to fill (required)")
	n := flag.Int("artifacts", 20000, "number of artifacts")
	files := flag.Int("files", 8, "files of its own per artifact")
	size := flag.Int("size", 1024, "bytes per file")
	projects := flag.Int("projects", 4, "number of projects")
	workers := flag.Int("workers", 8, "artifacts written at once")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "cachegen: -out DIR is required")
		os.Exit(2)
	}
	c, err := cache.Open(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cachegen:", err)
		os.Exit(1)
	}
	shared := make([]cache.Digest, *projects)
	for p := range shared {
		if shared[p], err = c.PutBlob([]byte(fmt.Sprintf("shared by every artifact of project %d\n", p))); err != nil {
			fail(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= *n {
					return
				}
				if err := artifact(c, i, *files, *size, *projects, *n, shared); err != nil {
					fail(err)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("cachegen: %d artifacts in %s in %s\n", *n, *out, time.Since(start).Round(time.Millisecond))
}

func artifact(c *cache.Cache, i, files, size, projects, n int, shared []cache.Digest) error {
	p := i % projects
	dir := &repb.Directory{}
	buf := make([]byte, size)
	for f := range files {
		rand.Read(buf)
		d, err := c.PutBlob(buf)
		if err != nil {
			return err
		}
		dir.Files = append(dir.Files, &repb.FileNode{Name: fmt.Sprintf("f%02d", f), Digest: d.Proto()})
	}
	dir.Files = append(dir.Files, &repb.FileNode{Name: "shared", Digest: shared[p].Proto()})
	root, err := c.PutDirectory(dir)
	if err != nil {
		return err
	}
	a := &cache.Artifact{Project: fmt.Sprintf("proj%d", p), Element: fmt.Sprintf("el%05d.toml", i),
		Key: fmt.Sprintf("%x", sha256.Sum256([]byte(strconv.Itoa(i)))), Success: true, Files: root, Finished: time.Now()}
	if err := c.Commit(a); err != nil {
		return err
	}
	// Uses spread over 30 days, in a scrambled order.
	age := float64((i*7919)%n) / float64(n)
	used := time.Now().Add(-time.Duration(age * float64(30*24*time.Hour)))
	ref, _ := c.RefPath(a.Project, a.Element, a.Key)
	return os.Chtimes(ref, used, used)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cachegen:", err)
	os.Exit(1)
}
