package actions

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
)

// BenchmarkStageSysroot stages one dependency into a fresh sysroot, as a build
// does, beside `cp -a` of the same tree on the same filesystem: 2,000 files of
// 4 KiB in one directory, and 4 files of 32 MiB. "copy" is what the host
// sandbox gets (trusted blobs: copy_file_range, nothing hashed), "hashed copy"
// the copies every file hashed as they were before, "link" what bwrap gets
// (hard links to the read-only blobs). The sysroot is removed between rounds,
// untimed, as a build's is when it ends (so each round's new inodes follow a
// removal, for cp as for gantry). cpu-ns/op is user and system time, this
// process's and cp's: on a loaded machine it says more than the wall time.
//
//	go test ./actions -run X -bench StageSysroot -benchtime 10x
func BenchmarkStageSysroot(b *testing.B) {
	if _, err := exec.LookPath("cp"); err != nil {
		b.Fatal(err)
	}
	for _, set := range []struct {
		name    string
		n, size int
	}{{"2000x4KiB", 2000, 4 << 10}, {"4x32MiB", 4, 32 << 20}} {
		c, err := cache.Open(filepath.Join(b.TempDir(), "cache"))
		if err != nil {
			b.Fatal(err)
		}
		src := filepath.Join(c.Root, "tmp", "bench-src") // cp copies within the cache's filesystem too
		writeBenchTree(b, filepath.Join(src, "lib"), set.n, set.size)
		files, err := c.StoreTree(src)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []struct {
			name string
			opts *cache.CheckoutOptions // nil: cp -a
		}{
			{"copy", &cache.CheckoutOptions{Trusted: true}},
			{"hashed copy", &cache.CheckoutOptions{}},
			{"link", &cache.CheckoutOptions{Hardlink: true, Trusted: true}},
			{"cp -a", nil},
		} {
			b.Run(set.name+"/"+mode.name, func(b *testing.B) {
				b.SetBytes(int64(set.n * set.size))
				sysroot := filepath.Join(c.Root, "tmp", "bench-sysroot")
				var cpu time.Duration
				for b.Loop() {
					before := cpuTime()
					if mode.opts == nil {
						if out, err := exec.Command("cp", "-a", src, sysroot).CombinedOutput(); err != nil {
							b.Fatalf("cp -a: %v: %s", err, out)
						}
					} else if err := newStaging(c, sysroot, *mode.opts).stage("dep.toml", files, nil); err != nil {
						b.Fatal(err)
					}
					cpu += cpuTime() - before
					b.StopTimer()
					if err := os.RemoveAll(sysroot); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// writeBenchTree writes n files of size bytes, each its own content, in dir.
func writeBenchTree(b *testing.B, dir string, n, size int) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	content := make([]byte, size)
	for i := range content {
		content[i] = byte(i * 7)
	}
	for i := range n {
		copy(content, fmt.Sprintf("file %d", i))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), content, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the user and system time of this process and of its children
// waited for.
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}
