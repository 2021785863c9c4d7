package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
)

// VerifyReport is the result of Verify.
type VerifyReport struct {
	Refs  int // refs checked
	Blobs int // distinct blobs whose size and hash were checked
	Twins int // executable twins checked (twin.go)
	// ACEntries is the action cache entries checked: a server's store has
	// them (ac/, actioncache.go), a local cache none.
	ACEntries int

	// Problems names each ref or blob that is damaged and what is wrong.
	Problems []string

	// StrayTemp lists tmp/ entries left by processes that have exited (a
	// crash or kill -9 mid-write). They are not problems: nothing refers to
	// them, and Open removes them once they are an hour old.
	StrayTemp []string

	repairs // what Repair would fix
}

// Clean reports whether Verify found no problems. Stray temporary files do
// not make a cache unclean.
func (r *VerifyReport) Clean() bool { return len(r.Problems) == 0 }

// Verify checks the whole cache: every ref leads to a record that parses,
// every blob it reaches (record, tree directories, files, log) exists with
// the right size and hash, and every tree is complete and well-formed; so
// does every action cache entry of a server's store (verifyAC). It then hashes the blobs of cas/ that no ref reaches, and lists stray tmp/
// entries, and hashes the executable twins. An error is returned only when the check itself cannot proceed.
func (c *Cache) Verify() (*VerifyReport, error) {
	rep := &VerifyReport{}
	refs, refProblems, err := c.listRefs("")
	if err != nil {
		return nil, fmt.Errorf("verifying cache %s: %w", c.Root, err)
	}
	for _, p := range refProblems {
		rep.Problems = append(rep.Problems, p.Error())
		rep.noteRefDir(p)
	}

	// Every blob is hashed once: those of cas/ first, on every core (hashAll), then
	// whatever a ref or entry names that was not there, one by one.
	checked, err := c.hashAll(runtime.GOMAXPROCS(0))
	if err != nil {
		return nil, fmt.Errorf("verifying cache %s: %w", c.Root, err)
	}
	reached := map[Digest]bool{} // what refs and entries named
	check := func(d Digest) error {
		reached[d] = true
		err, ok := checked[d]
		if !ok {
			err = c.checkBlob(d)
			checked[d] = err
		}
		return err
	}
	goodTrees := map[Digest]bool{}
	for _, r := range refs {
		rep.Refs++
		problems := c.verifyRef(r, check, goodTrees)
		for _, err := range problems {
			rep.Problems = append(rep.Problems, fmt.Sprintf("ref %s: %v", r.Path, err))
		}
		rep.noteBroken(r, problems)
	}
	if err := c.verifyAC(check, rep); err != nil {
		return nil, fmt.Errorf("verifying cache %s: %w", c.Root, err)
	}

	if err := c.verifyUnreferenced(reached, checked, rep); err != nil {
		return nil, fmt.Errorf("verifying cache %s: %w", c.Root, err)
	}
	rep.Blobs = len(checked)
	rep.noteCorrupt(checked)
	if err := c.verifyTwins(rep); err != nil {
		return nil, fmt.Errorf("verifying cache %s: %w", c.Root, err)
	}

	if rep.StrayTemp, err = c.StrayTemp(); err != nil {
		return nil, fmt.Errorf("verifying cache %s: %w", c.Root, err)
	}
	return rep, nil
}

// hashAll hashes every blob in place in cas/ with workers goroutines and returns
// what each check said, by digest (name and size on disk). Hashing is most of a
// verify's time, and the walks of refs and trees that ask for blobs one at a time
// then find them checked. A blob gone meanwhile (a concurrent gc) is left out: a ref
// that still names it is checked, and reported missing, when walked.
func (c *Cache) hashAll(workers int) (map[Digest]error, error) {
	var ds []Digest
	err := walkShards(filepath.Join(c.Root, CASDir), "in the CAS", &VerifyReport{}, func(_ string, d Digest, _ fs.FileInfo, inPlace bool) {
		if inPlace {
			ds = append(ds, d)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listing the CAS: %w", err)
	}
	errs := make([]error, len(ds))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(ds); i = int(next.Add(1) - 1) {
				errs[i] = c.checkBlob(ds[i])
			}
		})
	}
	wg.Wait()
	checked := make(map[Digest]error, len(ds))
	for i, d := range ds {
		if !errors.Is(errs[i], fs.ErrNotExist) && !errors.Is(errs[i], ErrNotFound) {
			checked[d] = errs[i]
		}
	}
	return checked, nil
}

// verifyRef checks one ref and everything it reaches.
func (c *Cache) verifyRef(r refName, check func(Digest) error, goodTrees map[Digest]bool) []error {
	data, err := os.ReadFile(r.Path)
	if err != nil {
		return []error{err}
	}
	if rd, err := ParseDigest(strings.TrimSpace(string(data))); err == nil {
		if err := check(rd); err != nil {
			return []error{fmt.Errorf("record: %w", err)}
		}
	}
	a, err := c.readRecord(data, r.Project, r.Element, r.Key)
	if err != nil {
		return []error{fmt.Errorf("record: %w", err)}
	}
	var problems []error
	c.auditTree(a.Files, goodTrees, check, func(p string, err error) {
		problems = append(problems, treeProblem(p, err))
	})
	if !a.BuildTree.IsZero() {
		c.auditTree(a.BuildTree, goodTrees, check, func(p string, err error) {
			problems = append(problems, treeProblem("build tree "+p, err))
		})
	}
	if !a.Log.IsZero() {
		if err := check(a.Log); err != nil {
			problems = append(problems, fmt.Errorf("log: %w", err))
		}
	}
	return problems
}

// treeProblem says where in a tree a problem is.
func treeProblem(p string, err error) error {
	if p == "" {
		return fmt.Errorf("files tree root: %w", err)
	}
	return fmt.Errorf("files tree at %s: %w", p, err)
}

// auditTree walks the tree at root without stopping at problems: it calls
// check on every blob (Directories and files), reads and validates every
// Directory, and calls report with the path in the tree of each problem.
// Subtrees recorded in good (which may be nil) are skipped; subtrees found
// without problems are added to it.
func (c *Cache) auditTree(root Digest, good map[Digest]bool, check func(Digest) error, report func(path string, err error)) {
	var walk func(d Digest, prefix string) bool
	walk = func(d Digest, prefix string) bool {
		if good[d] {
			return true
		}
		if err := check(d); err != nil {
			report(prefix, err)
			return false
		}
		dir, err := c.ReadDirectory(d)
		if err != nil {
			report(prefix, err)
			return false
		}
		ok := true
		for _, f := range dir.Files {
			if err := check(DigestFromProto(f.Digest)); err != nil {
				report(path.Join(prefix, f.Name), err)
				ok = false
			}
		}
		for _, sub := range dir.Directories {
			ok = walk(DigestFromProto(sub.Digest), path.Join(prefix, sub.Name)) && ok
		}
		if ok && good != nil {
			good[d] = true
		}
		return ok
	}
	walk(root, "")
}

// verifyUnreferenced reports the blobs in cas/ that no ref or entry reached and that
// are damaged (hashAll checked them), and files that are not blobs at all.
func (c *Cache) verifyUnreferenced(reached map[Digest]bool, checked map[Digest]error, rep *VerifyReport) error {
	reachedHash := make(map[string]bool, len(reached))
	for d := range reached {
		reachedHash[d.Hash] = true
	}
	return walkShards(filepath.Join(c.Root, CASDir), "in the CAS", rep, func(p string, d Digest, _ fs.FileInfo, inPlace bool) {
		if !inPlace {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: unexpected file in the CAS", p))
			return
		}
		if reachedHash[d.Hash] {
			return // reached from a ref, already reported if bad
		}
		err, ok := checked[d]
		if !ok { // new since hashAll listed the CAS
			err = c.checkBlob(d)
			checked[d] = err
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrNotFound) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("unreferenced blob: %v", err))
		}
	})
}

// walkShards walks a sharded blob directory, root/ab/<sha256> as cas/ and exec/ are
// laid out. A directory that is not a shard is reported in rep as unexpected (where
// says where, e.g. "in the CAS") and skipped. fn gets every file with the digest its
// name and size give, and whether it is where that digest belongs: a valid hash, in
// its own shard, a regular file. Entries removed during the walk (a concurrent gc) are
// passed over; a missing root is an error.
func walkShards(root, where string, rep *VerifyReport, fn func(p string, d Digest, info fs.FileInfo, inPlace bool)) error {
	return filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != root {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if e.IsDir() {
			if p != root && (filepath.Dir(rel) != "." || len(rel) != 2) {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: unexpected directory %s", p, where))
				if d := (Digest{Hash: e.Name()}); d.Validate() == nil && filepath.Dir(rel) == d.Hash[:2] {
					rep.slotDirs = append(rep.slotDirs, p) // where a file should be: it blocks that file for good
				}
				return fs.SkipDir
			}
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		d := Digest{Hash: e.Name(), Size: info.Size()}
		fn(p, d, info, d.Validate() == nil && filepath.Dir(rel) == d.Hash[:2] && info.Mode().IsRegular())
		return nil
	})
}

// verifyAC checks the action cache entries of a server's store (ac/, absent
// from a local cache): each is where its name says, decodes as an
// ActionResult, and every blob it needs (what ReadActionResult requires present, the
// files of its trees included) exists with the right size and hash. A broken
// entry is booked for Repair, which removes it: it could only ever be a miss.
func (c *Cache) verifyAC(check func(Digest) error, rep *VerifyReport) error {
	root := filepath.Join(c.Root, ACDir)
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	err := walkShards(root, "in the action cache", rep, func(p string, d Digest, _ fs.FileInfo, inPlace bool) {
		if !inPlace {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: unexpected file in the action cache", p))
			return
		}
		rep.ACEntries++
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return // removed meanwhile (the server's eviction)
		}
		if err == nil {
			err = c.verifyACEntry(data, check)
		}
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("action cache entry %s: %v", d.Hash, err))
			rep.brokenAC = append(rep.brokenAC, brokenAC{path: p, data: data, reason: err})
		}
	})
	if err != nil {
		return fmt.Errorf("checking the action cache in %s: %w", root, err)
	}
	return nil
}

// verifyACEntry checks one action cache entry and the blobs it needs, and
// returns its first problem.
func (c *Cache) verifyACEntry(data []byte, check func(Digest) error) error {
	ar := &repb.ActionResult{}
	if err := proto.Unmarshal(data, ar); err != nil {
		return fmt.Errorf("not an ActionResult: %v: %w", err, ErrCorrupt)
	}
	blobs, err := c.ActionResultBlobs(ar)
	if err != nil {
		// A tree missing or damaged: hash it, so that a damaged one is booked.
		for _, od := range ar.OutputDirectories {
			if td := DigestFromProto(od.TreeDigest); od.TreeDigest != nil && td.Validate() == nil {
				check(td)
			}
		}
		return err
	}
	var first error
	for _, d := range blobs {
		if err := check(d); err != nil && first == nil {
			first = err
		}
	}
	return first
}
