package cache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testtree"
)

func TestVerifyClean(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "app.toml", "k1")
	commitSample(t, c, "demo", "lib.toml", "k2")
	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Refs != 2 || rep.Blobs == 0 || len(rep.StrayTemp) != 0 {
		t.Errorf("Verify = %+v, want clean, 2 refs", rep)
	}
	if rep.Blobs != countBlobs(t, c) {
		t.Errorf("Verify checked %d blobs, cas has %d", rep.Blobs, countBlobs(t, c))
	}
}

// A process killed in the middle of a commit leaves temporary files (here: a
// ref being written) but no ref: Verify lists them as stray and stays clean.
func TestVerifyAfterCrashMidCommit(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "app.toml", "k1")

	crashed := &Cache{Root: c.Root, pid: deadPID(t)}
	// The record blob made it, the ref was being written when the process died.
	rd, err := crashed.PutBlob([]byte(`{"version":1,"project":"demo","element":"lib.toml","key":"k2"}`))
	if err != nil {
		t.Fatal(err)
	}
	f, err := crashed.tempFile("write")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(rd.Hash[:10]) // partial
	f.Close()
	// And a blob half copied.
	g, err := crashed.tempFile("blob")
	if err != nil {
		t.Fatal(err)
	}
	g.WriteString("half a bl")
	g.Close()
	// Our own temporary files are not stray: we are alive.
	live, err := c.tempFile("blob")
	if err != nil {
		t.Fatal(err)
	}
	live.Close()

	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Refs != 1 {
		t.Errorf("Verify after crash = %+v, want clean with 1 ref", rep)
	}
	want := []string{f.Name(), g.Name()}
	if len(rep.StrayTemp) != 2 || !contains(rep.StrayTemp, want[0]) || !contains(rep.StrayTemp, want[1]) {
		t.Errorf("StrayTemp = %q, want %q", rep.StrayTemp, want)
	}
	if _, err := c.Lookup("demo", "lib.toml", "k2"); err == nil {
		t.Errorf("half-committed artifact is visible")
	}

	// Open removes stray entries once they are old, and nothing else.
	old := time.Now().Add(-2 * time.Hour)
	for _, p := range []string{f.Name(), live.Name()} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(c.Root); err != nil {
		t.Fatal(err)
	}
	for p, wantExist := range map[string]bool{f.Name(): false, g.Name(): true, live.Name(): true} {
		if _, err := os.Stat(p); (err == nil) != wantExist {
			t.Errorf("after Open: %s exists = %v, want %v", p, err == nil, wantExist)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestVerifyDetectsDamage(t *testing.T) {
	for name, tc := range map[string]struct {
		damage  func(t *testing.T, c *Cache)
		problem string // expected in the report
	}{
		"flipped byte in a file blob": {
			damage: func(t *testing.T, c *Cache) {
				testtree.CorruptFile(t, c.BlobPath(DigestOf([]byte("docs"))))
			},
			problem: "usr/share/doc",
		},
		"missing file blob": {
			damage: func(t *testing.T, c *Cache) {
				os.Remove(c.BlobPath(DigestOf([]byte("docs"))))
			},
			problem: "usr/share/doc",
		},
		"missing directory blob": {
			damage: func(t *testing.T, c *Cache) {
				a, _ := c.Lookup("demo", "app.toml", "k")
				var usr Digest
				c.WalkTree(a.Files, func(e TreeEntry) error {
					if e.Path == "usr" {
						usr = e.Digest
					}
					return nil
				})
				os.Remove(c.BlobPath(usr))
			},
			problem: "files tree at usr",
		},
		"flipped byte in the log": {
			damage: func(t *testing.T, c *Cache) {
				testtree.CorruptFile(t, c.BlobPath(DigestOf([]byte("building app.toml\n"))))
			},
			problem: "log",
		},
		"stray file in refs": {
			damage: func(t *testing.T, c *Cache) {
				os.WriteFile(filepath.Join(c.Root, "refs", "demo", "junk"), nil, 0o644)
			},
			problem: "junk",
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := openTestCache(t)
			commitSample(t, c, "demo", "app.toml", "k")
			tc.damage(t, c)
			rep, err := c.Verify()
			if err != nil {
				t.Fatal(err)
			}
			if rep.Clean() {
				t.Fatalf("Verify = %+v, want problems", rep)
			}
			all := strings.Join(rep.Problems, "\n")
			if !strings.Contains(all, tc.problem) {
				t.Errorf("problems %q do not mention %q", rep.Problems, tc.problem)
			}
			if name != "stray file in refs" && !strings.Contains(all, filepath.Join("refs", "demo", "app.toml", "k")) {
				t.Errorf("problems %q do not name the ref", rep.Problems)
			}
		})
	}
}

func TestVerifyChecksUnreferencedBlobs(t *testing.T) {
	c := openTestCache(t)
	d, err := c.PutBlob([]byte("orphan"))
	if err != nil {
		t.Fatal(err)
	}
	testtree.CorruptFile(t, c.BlobPath(d))
	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || !strings.Contains(strings.Join(rep.Problems, "\n"), c.BlobPath(d)) {
		t.Errorf("Verify = %+v, want the corrupt orphan blob reported", rep)
	}
}
