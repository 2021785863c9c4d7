package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// commitShapes are the install roots BenchmarkCommit commits: a no-op element's
// (nothing installed, a log), many small files, a few large ones.
var commitShapes = []struct {
	name              string
	dirs, files, size int
}{{"tiny", 0, 0, 0}, {"small-5000x100B", 50, 100, 100}, {"large-4x32MiB", 1, 4, 32 << 20}}

// writeInstallRoot writes shape's files (content unique to round, so nothing is
// found present) into a fresh install root under the cache's tmp/, as a build
// leaves it, and a build log beside it.
func writeInstallRoot(b *testing.B, c *Cache, dirs, files, size, round int) (root, log string) {
	b.Helper()
	root, err := c.TempDir("install")
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for d := range dirs {
		dir := filepath.Join(root, fmt.Sprint("d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range files {
			copy(data, fmt.Sprintf("%d %d %d ", round, d, f))
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", f)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	log = root + ".log"
	if err := os.WriteFile(log, []byte(fmt.Sprintf("build %d: ok\n", round)), 0o644); err != nil {
		b.Fatal(err)
	}
	return root, log
}

// BenchmarkCommit is a build job's commit: store the install root ("store": copies,
// as commits did before install roots were moved in; "take": moved in, as build jobs do now), store
// the log, commit the record and ref (one syncfs, one directory fsync). Every round
// commits new content.
func BenchmarkCommit(b *testing.B) {
	for _, shape := range commitShapes {
		for _, mode := range []string{"store", "take"} {
			b.Run(shape.name+"/"+mode, func(b *testing.B) {
				b.SetBytes(int64(shape.dirs * shape.files * shape.size))
				c := openTestCache(b)
				store := c.StoreTree
				if mode == "take" {
					store = c.TakeTree
				}
				round := 0
				for b.Loop() {
					b.StopTimer()
					round++
					root, log := writeInstallRoot(b, c, shape.dirs, shape.files, shape.size, round)
					b.StartTimer()
					files, err := store(root)
					if err != nil {
						b.Fatal(err)
					}
					logBlob, err := c.PutFile(log)
					if err != nil {
						b.Fatal(err)
					}
					a := &Artifact{Project: "bench", Element: "e.toml", Key: fmt.Sprint("k", round), Success: true, Files: files, Log: logBlob}
					if err := c.Commit(a); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					removeAll(root)
					os.Remove(log)
					b.StartTimer()
				}
			})
		}
	}
}

// BenchmarkStageExecutables stages a tree of 200 executables of 64 KiB (a base's
// bin/): copies, or a linked staging ("link", as under bwrap), which links each
// to its blob's executable twin (made in the first round; without twins, linking
// staged executables as copies).
func BenchmarkStageExecutables(b *testing.B) {
	src := b.TempDir()
	data := make([]byte, 64<<10)
	for i := range 200 {
		copy(data, fmt.Sprintf("executable %d", i))
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("x%03d", i)), data, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	c := openTestCache(b)
	root, err := c.StoreTree(src)
	if err != nil {
		b.Fatal(err)
	}
	for _, hardlink := range []bool{false, true} {
		name := map[bool]string{false: "copy", true: "link"}[hardlink]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(200 << 16)
			out := b.TempDir()
			for b.Loop() {
				dest := filepath.Join(out, "sysroot")
				if err := c.Checkout(root, dest, CheckoutOptions{Hardlink: hardlink}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := os.RemoveAll(dest); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkGroupCommit is four build jobs committing at once, as a session's build
// jobs end: "each" commits every artifact with Commit (one syncfs and one directory
// fsync each), "group" stores its blobs (StoreBlobs) and leaves its ref to one
// GroupCommitter (one syncfs for every artifact queued while the last one ran). An
// operation is one artifact: its install root written and moved in, its log stored,
// its ref durable.
func BenchmarkGroupCommit(b *testing.B) {
	shapes := []struct {
		name              string
		dirs, files, size int
	}{{"tiny", 0, 0, 0}, {"small-500x100B", 5, 100, 100}, {"large-2x8MiB", 1, 2, 8 << 20}}
	for _, shape := range shapes {
		for _, mode := range []string{"each", "group"} {
			b.Run(shape.name+"/"+mode, func(b *testing.B) {
				b.SetBytes(int64(shape.dirs * shape.files * shape.size))
				c := openTestCache(b)
				g := c.NewGroupCommitter()
				var round atomic.Int64
				b.SetParallelism(2) // four committers on two cores
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						n := int(round.Add(1))
						root, log := writeInstallRoot(b, c, shape.dirs, shape.files, shape.size, n)
						files, err := c.TakeTree(root)
						if err != nil {
							b.Fatal(err)
						}
						logBlob, err := c.PutFile(log)
						if err != nil {
							b.Fatal(err)
						}
						a := &Artifact{Project: "bench", Element: "e.toml", Key: fmt.Sprint("k", n), Success: true, Files: files, Log: logBlob}
						if mode == "each" {
							err = c.Commit(a)
						} else {
							var p PendingRef
							if p, err = c.StoreBlobs(a); err == nil {
								err = g.Commit(p)
							}
						}
						if err != nil {
							b.Fatal(err)
						}
						removeAll(root)
						os.Remove(log)
					}
				})
			})
		}
	}
}
