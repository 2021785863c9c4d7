package remote

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Blob transfers of a grpc(s):// remote: blobs whose request fits the server's
// batch limit travel in BatchReadBlobs / BatchUpdateBlobs calls, packed by a
// batcher; larger ones stream over ByteStream.

const (
	// findMissingChunk is how many digests one FindMissingBlobs call asks about
	// (about 80 bytes each: well under a 4 MiB message).
	findMissingChunk = 10000
	// streamChunk is the size of ByteStream write messages.
	streamChunk = 1 << 20
	// streamResumes is how many times a broken ByteStream read that made
	// progress is resumed from where it stopped.
	streamResumes = 3
	// batchBlobOverhead bounds what one blob adds to a batch message besides its
	// bytes (digest, framing, status); batchBaseOverhead the rest of the message,
	// besides the instance name.
	batchBlobOverhead = 128
	batchBaseOverhead = 256
	// batchLanes is how many batch calls of one kind may be in flight at once: as
	// many as a transfer's requests, as over HTTP. A server stores a batch's blobs
	// one after another (gantry's, each made durable), so 4 lanes for 16 callers
	// made a push of 256 KiB blobs about 1.7× HTTP's wall time.
	batchLanes = parallelism
)

// FindMissing asks FindMissingBlobs about ds, in chunks.
func (s *grpcStore) FindMissing(ctx context.Context, ds []cache.Digest) ([]cache.Digest, error) {
	var missing []cache.Digest
	for start := 0; start < len(ds); start += findMissingChunk {
		part := ds[start:min(len(ds), start+findMissingChunk)]
		req := &repb.FindMissingBlobsRequest{InstanceName: s.instance, BlobDigests: digestProtos(part)}
		var resp *repb.FindMissingBlobsResponse
		err := s.call(ctx, fmt.Sprintf("finding which of %d blobs it lacks", len(ds)), func(ctx context.Context) (err error) {
			resp, err = s.cas.FindMissingBlobs(ctx, req)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, p := range resp.MissingBlobDigests {
			missing = append(missing, cache.DigestFromProto(p))
		}
	}
	return missing, nil
}

func digestProtos(ds []cache.Digest) []*repb.Digest {
	ps := make([]*repb.Digest, len(ds))
	for i, d := range ds {
		ps[i] = d.Proto()
	}
	return ps
}

// ReadBlob reads blob d into w: in a batch when it fits, else over ByteStream.
// It returns the bytes as received; a length other than d.Size is an error.
func (s *grpcStore) ReadBlob(ctx context.Context, d cache.Digest, w io.Writer) error {
	if d.Size == 0 {
		return nil // the empty blob: nothing to ask
	}
	info, err := s.server(ctx)
	if err != nil {
		return err
	}
	op := "reading blob " + d.String()
	if !info.reads.fits(d) || info.noBatchReads.Load() {
		return s.readStream(ctx, op, d, w)
	}
	b := &batchOp{d: d}
	defer b.finish()
	if err := info.reads.do(ctx, b); err != nil {
		if status.Code(err) == codes.Unimplemented && ctx.Err() == nil {
			// A server without BatchReadBlobs (Bazel's remote worker): ByteStream
			// for this blob and every read after it.
			info.noBatchReads.Store(true)
			return s.readStream(ctx, op, d, w)
		}
		return s.batchFailure(ctx, op, err)
	}
	if _, err := w.Write(b.data); err != nil {
		return fmt.Errorf("%s from remote %s: %w", op, s.name, err)
	}
	return nil
}

// WriteBlob uploads blob d: in a batch when it fits, else over ByteStream.
func (s *grpcStore) WriteBlob(ctx context.Context, d cache.Digest, open func() (io.ReadCloser, error)) error {
	info, err := s.server(ctx)
	if err != nil {
		return err
	}
	op := "writing blob " + d.String()
	open = hashedUpload(d, open)
	if !info.writes.fits(d) {
		return s.writeStream(ctx, op, d, open)
	}
	data, err := readBlobContent(d, open)
	if err != nil {
		return fmt.Errorf("%s to remote %s: %w", op, s.name, err)
	}
	return s.batchFailure(ctx, op, info.writes.do(ctx, &batchOp{d: d, data: data}))
}

// batchFailure is the error of a batched transfer: the batch call's own, or the
// caller's cancellation.
func (s *grpcStore) batchFailure(ctx context.Context, op string, err error) error {
	if err != nil && ctx.Err() != nil {
		return s.fail(ctx, op, err)
	}
	return err
}

// readBlobContent reads the content of small blob d to upload, into a buffer of
// its size (io.ReadAll's would grow by copies). open is a hashedUpload's: it yields
// d's bytes, checked once the last is read, or fails.
func readBlobContent(d cache.Digest, open func() (io.ReadCloser, error)) ([]byte, error) {
	r, err := open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data := make([]byte, d.Size)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, err
	}
	// The end: where the empty blob's content is checked.
	var one [1]byte
	if _, err := r.Read(one[:]); err != io.EOF {
		return nil, cmp.Or(err, errTooLong)
	}
	return data, nil
}

// resource returns a ByteStream resource name: the instance name, if any, then
// parts.
func (s *grpcStore) resource(parts ...string) string {
	if s.instance != "" {
		parts = append([]string{s.instance}, parts...)
	}
	return strings.Join(parts, "/")
}

// readStream reads blob d over ByteStream.Read. A stream that breaks after
// delivering bytes is resumed where it stopped, up to streamResumes times.
func (s *grpcStore) readStream(ctx context.Context, op string, d cache.Digest, w io.Writer) error {
	var n int64 // bytes written to w
	for resumes := 0; ; resumes++ {
		before := n
		err := s.readStreamFrom(ctx, op, d, w, &n)
		if err == nil || n == before || resumes == streamResumes || ctx.Err() != nil || !IsKind(err, Unavailable) {
			return err
		}
	}
}

// readStreamFrom reads blob d from offset *n on in one ByteStream.Read, each
// message under the idle deadline, advancing *n by what it writes to w.
func (s *grpcStore) readStreamFrom(ctx context.Context, op string, d cache.Digest, w io.Writer, n *int64) error {
	ctx, kick, stop := s.watch(ctx)
	defer stop()
	req := &bspb.ReadRequest{ResourceName: s.resource("blobs", d.Hash, strconv.FormatInt(d.Size, 10)), ReadOffset: *n}
	stream, err := s.bs.Read(ctx, req)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return s.fail(ctx, op, err)
		}
		kick()
		if *n+int64(len(resp.Data)) > d.Size {
			return &Error{Remote: s.name, Op: op, Kind: Corrupt, Err: fmt.Errorf("the server sent more than the blob's %d bytes", d.Size)}
		}
		if _, err := w.Write(resp.Data); err != nil {
			return fmt.Errorf("%s from remote %s: %w", op, s.name, err)
		}
		*n += int64(len(resp.Data))
	}
	if *n != d.Size {
		return &Error{Remote: s.name, Op: op, Kind: Corrupt, Err: fmt.Errorf("the stream ended after %d of the blob's %d bytes", *n, d.Size)}
	}
	return nil
}

// writeStream uploads blob d over ByteStream.Write in streamChunk messages,
// each under the idle deadline. A server that already has the blob may end the
// stream early. An upload that fails or is canceled before its last message
// is never committed: no blob of it reaches the server's CAS.
func (s *grpcStore) writeStream(ctx context.Context, op string, d cache.Digest, open func() (io.ReadCloser, error)) error {
	r, err := open()
	if err != nil {
		return fmt.Errorf("%s to remote %s: %w", op, s.name, err)
	}
	defer r.Close()
	ctx, kick, stop := s.watch(ctx)
	defer stop()
	stream, err := s.bs.Write(ctx)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	name := s.resource("uploads", NewUUID(), "blobs", d.Hash, strconv.FormatInt(d.Size, 10))
	buf := make([]byte, min(d.Size, streamChunk))
	for off := int64(0); off < d.Size; {
		// open is a hashedUpload's: content longer, shorter or other than d
		// fails the read of its last bytes.
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), d.Size-off)])
		if err != nil { // returning cancels the stream: the server never commits the blob
			return fmt.Errorf("%s to remote %s: reading the local content: %w", op, s.name, err)
		}
		req := &bspb.WriteRequest{WriteOffset: off, Data: buf[:n], FinishWrite: off+int64(n) == d.Size}
		if off == 0 {
			req.ResourceName = name
		}
		if err := stream.Send(req); err == io.EOF {
			break // the server ended the stream (it has the blob): CloseAndRecv says how
		} else if err != nil {
			return s.fail(ctx, op, err)
		}
		kick()
		off += int64(n)
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if resp.CommittedSize != d.Size {
		return &Error{Remote: s.name, Op: op, Kind: Refused, Err: fmt.Errorf("the server committed %d of the blob's %d bytes", resp.CommittedSize, d.Size)}
	}
	return nil
}

// NewUUID returns a random (version 4) UUID: an upload's resource name, a
// remote execution session's invocation id.
func NewUUID() string {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// sendReads makes one BatchReadBlobs call for ops and gives each its bytes or
// its error.
func (s *grpcStore) sendReads(ops []*batchOp) {
	want := opsByDigest(ops)
	req := &repb.BatchReadBlobsRequest{InstanceName: s.instance}
	for d := range want {
		req.Digests = append(req.Digests, d.Proto())
	}
	reply := &batchReadReply{resp: &repb.BatchReadBlobsResponse{}}
	err := s.call(s.ctx, fmt.Sprintf("reading a batch of %d blobs", len(want)), func(ctx context.Context) error {
		return s.conn.Invoke(ctx, repb.ContentAddressableStorage_BatchReadBlobs_FullMethodName, req, reply, batchCodec)
	})
	resp := reply.resp
	if err != nil {
		resp = nil
	} else if reply.buf != nil {
		// The blobs are slices of reply.buf: each op gives it back once written (ReadBlob).
		shared := &sharedBuffer{buf: reply.buf}
		shared.refs.Store(int64(len(ops)))
		for _, op := range ops {
			op.release = shared.release
		}
	}
	for _, r := range resp.GetResponses() {
		d, group, rerr := s.answer(want, r.Digest, r.Status, "reading")
		if group == nil {
			continue
		}
		if rerr == nil && int64(len(r.Data)) != d.Size {
			rerr = &Error{Remote: s.name, Op: "reading blob " + d.String(), Kind: Corrupt,
				Err: fmt.Errorf("the server sent %d bytes for a blob of %d", len(r.Data), d.Size)}
		}
		for _, op := range group {
			op.data, op.err = r.Data, rerr
		}
	}
	finishUnanswered(s, want, err)
}

// sendWrites makes one BatchUpdateBlobs call for ops and gives each its error.
func (s *grpcStore) sendWrites(ops []*batchOp) {
	want := opsByDigest(ops)
	req := &repb.BatchUpdateBlobsRequest{InstanceName: s.instance}
	for d, group := range want {
		req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: d.Proto(), Data: group[0].data})
	}
	var resp *repb.BatchUpdateBlobsResponse
	err := s.call(s.ctx, fmt.Sprintf("writing a batch of %d blobs", len(want)), func(ctx context.Context) (err error) {
		resp, err = s.cas.BatchUpdateBlobs(ctx, req, batchCodec)
		return err
	})
	for i, r := range resp.GetResponses() {
		pd := r.Digest
		if pd.GetHash() == "" && len(resp.GetResponses()) == len(req.Requests) {
			// A server that names no digest in its answers (Bazel's remote
			// worker) answers in the order asked.
			pd = req.Requests[i].Digest
		}
		_, group, rerr := s.answer(want, pd, r.Status, "writing")
		for _, op := range group {
			op.err = rerr
		}
	}
	finishUnanswered(s, want, err)
}

// finishUnanswered gives the ops a batch answer did not mention the call's
// error, or, when the call succeeded, an error saying so.
// answer takes out of want the ops a batch response answers, the blob's digest and
// the error its status gives (verb: "reading", "writing"). A response for a blob no
// op asked for, or answered already, gives no ops.
func (s *grpcStore) answer(want map[cache.Digest][]*batchOp, pd *repb.Digest, st *rpcstatus.Status, verb string) (cache.Digest, []*batchOp, error) {
	d := cache.DigestFromProto(pd)
	group, ok := want[d]
	if !ok {
		return d, nil, nil
	}
	delete(want, d)
	return d, group, s.fail(s.ctx, verb+" blob "+d.String(), status.FromProto(st).Err())
}

func finishUnanswered(s *grpcStore, want map[cache.Digest][]*batchOp, callErr error) {
	for d, group := range want {
		err := callErr
		if err == nil {
			err = &Error{Remote: s.name, Op: "transferring blob " + d.String(), Kind: Corrupt,
				Err: errors.New("the server's batch answer does not mention it")}
		}
		for _, op := range group {
			op.err = err
		}
	}
}

func opsByDigest(ops []*batchOp) map[cache.Digest][]*batchOp {
	m := make(map[cache.Digest][]*batchOp, len(ops))
	for _, op := range ops {
		m[op.d] = append(m[op.d], op)
	}
	return m
}

// batchOp is one blob read or write waiting for, or carried by, a batch call.
type batchOp struct {
	d    cache.Digest
	data []byte // a write's content; a read's result
	err  error
	done chan struct{} // closed when data and err are set
	// release, if set, gives back the buffer a read's data is a slice of; it is
	// called once data is no longer used (finish).
	release func()
}

// finish releases the buffer of a read done, once its data is written out. A read
// its caller abandoned before it was answered leaves the buffer to the garbage
// collector.
func (op *batchOp) finish() {
	select {
	case <-op.done:
		if op.release != nil {
			op.release()
		}
	default:
	}
}

// A batcher packs concurrent small-blob requests into few batch calls (group
// commit): a request starts a call at once while fewer than batchLanes are in
// flight; otherwise it queues, and the next call takes as many queued requests
// as fit the server's limit. No timer: an idle remote sees no added latency.
type batcher struct {
	limit    int64 // the server's batch limit
	base     int64 // what a batch message costs besides its blobs
	send     func(ops []*batchOp)
	mu       sync.Mutex
	queue    []*batchOp
	inFlight int // lanes running
}

func newBatcher(limit int64, instanceLen int, send func([]*batchOp)) *batcher {
	return &batcher{limit: limit, base: batchBaseOverhead + int64(instanceLen), send: send}
}

// fits reports whether blob d may travel in a batch.
func (b *batcher) fits(d cache.Digest) bool { return b.base+d.Size+batchBlobOverhead <= b.limit }

// do submits op and waits for its batch call, or for ctx.
func (b *batcher) do(ctx context.Context, op *batchOp) error {
	b.submit(op)
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		return ctx.Err() // the call goes on for the others; op's result is dropped
	}
}

// submit queues op, starting a lane if one is free.
func (b *batcher) submit(op *batchOp) {
	op.done = make(chan struct{})
	b.mu.Lock()
	b.queue = append(b.queue, op)
	start := b.inFlight < batchLanes
	if start {
		b.inFlight++
	}
	b.mu.Unlock()
	if start {
		go b.lane()
	}
}

// lane makes batch calls until the queue is empty.
func (b *batcher) lane() {
	for {
		b.mu.Lock()
		ops := b.take()
		if len(ops) == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.send(ops)
		for _, op := range ops {
			close(op.done)
		}
	}
}

// take removes the longest prefix of the queue that fits one batch (at least
// one op: every queued op fits alone). Called with b.mu held.
func (b *batcher) take() []*batchOp {
	size, n := b.base, 0
	for n < len(b.queue) && (n == 0 || size+b.queue[n].d.Size+batchBlobOverhead <= b.limit) {
		size += b.queue[n].d.Size + batchBlobOverhead
		n++
	}
	ops := b.queue[:n:n]
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil
	}
	return ops
}
