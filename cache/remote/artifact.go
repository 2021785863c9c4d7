package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
)

// Moving artifacts between the local cache and a remote, whatever the protocol
// (DESIGN.md §7). Pushes write every blob before the entry; pulls verify every blob
// against its digest before it enters the local CAS, and write the ref last.

// Progress receives the bytes transferred so far and the total expected.
type Progress func(done, total int64)

// Transfer says what one push or pull moved.
type Transfer struct {
	Blobs int   // blobs transferred
	Bytes int64 // bytes transferred
}

// progressInterval is how often a transfer reports its progress, at most.
const progressInterval = 100 * time.Millisecond

// meter counts transferred bytes from several goroutines and reports them at most
// every progressInterval, and once at the end.
type meter struct {
	done, total atomic.Int64
	blobs       atomic.Int64
	progress    Progress
	mu          sync.Mutex
	last        time.Time
}

func (m *meter) add(n int64) {
	m.done.Add(n)
	m.report(false)
}

func (m *meter) report(force bool) {
	if m.progress == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if now := time.Now(); force || now.Sub(m.last) >= progressInterval {
		m.last = now
		m.progress(m.done.Load(), m.total.Load())
	}
}

func (m *meter) transfer() Transfer {
	return Transfer{Blobs: int(m.blobs.Load()), Bytes: m.done.Load()}
}

// artifactBlobs is everything an artifact is made of, as a remote keeps it.
type artifactBlobs struct {
	entry Entry
	all   []cache.Digest          // every blob, each once
	tree  []byte                  // the REAPI Tree blob (not stored locally)
	mem   map[cache.Digest][]byte // blobs served from memory rather than the CAS
}

// collectBlobs lists the blobs of a's files tree, its record and log, and builds the
// Tree blob of the files from the local Directory blobs.
func collectBlobs(c *cache.Cache, a *cache.Artifact) (*artifactBlobs, error) {
	record, err := recordDigest(c, a.Project, a.Element, a.Key)
	if err != nil {
		return nil, err
	}
	ab := &artifactBlobs{entry: Entry{Files: a.Files, Record: record, Log: a.Log}, mem: map[cache.Digest][]byte{}}
	seen := map[cache.Digest]bool{}
	addBlob := func(d cache.Digest) {
		if !seen[d] {
			seen[d] = true
			ab.all = append(ab.all, d)
		}
	}
	tree := &repb.Tree{}
	queue := []cache.Digest{a.Files}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if seen[d] {
			continue
		}
		addBlob(d)
		dir, err := c.ReadDirectory(d)
		if err != nil {
			return nil, fmt.Errorf("reading the files of %s: %w", a.Name(), c.BlobReadFailed(d, err))
		}
		if tree.Root == nil {
			tree.Root = dir
		} else {
			tree.Children = append(tree.Children, dir)
		}
		for _, f := range dir.Files {
			addBlob(cache.DigestFromProto(f.Digest))
		}
		for _, sub := range dir.Directories {
			queue = append(queue, cache.DigestFromProto(sub.Digest))
		}
	}
	ab.tree, err = proto.MarshalOptions{Deterministic: true}.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("encoding the tree of %s: %w", a.Name(), err)
	}
	ab.entry.Tree = cache.DigestOf(ab.tree)
	ab.mem[ab.entry.Tree] = ab.tree
	addBlob(ab.entry.Tree)
	addBlob(record)
	if !a.Log.IsZero() {
		addBlob(a.Log)
	}
	return ab, nil
}

// recordDigest reads which record blob the ref of an artifact points at.
func recordDigest(c *cache.Cache, project, element, key string) (cache.Digest, error) {
	refPath, err := c.RefPath(project, element, key)
	if err != nil {
		return cache.Digest{}, err
	}
	data, err := os.ReadFile(refPath)
	if err != nil {
		return cache.Digest{}, fmt.Errorf("reading the ref of %s/%s/%s: %w", project, element, key, err)
	}
	d, err := cache.ParseDigest(string(bytes.TrimSpace(data)))
	if err != nil {
		return cache.Digest{}, &cache.CorruptRefError{Ref: refPath, Err: err}
	}
	return d, nil
}

// PushArtifact uploads the successful artifact a to store: the blobs the remote
// lacks first, then the entry, then its weak entry (weak.go). If the remote already
// has an entry for a's key, it pushes nothing but a missing weak entry and reports
// pushed false. Every blob is hashed as it is read
// for the upload: a blob of a that is missing or damaged locally stops the push
// before the remote stores it or the entry, with a *BlobError (a damaged blob is
// removed from the cache; the caller drops a, see DropArtifact).
func PushArtifact(ctx context.Context, c *cache.Cache, store Store, a *cache.Artifact, progress Progress) (t Transfer, pushed bool, err error) {
	if !a.Success {
		return t, false, fmt.Errorf("pushing %s: only successful artifacts are pushed", a.Name())
	}
	if e, err := store.GetEntry(ctx, a.Key); err == nil {
		return t, false, pushWeakEntry(ctx, store, a, e)
	} else if !errors.Is(err, cache.ErrNotFound) && !IsKind(err, Corrupt) {
		return t, false, err
	}
	ab, err := collectBlobs(c, a)
	if err != nil {
		return t, false, fmt.Errorf("pushing %s: %w", a.Name(), err)
	}
	missing, err := store.FindMissing(ctx, ab.all)
	if err != nil {
		return t, false, err
	}
	m := &meter{progress: progress}
	if err := uploadBlobs(ctx, c, store, a, ab, missing, m); err != nil {
		return m.transfer(), false, err
	}
	// The entry last: a remote never names a blob it does not have. Then its weak
	// entry, naming the same blobs.
	if err := store.UpdateEntry(ctx, a.Key, &ab.entry); err != nil {
		return m.transfer(), false, err
	}
	if err := pushWeakEntry(ctx, store, a, &ab.entry); err != nil {
		return m.transfer(), true, err
	}
	m.report(true)
	return m.transfer(), true, nil
}

// Repair says what RepairArtifact did about the blobs a remote served wrong
// bytes for.
type Repair struct {
	Replaced      []cache.Digest // uploaded again, and now served right
	NotInArtifact []cache.Digest // not blobs of the artifact pushed (its build is not reproducible): the entry no longer names them
}

// RepairArtifact pushes the successful artifact a to store, which served wrong
// bytes for a's key (poisoned: the blobs named, or its entry when none is),
// though it may say it has every blob and the entry: every blob of a is
// uploaded again, present or not, and the entry is written over. An HTTP cache
// replaces what it held on a PUT (nginx's WebDAV, gantry's server); a REAPI
// server may keep the first copy of a blob it has and skip the write, so each
// poisoned blob of a is read back and checked before the entry is written: one
// still wrong gives a Corrupt error naming it, and the entry is left as it
// was. Local blobs are checked as for PushArtifact.
func RepairArtifact(ctx context.Context, c *cache.Cache, store Store, a *cache.Artifact, poisoned []cache.Digest, progress Progress) (Transfer, Repair, error) {
	var rep Repair
	if !a.Success {
		return Transfer{}, rep, fmt.Errorf("pushing %s: only successful artifacts are pushed", a.Name())
	}
	ab, err := collectBlobs(c, a)
	if err != nil {
		return Transfer{}, rep, fmt.Errorf("pushing %s: %w", a.Name(), err)
	}
	m := &meter{progress: progress}
	if err := uploadBlobs(ctx, c, store, a, ab, ab.all, m); err != nil {
		return m.transfer(), rep, err
	}
	for _, d := range poisoned {
		if !slices.Contains(ab.all, d) {
			rep.NotInArtifact = append(rep.NotInArtifact, d)
			continue
		}
		if err := readBack(ctx, store, d); err != nil {
			return m.transfer(), rep, err
		}
		rep.Replaced = append(rep.Replaced, d)
	}
	if err := store.UpdateEntry(ctx, a.Key, &ab.entry); err != nil {
		return m.transfer(), rep, err
	}
	m.report(true)
	return m.transfer(), rep, nil
}

// readBack reads blob d from store, which was just sent its good bytes, and
// checks them.
func readBack(ctx context.Context, store Store, d cache.Digest) error {
	h := cache.NewDigestWriter()
	err := corruptIfTooLong(store, d, store.ReadBlob(ctx, d, &limitWriter{w: h, left: d.Size}))
	if err == nil {
		if got := h.Digest(); got != d {
			err = mismatchFrom(store, d, got)
		}
	}
	if IsKind(err, Corrupt) {
		return &Error{Remote: store.Name(), Op: "replacing blob " + d.String(), Kind: Corrupt, Blob: d,
			Err: fmt.Errorf("the good bytes were uploaded again, but it still serves wrong ones (%w): the server kept its copy, or damages what it serves; remove the blob from the server's store (gantry cache verify --repair --dir on a gantry server)", err)}
	}
	return err
}

// uploadBlobs uploads the blobs ds of artifact a (ab), hashing each as it is
// read. A local blob found missing or damaged gives a *BlobError.
func uploadBlobs(ctx context.Context, c *cache.Cache, store Store, a *cache.Artifact, ab *artifactBlobs, ds []cache.Digest, m *meter) error {
	for _, d := range ds {
		m.total.Add(d.Size)
	}
	m.report(true)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	for _, d := range ds {
		g.Go(func() error {
			open := func() (io.ReadCloser, error) {
				if data, ok := ab.mem[d]; ok {
					return io.NopCloser(bytes.NewReader(data)), nil
				}
				return c.OpenBlob(d)
			}
			if err := store.WriteBlob(gctx, d, open); err != nil {
				return uploadFailure(c, a, d, err)
			}
			m.blobs.Add(1)
			m.add(d.Size)
			return nil
		})
	}
	return g.Wait()
}

// uploadFailure is the error of uploading blob d of a: a *BlobError, the damaged
// blob removed, when the local content is missing or not d; err otherwise.
func uploadFailure(c *cache.Cache, a *cache.Artifact, d cache.Digest, err error) error {
	var ue *uploadError
	if !errors.As(err, &ue) || ue.Digest != d || !(errors.Is(ue.Err, cache.ErrCorrupt) || errors.Is(ue.Err, fs.ErrNotExist)) {
		return err
	}
	return fmt.Errorf("pushing %s: %w", a.Name(), c.BlobReadFailed(d, ue.Err))
}

// PullArtifact downloads the artifact of project/element/key from store into the
// local cache: every blob it lacks, each verified against its digest before it is
// stored, and the ref last. A remote without the artifact gives an error wrapping
// ErrNotFound; bytes that do not match their digest give a Corrupt error and
// are never stored.
func PullArtifact(ctx context.Context, c *cache.Cache, store Store, project, element, key string, progress Progress) (Transfer, error) {
	m := &meter{progress: progress}
	e, err := store.GetEntry(ctx, key)
	if err != nil {
		return m.transfer(), err
	}
	// The Directories: from the Tree blob when the remote keeps one, then any the
	// tree did not give (ReferenceStorage keeps no Tree) one by one.
	if !e.Tree.IsZero() && !c.HasBlob(e.Files) {
		data, err := fetchSmall(ctx, store, e.Tree, m)
		if err != nil {
			return m.transfer(), err
		}
		var tree repb.Tree
		if err := proto.Unmarshal(data, &tree); err != nil {
			return m.transfer(), &Error{Remote: store.Name(), Op: "decoding tree " + e.Tree.String(), Kind: Corrupt, Err: err}
		}
		for _, dir := range append([]*repb.Directory{tree.Root}, tree.Children...) {
			if dir == nil || cache.ValidateDirectory(dir) != nil {
				continue // fetched one by one below, where a bad one is reported
			}
			if _, err := c.PutDirectory(dir); err != nil {
				return m.transfer(), err
			}
		}
	}
	files, err := pullDirectories(ctx, c, store, e.Files, m)
	if err != nil {
		return m.transfer(), err
	}
	needed := []cache.Digest{e.Record}
	if !e.Log.IsZero() {
		needed = append(needed, e.Log)
	}
	needed = append(needed, files...)
	var missing []cache.Digest
	seen := map[cache.Digest]bool{}
	for _, d := range needed {
		if !seen[d] && !c.HasIntactBlob(d) {
			seen[d] = true
			missing = append(missing, d)
			m.total.Add(d.Size)
		}
	}
	m.report(true)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	for _, d := range missing {
		g.Go(func() error { return pullBlob(gctx, c, store, d, m) })
	}
	if err := g.Wait(); err != nil {
		return m.transfer(), err
	}
	data, err := c.ReadBlob(e.Record)
	if err != nil {
		return m.transfer(), err
	}
	// Elements with the same inputs share a cache key, so the remote's record may
	// name another element (or project) with this key: same files, same log. The
	// local record names this one.
	var names struct{ Project, Element string }
	// A record that does not decode leaves names empty: DecodeRecord, below, decodes
	// it again and reports it damaged.
	_ = json.Unmarshal(data, &names)
	a, err := cache.DecodeRecord(data, e.Record, names.Project, names.Element, key)
	if err == nil {
		a.Project, a.Element = project, element
	}
	if err != nil {
		return m.transfer(), &Error{Remote: store.Name(), Op: "reading the record of " + project + "/" + element + "/" + key, Kind: Corrupt, Err: err}
	}
	if !a.Success || a.Files != e.Files || a.Log != e.Log {
		return m.transfer(), &Error{Remote: store.Name(), Op: "reading the record of " + a.Name(), Kind: Corrupt,
			Err: errors.New("the record does not match the entry, or records a failed build")}
	}
	if err := c.Commit(a); err != nil {
		return m.transfer(), err
	}
	m.report(true)
	return m.transfer(), nil
}

// pullDirectories makes every Directory of the tree at root present locally, level
// by level, and returns the digests of the tree's file blobs.
func pullDirectories(ctx context.Context, c *cache.Cache, store Store, root cache.Digest, m *meter) ([]cache.Digest, error) {
	var files []cache.Digest
	seen := map[cache.Digest]bool{root: true}
	level := []cache.Digest{root}
	for len(level) > 0 {
		dirs := make([]*repb.Directory, len(level))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(parallelism)
		for i, d := range level {
			g.Go(func() error {
				// Read (hashed and checked) where it is here and intact; else fetched.
				if dir, err := c.ReadDirectory(d); err == nil {
					dirs[i] = dir
					return nil
				}
				data, err := fetchSmall(gctx, store, d, m)
				if err != nil {
					return err
				}
				dir := &repb.Directory{}
				if err := proto.Unmarshal(data, dir); err != nil || cache.ValidateDirectory(dir) != nil {
					return &Error{Remote: store.Name(), Op: "reading directory " + d.String(), Kind: Corrupt, Err: errors.New("not a valid Directory")}
				}
				if _, err := c.PutBlob(data); err != nil {
					return err
				}
				dirs[i] = dir
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		level = level[:0:0]
		for _, dir := range dirs {
			for _, f := range dir.Files {
				files = append(files, cache.DigestFromProto(f.Digest))
			}
			for _, sub := range dir.Directories {
				if d := cache.DigestFromProto(sub.Digest); !seen[d] {
					seen[d] = true
					level = append(level, d)
				}
			}
		}
	}
	return files, nil
}

// fetchSmall reads a blob small enough for memory (a Directory, a Tree, a record)
// and verifies it.
func fetchSmall(ctx context.Context, store Store, d cache.Digest, m *meter) ([]byte, error) {
	var buf bytes.Buffer
	if err := store.ReadBlob(ctx, d, &limitWriter{w: &buf, left: d.Size}); err != nil {
		return nil, corruptIfTooLong(store, d, err)
	}
	if got := cache.DigestOf(buf.Bytes()); got != d {
		return nil, mismatchFrom(store, d, got)
	}
	m.blobs.Add(1)
	m.add(d.Size)
	return buf.Bytes(), nil
}

// pullBlob downloads blob d into the local CAS, hashing as it writes; the blob
// enters the CAS only if it matches its digest.
func pullBlob(ctx context.Context, c *cache.Cache, store Store, d cache.Digest, m *meter) error {
	u, err := c.StartBlobImport(d)
	if err != nil {
		return err
	}
	cw := &countWriter{w: u, m: m}
	if err := store.ReadBlob(ctx, d, &limitWriter{w: cw, left: d.Size}); err != nil {
		u.Abort()
		return corruptIfTooLong(store, d, err)
	}
	if got := u.Sum(); got != d {
		u.Abort()
		return mismatchFrom(store, d, got)
	}
	// Durable with the artifact's Commit, before its ref (one syncfs, not an
	// fsync per blob).
	if err := u.CommitVolatile(); err != nil {
		return err
	}
	m.blobs.Add(1)
	return nil
}

// mismatchFrom is the error of blob d received from store hashing to got.
func mismatchFrom(store Store, d, got cache.Digest) error {
	return &Error{Remote: store.Name(), Op: "reading blob " + d.String(), Kind: Corrupt, Blob: d,
		Err: fmt.Errorf("received bytes hash to %s: not stored", got)}
}

// errTooLong stops a download that sends more bytes than its digest says.
var errTooLong = errors.New("more bytes than the digest's size")

// corruptIfTooLong is the error of reading blob d from store: a download that
// sent too many bytes, or any the protocol found wrong (a short stream, gRPC's
// DATA_LOSS), names d as a blob the remote served wrong bytes for.
func corruptIfTooLong(store Store, d cache.Digest, err error) error {
	if errors.Is(err, errTooLong) {
		return &Error{Remote: store.Name(), Op: "reading blob " + d.String(), Kind: Corrupt, Blob: d, Err: errTooLong}
	}
	var re *Error
	if errors.As(err, &re) && re.Kind == Corrupt && re.Blob.IsZero() {
		re.Blob = d
	}
	return err
}

// limitWriter fails once more than left bytes are written.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, errTooLong
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}

// countWriter counts bytes into a meter.
type countWriter struct {
	w io.Writer
	m *meter
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.m.add(int64(n))
	return n, err
}
