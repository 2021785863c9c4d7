package cache

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/testtree"
)

// A blob of the right size but the wrong content, or no blob at all, is
// found while checking out (by copy or by hard link, hashed or trusted: the
// write left the blob writable, so a trusted checkout hashes it): the error
// names the blob and its place in the tree, a corrupt blob is removed from the
// CAS, and nothing damaged is left in the destination.
func TestCheckoutDetectsDamagedBlob(t *testing.T) {
	docs := DigestOf([]byte("docs"))
	for _, damage := range []string{"corrupt", "missing"} {
		for _, mode := range checkoutModes {
			t.Run(damage+"/"+mode.name, func(t *testing.T) {
				c := openTestCache(t)
				a := commitSample(t, c, "demo", "app.toml", "k")
				if damage == "corrupt" {
					testtree.CorruptFile(t, c.BlobPath(docs)) // same size, other bytes
				} else if err := os.Remove(c.BlobPath(docs)); err != nil {
					t.Fatal(err)
				}
				dest := t.TempDir()
				err := c.Checkout(a.Files, dest, mode.opts)
				var be *BlobError
				if !errors.As(err, &be) {
					t.Fatalf("Checkout = %v, want a *BlobError", err)
				}
				if be.Digest != docs || be.Path != "usr/share/doc" || be.Missing != (damage == "missing") {
					t.Errorf("BlobError = %+v, want blob %s at usr/share/doc, missing=%v", be, docs, damage == "missing")
				}
				wantErr := ErrCorrupt
				if damage == "missing" {
					wantErr = fs.ErrNotExist
				}
				if !errors.Is(err, wantErr) || !strings.Contains(err.Error(), docs.String()) {
					t.Errorf("Checkout = %v, want it to wrap %v and name %s", err, wantErr, docs)
				}
				if c.HasBlob(docs) {
					t.Errorf("the damaged blob is still in the CAS")
				}
				if _, err := os.Lstat(filepath.Join(dest, "usr", "share", "doc")); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the damaged file was left in the checkout: %v", err)
				}
			})
		}
	}
}

// A Directory blob of the tree that fails its hash is removed and named too.
func TestCheckoutDetectsDamagedDirectory(t *testing.T) {
	c := openTestCache(t)
	a := commitSample(t, c, "demo", "app.toml", "k")
	var share Digest
	c.WalkTree(a.Files, func(e TreeEntry) error {
		if e.Path == "usr/share" {
			share = e.Digest
		}
		return nil
	})
	testtree.CorruptFile(t, c.BlobPath(share))
	err := c.Checkout(a.Files, t.TempDir(), CheckoutOptions{})
	var be *BlobError
	if !errors.As(err, &be) || be.Digest != share || be.Path != "usr/share" || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Checkout = %v, want a *BlobError for the directory usr/share (%s)", err, share)
	}
	if c.HasBlob(share) {
		t.Errorf("the corrupt directory blob is still in the CAS")
	}
}

// Storing content whose blob is present but damaged (same size) replaces the
// blob instead of trusting it: an artifact rebuilt after `artifact delete` is
// sound again.
func TestStoringAgainReplacesCorruptBlob(t *testing.T) {
	for name, put := range map[string]func(c *Cache, content []byte) (Digest, error){
		"PutBlob": func(c *Cache, content []byte) (Digest, error) { return c.PutBlob(content) },
		"PutFile": func(c *Cache, content []byte) (Digest, error) {
			p := filepath.Join(c.Root, "..", "src")
			if err := os.WriteFile(p, content, 0o644); err != nil {
				return Digest{}, err
			}
			return c.PutFile(p)
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := openTestCache(t)
			content := []byte("the content of a library")
			d, err := put(c, content)
			if err != nil {
				t.Fatal(err)
			}
			testtree.CorruptFile(t, c.BlobPath(d))
			if _, err := put(c, content); err != nil {
				t.Fatal(err)
			}
			if err := c.checkBlob(d); err != nil {
				t.Errorf("after storing the content again: %v", err)
			}
			if fi, err := os.Stat(c.BlobPath(d)); err != nil || fi.Mode().Perm() != blobMode {
				t.Errorf("the replaced blob: %v, %v; want mode %v", fi, err, fs.FileMode(blobMode))
			}
		})
	}
}

// `cache verify` reports a directory where a ref file should be, whether it
// is empty or holds files, and still checks the other refs.
func TestVerifyReportsDirectoryInPlaceOfRef(t *testing.T) {
	for name, inside := range map[string]string{"empty": "", "holding a file": "stray"} {
		t.Run(name, func(t *testing.T) {
			c := openTestCache(t)
			commitSample(t, c, "demo", "app.toml", "k")
			dir := filepath.Join(c.Root, "refs", "demo", "lib.toml", "k2")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if inside != "" {
				if err := os.WriteFile(filepath.Join(dir, inside), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := c.Verify()
			if err != nil {
				t.Fatal(err)
			}
			want := dir + " is a directory where an artifact ref should be"
			if len(rep.Problems) != 1 || rep.Problems[0] != want || rep.Refs != 1 {
				t.Errorf("Verify = %+v, want one problem %q and 1 ref checked", rep, want)
			}
		})
	}
}

// TestVerifyReportsStrangersInShards: cas/ and exec/ share one walk of their
// ab/<sha256> layout; a file or directory that does not fit it is reported in each.
func TestVerifyReportsStrangersInShards(t *testing.T) {
	c := openTestCache(t)
	commitSample(t, c, "demo", "app.toml", "k")
	var want []string
	for _, top := range []string{"cas", "exec"} {
		if err := os.MkdirAll(filepath.Join(c.Root, top, "ab"), 0o755); err != nil {
			t.Fatal(err)
		}
		stray := filepath.Join(c.Root, top, "ab", "not-a-hash")
		if err := os.WriteFile(stray, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(c.Root, top, "toolong")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if top == "cas" {
			want = append(want, stray+": unexpected file in the CAS", dir+": unexpected directory in the CAS")
		} else {
			want = append(want, "executable twin "+stray+": not an executable twin", dir+": unexpected directory among the executable twins")
		}
	}
	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		found := false
		for _, p := range rep.Problems {
			found = found || strings.HasPrefix(p, w)
		}
		if !found {
			t.Errorf("Verify problems %q lack %q", rep.Problems, w)
		}
	}
	if len(rep.Problems) != len(want) {
		t.Errorf("Verify found %d problems, want %d: %q", len(rep.Problems), len(want), rep.Problems)
	}
}

// Dropping a damaged artifact is a compare-and-delete: a good artifact of the
// same key that another process committed since (its own build, a pull) stays,
// whether the damaged one is known by its record or, for an artifact this
// session built, by its files tree.
func TestDropArtifactKeepsANewerArtifact(t *testing.T) {
	c := openTestCache(t)
	damaged := commitSample(t, c, "demo", "app.toml", "k")
	newer := *damaged
	newer.Log = DigestOf([]byte("another build\n"))
	if _, err := c.PutBlob([]byte("another build\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(&newer); err != nil {
		t.Fatal(err)
	}
	if newer.Record == damaged.Record {
		t.Fatal("the two artifacts have one record: the test needs two")
	}
	pending := &Artifact{Project: "demo", Element: "app.toml", Key: "k", Files: DigestOf([]byte("other tree"))}
	for _, a := range []*Artifact{damaged, pending} {
		dropped, err := c.DropArtifact(a)
		if err != nil || dropped {
			t.Fatalf("DropArtifact(record %s, files %s) = %v, %v; want false, nil: the ref names another artifact", a.Record, a.Files, dropped, err)
		}
		if !c.RefersTo("demo", "app.toml", "k", newer.Record) {
			t.Fatalf("DropArtifact removed the newer artifact of the same key")
		}
	}
	if dropped, err := c.DropArtifact(&newer); err != nil || !dropped {
		t.Fatalf("DropArtifact(the artifact the ref names) = %v, %v; want true, nil", dropped, err)
	}
	if _, err := c.Lookup("demo", "app.toml", "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup after the drop = %v, want ErrNotFound", err)
	}
	if dropped, err := c.DropArtifact(&newer); err != nil || dropped {
		t.Errorf("DropArtifact of an artifact already gone = %v, %v; want false, nil", dropped, err)
	}
	if stray, _ := c.StrayTemp(); len(stray) != 0 {
		t.Errorf("tmp/ holds %v after the drops", stray)
	}
	entries, _ := os.ReadDir(c.tmpPath())
	if len(entries) != 0 {
		t.Errorf("tmp/ holds %d entries after the drops", len(entries))
	}
}

// A directory where a blob or a ref should be (damage: gantry never puts one
// there) is replaced by the next write of that name; before, every write failed
// with "is a directory", so every build of that element failed until `cache
// verify --repair`.
func TestWriteReplacesADirectoryInPlaceOfAFile(t *testing.T) {
	c := openTestCache(t)
	blob := []byte("hello")
	if err := os.MkdirAll(filepath.Join(c.BlobPath(DigestOf(blob)), "stray"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutBlob(blob); err != nil {
		t.Fatalf("PutBlob over a directory in the blob's place: %v", err)
	}
	if data, err := c.ReadBlob(DigestOf(blob)); err != nil || string(data) != "hello" {
		t.Fatalf("ReadBlob after storing it over a directory = %q, %v", data, err)
	}
	ref, err := c.RefPath("demo", "app.toml", "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ref, "stray"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := commitSample(t, c, "demo", "app.toml", "k")
	if got, err := c.Lookup("demo", "app.toml", "k"); err != nil || got.Record != a.Record {
		t.Fatalf("Lookup after committing over a directory in the ref's place = %v, %v", got, err)
	}
}

// A trusted checkout (what staging a build's dependencies does) checks each
// blob by its type, size and mode, never by its content: a blob cut short, or
// that is not a file, is damage (found, named and removed, as a hashed
// checkout does); a blob made writable is hashed, and staged if its content is
// right; a blob changed in place with its size and mode kept (bit rot, root
// restoring the mode) is staged as it is: only a hashed checkout and Verify
// find it.
func TestTrustedCheckoutChecksTypeSizeAndMode(t *testing.T) {
	docs := DigestOf([]byte("docs"))
	damages := []struct {
		name    string
		damage  func(t *testing.T, blob string)
		corrupt bool   // a trusted checkout finds it
		staged  string // what it stages at usr/share/doc otherwise
	}{
		{"cut short", func(t *testing.T, blob string) {
			if err := os.Truncate(blob, 2); err != nil {
				t.Fatal(err)
			}
		}, true, ""},
		{"a symlink", func(t *testing.T, blob string) {
			other := filepath.Join(t.TempDir(), "other")
			if err := os.WriteFile(other, []byte("docs"), 0o444); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(blob); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, blob); err != nil {
				t.Fatal(err)
			}
		}, true, ""},
		{"made writable", func(t *testing.T, blob string) {
			if err := os.Chmod(blob, 0o644); err != nil {
				t.Fatal(err)
			}
		}, false, "docs"},
		{"changed, size and mode kept", func(t *testing.T, blob string) {
			testtree.CorruptFile(t, blob)
			if err := os.Chmod(blob, blobMode); err != nil {
				t.Fatal(err)
			}
		}, false, "\x9bocs"},
	}
	for _, d := range damages {
		for _, hardlink := range []bool{false, true} {
			t.Run(d.name+map[bool]string{false: "/copy", true: "/hardlink"}[hardlink], func(t *testing.T) {
				c := openTestCache(t)
				a := commitSample(t, c, "demo", "app.toml", "k")
				d.damage(t, c.BlobPath(docs))
				dest := t.TempDir()
				err := c.Checkout(a.Files, dest, CheckoutOptions{Hardlink: hardlink, Trusted: true})
				doc := filepath.Join(dest, "usr", "share", "doc")
				if d.corrupt {
					var be *BlobError
					if !errors.As(err, &be) || be.Digest != docs || be.Path != "usr/share/doc" || be.Missing || !errors.Is(err, ErrCorrupt) {
						t.Fatalf("Checkout = %v, want a *BlobError: %s at usr/share/doc is corrupt", err, docs)
					}
					if _, err := os.Lstat(c.BlobPath(docs)); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("the damaged blob is still in the CAS (%v)", err)
					}
					if _, err := os.Lstat(doc); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("the damaged file was left in the checkout: %v", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Checkout = %v", err)
				}
				if got, err := os.ReadFile(doc); err != nil || string(got) != d.staged {
					t.Errorf("staged usr/share/doc = %q, %v; want %q", got, err, d.staged)
				}
				hashed := c.Checkout(a.Files, t.TempDir(), CheckoutOptions{})
				if good := d.staged == "docs"; good != (hashed == nil) {
					t.Errorf("a hashed checkout after it = %v, want an error: %v", hashed, !good)
				}
			})
		}
	}
}
