package serve

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"google.golang.org/protobuf/proto"
)

// What the server serves is what was stored. Every blob is hashed while it is
// sent (HTTP GET, ByteStream Read), and the last chunk is held back until the
// hash is known, or before it goes into a reply (BatchReadBlobs, GetTree): a
// client never receives a complete, cleanly ended response with wrong bytes. A blob found damaged is moved to
// quarantine/ (so that it is no longer served and a client's upload of the
// right bytes stores it again), logged and counted; the response is broken
// off (HTTP: the connection is reset; gRPC: DATA_LOSS). An action cache entry
// that names a blob the store no longer has is removed when it is looked up.

// quarantineDir holds blobs found damaged while being served, for whoever
// keeps the server to look at; quarantineKeep and quarantineBytes bound it
// (the newest is always kept).
const (
	quarantineDir   = "quarantine"
	quarantineKeep  = 16
	quarantineBytes = 1 << 30
)

// sendBlob sends bytes [off, off+n) of blob d, open as f (its size already
// checked against d), through out in chunks of at most chunk bytes, hashing
// the whole blob while it reads, the bytes outside the range too. The last
// chunk is sent only once the whole blob hashed to d: on a mismatch the error
// wraps ErrCorrupt (a *cache.MismatchError) and the last chunk is never sent. It
// returns the bytes sent.
func sendBlob(f blobReader, d cache.Digest, off, n int64, chunk int, out chunkSink) (int64, error) {
	h := cache.NewDigestWriter()
	readErr := func(err error) error { return fmt.Errorf("reading blob %s: %w", d, err) }
	if err := hashRange(h, f, 0, off); err != nil {
		return 0, readErr(err)
	}
	r := io.NewSectionReader(f, off, n)
	size := int(max(min(int64(chunk), n), 1))
	var held *[]byte // read and hashed, not sent yet
	defer func() {
		if held != nil {
			out.put(held)
		}
	}()
	// sendHeld sends the chunk held back; out owns it from then on.
	var sent int64
	sendHeld := func() error {
		b := held
		held = nil
		m := int64(len(*b))
		if err := out.send(b); err != nil {
			return err
		}
		sent += m
		return nil
	}
	var read int64
	for read < n || n == 0 {
		next := out.get(size)
		k, err := io.ReadFull(r, *next)
		read += int64(k)
		if k == 0 {
			out.put(next)
		} else {
			h.Write((*next)[:k])
			if held != nil {
				if err := sendHeld(); err != nil {
					out.put(next)
					return sent, err
				}
			}
			*next = (*next)[:k]
			held = next
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return sent, readErr(err)
		}
	}
	if err := hashRange(h, f, off+n, d.Size-off-n); err != nil {
		return sent, readErr(err)
	}
	if got := h.Digest(); got != d {
		return sent, cache.Mismatch(d, got, f.Name())
	}
	if held != nil {
		if err := sendHeld(); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// blobReader is a blob open for reading: an *os.File or a blobFile.
type blobReader interface {
	io.ReaderAt
	Name() string
}

// chunkSink is where sendBlob reads a blob's chunks into and sends them.
type chunkSink interface {
	// get returns a buffer of size bytes (at most the chunk) to read into.
	get(size int) *[]byte
	// send sends *b, a buffer of get's, and takes it: the caller no longer
	// touches it.
	send(b *[]byte) error
	// put gives back a buffer of get's that is not sent.
	put(b *[]byte)
}

// chunkPools holds a sync.Pool of buffers for each chunk size sendBlob is
// called with (a few constants).
var chunkPools sync.Map

func chunkPool(chunk int) *sync.Pool {
	if p, ok := chunkPools.Load(chunk); ok {
		return p.(*sync.Pool)
	}
	p, _ := chunkPools.LoadOrStore(chunk, &sync.Pool{New: func() any { b := make([]byte, chunk); return &b }})
	return p.(*sync.Pool)
}

// smallChunk is the size of the buffers of blobs up to its size: a pool of
// their own, so that a small read neither holds nor, after a collection
// emptied the pool, clears a whole chunk.
const smallChunk = 16 << 10

// writeSink sends chunks through a function that is done with them when it
// returns (an HTTP response's writes): its buffers go back to their pool at
// once.
type writeSink struct {
	chunk int
	write func([]byte) error
}

func newWriteSink(chunk int, write func([]byte) error) writeSink {
	return writeSink{chunk, write}
}

func (w writeSink) get(size int) *[]byte {
	c := w.chunk
	if size <= smallChunk && smallChunk < c {
		c = smallChunk
	}
	b := chunkPool(c).Get().(*[]byte)
	*b = (*b)[:size]
	return b
}

func (w writeSink) send(b *[]byte) error {
	err := w.write(*b)
	w.put(b)
	return err
}

func (w writeSink) put(b *[]byte) { chunkPool(cap(*b)).Put(b) }

// hashRange hashes n bytes of f from off, outside the range a read sends;
// nothing for an empty range (a whole blob's read: io.Copy would allocate
// its buffer all the same).
func hashRange(h io.Writer, f io.ReaderAt, off, n int64) error {
	if n <= 0 {
		return nil
	}
	_, err := io.Copy(h, io.NewSectionReader(f, off, n))
	return err
}

// readBatched reads blob d whole (BatchReadBlobs, GetTree: small blobs, whose
// reply holds them whole anyway) and hashes it; a damaged blob is quarantined,
// and its error wraps ErrCorrupt (a *cache.MismatchError), as sendBlob's.
func (s *Server) readBatched(d cache.Digest) ([]byte, error) {
	f, err := s.c.OpenBlob(d)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := make([]byte, d.Size)
	n, err := io.ReadFull(f, data)
	if err != nil && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("reading blob %s: %w", d, err)
	}
	if got := cache.DigestOf(data[:n]); got != d {
		err := cache.Mismatch(d, got, f.Name())
		s.quarantine(f, d, err)
		return nil, err
	}
	return data, nil
}

// servedCorrupt reports whether err, from sendBlob, says the blob's content
// does not match its name (as opposed to the client going away, or a read
// error).
func servedCorrupt(err error) bool {
	var mm *cache.MismatchError
	return errors.As(err, &mm)
}

// corruptStatus is what a client is told of a blob found damaged: which blob,
// never where the store keeps it.
func corruptStatus(d cache.Digest) string {
	return fmt.Sprintf("blob %s is damaged on the server (its content does not match its digest): the server quarantined it; upload it again", d)
}

// quarantine moves blob d, found damaged while being read through f, out of
// cas/ into quarantine/, logs it and counts it. Only the file that was read
// moves: a client that uploaded the right bytes meanwhile replaced it, and
// that blob stays.
func (s *Server) quarantine(f *os.File, d cache.Digest, cause error) {
	p := s.c.BlobPath(d)
	read, err1 := f.Stat()
	now, err2 := os.Lstat(p)
	if err1 != nil || err2 != nil || !os.SameFile(read, now) {
		s.log.Warn(fmt.Sprintf("blob %s was found damaged; it has been replaced or removed meanwhile", d), "digest", d.String(), "error", cause)
		return
	}
	dir := filepath.Join(s.c.Root, quarantineDir)
	dst := filepath.Join(dir, fmt.Sprintf("%020d-%s", time.Now().UnixNano(), d.Hash))
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.Rename(p, dst)
	}
	if err != nil {
		// It must not be served again, kept or not.
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			s.log.Error(fmt.Sprintf("blob %s is damaged, and could be neither quarantined (%v) nor removed (%v): run `gantry cache verify --dir %s --repair`", d, err, rerr, s.c.Root), "digest", d.String(), "error", cause)
			return
		}
		s.log.Warn(fmt.Sprintf("blob %s is damaged: removed it (quarantining it failed: %v)", d, err), "digest", d.String(), "error", cause)
	} else {
		s.log.Warn(fmt.Sprintf("blob %s is damaged: quarantined it; an upload of the right bytes stores it again", d), "digest", d.String(), "quarantine", dst, "error", cause)
	}
	s.metrics.quarantined.Inc()
	pruneQuarantine(dir, quarantineKeep, quarantineBytes)
}

// pruneQuarantine removes the oldest quarantined blobs beyond keep files or
// maxBytes bytes, keeping the newest whatever its size.
func pruneQuarantine(dir string, keep int, maxBytes int64) {
	entries, err := os.ReadDir(dir) // sorted by name: oldest first
	if err != nil {
		return
	}
	slices.Reverse(entries)
	var total int64
	for i, e := range entries {
		if fi, err := e.Info(); err == nil {
			total += fi.Size()
		}
		if i > 0 && (i >= keep || total > maxBytes) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// abortHTTP breaks off a response whose body is already partly sent: the
// connection is reset (no clean end, not even TLS's close_notify), so that no
// client takes what it received for the whole body. Where the connection
// cannot be taken (HTTP/2), the stream is reset instead.
func abortHTTP(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		if tc, ok := conn.(*tls.Conn); ok {
			conn = tc.NetConn()
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close sends RST
		}
		conn.Close()
	}
	panic(http.ErrAbortHandler)
}

// lookupAC is Cache.ReadActionResult that also removes an entry it finds
// stale, so that the store stops keeping (and answering lookups for) entries
// that will never hit again.
func (s *Server) lookupAC(key cache.Digest) (*repb.ActionResult, []byte, error) {
	ar, data, err := s.c.ReadActionResult(key)
	var stale *cache.StaleActionResultError
	if !errors.As(err, &stale) {
		return ar, data, err
	}
	if s.c.DropActionResult(key, stale.Data) {
		s.log.Info(fmt.Sprintf("%v: removed the entry", err))
	}
	if errors.Is(err, cache.ErrCorrupt) {
		// A damaged tree must go too, or the client, told the store has
		// it, would never upload it again.
		old := &repb.ActionResult{}
		if proto.Unmarshal(stale.Data, old) == nil {
			for _, od := range old.OutputDirectories {
				if od.TreeDigest != nil {
					s.quarantineIfDamaged(od.TreeDigest.Hash)
				}
			}
		}
	}
	return ar, data, err
}

// quarantineIfDamaged hashes the blob stored under hash and quarantines it if
// its content does not match its name.
func (s *Server) quarantineIfDamaged(hash string) {
	f, err := os.Open(s.c.BlobPath(cache.Digest{Hash: hash}))
	if err != nil {
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return
	}
	d := cache.Digest{Hash: hash, Size: fi.Size()}
	if got, err := cache.DigestOfReader(f); err == nil && got != d {
		s.quarantine(f, d, cache.Mismatch(d, got, f.Name()))
	}
}
