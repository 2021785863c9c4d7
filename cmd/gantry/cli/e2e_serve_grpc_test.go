package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/cache"
)

// dialServe connects a raw REAPI client to the server, with the test's token.
func dialServe(t *testing.T, s *serveProc) (*grpc.ClientConn, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+s.token)
}

// TestServeResumableWrite: a ByteStream write that breaks off keeps what it
// received; QueryWriteStatus reports it, a write at another offset is refused,
// and a write resumed at the committed offset completes the blob. Wrong bytes
// at the end are refused and leave nothing.
func TestServeResumableWrite(t *testing.T) {
	s := startServe(t)
	conn, ctx := dialServe(t, s)
	bs := bspb.NewByteStreamClient(conn)
	blob, hash := randomBlob(t, 3<<20)
	name := fmt.Sprintf("main/uploads/6d1a2c4e-0000-4000-8000-000000000001/blobs/%s/%d", hash, len(blob))
	half := int64(len(blob) / 2)

	w, err := bs.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&bspb.WriteRequest{ResourceName: name, Data: blob[:half]}); err != nil {
		t.Fatal(err)
	}
	w.CloseSend() // broken off: no finish_write
	w.CloseAndRecv()
	var st *bspb.QueryWriteStatusResponse
	eventually(t, e2eTimeout, "the server has the first half", func() bool {
		st, err = bs.QueryWriteStatus(ctx, &bspb.QueryWriteStatusRequest{ResourceName: name})
		return err == nil && st.CommittedSize == half
	})
	if st.Complete {
		t.Fatal("QueryWriteStatus says complete after half the bytes")
	}
	if _, err := os.Stat(s.blobPath(hash)); err == nil {
		t.Fatal("half a blob is in cas/")
	}
	resume := func(offset int64) (*bspb.WriteResponse, error) {
		w, err := bs.Write(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Send(&bspb.WriteRequest{ResourceName: name, WriteOffset: offset, Data: blob[offset:], FinishWrite: true}); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return w.CloseAndRecv()
	}
	if _, err := resume(half - 10); status.Code(err) != codes.InvalidArgument {
		t.Errorf("write at an offset other than the committed one: %v, want INVALID_ARGUMENT", err)
	}
	resp, err := resume(half)
	if err != nil || resp.CommittedSize != int64(len(blob)) {
		t.Fatalf("resumed write: %v, %v", resp, err)
	}
	st, err = bs.QueryWriteStatus(ctx, &bspb.QueryWriteStatusRequest{ResourceName: name})
	if err != nil || !st.Complete {
		t.Errorf("QueryWriteStatus after the resumed write: %v, %v", st, err)
	}

	// Bytes that do not match the resource's digest.
	other, otherHash := randomBlob(t, 1000)
	bad := append([]byte(nil), other...)
	bad[0] ^= 1
	w, _ = bs.Write(ctx)
	w.Send(&bspb.WriteRequest{ResourceName: fmt.Sprintf("uploads/u2/blobs/%s/%d", otherHash, len(other)), Data: bad, FinishWrite: true})
	if _, err := w.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("write of wrong bytes: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := os.Stat(s.blobPath(otherHash)); err == nil {
		t.Error("wrong bytes were stored")
	}
	s.stop()
	s.verifyStore()
}

// TestServeGetTree: GetTree returns every Directory under a root, and a
// BatchUpdateBlobs entry with wrong bytes is refused alone.
func TestServeGetTree(t *testing.T) {
	s := startServe(t)
	conn, ctx := dialServe(t, s)
	casc := repb.NewContentAddressableStorageClient(conn)
	file, _ := randomBlob(t, 10)
	leaf := &repb.Directory{Files: []*repb.FileNode{{Name: "f", Digest: cache.DigestOf(file).Proto()}}}
	leafData, _ := proto.Marshal(leaf)
	root := &repb.Directory{Directories: []*repb.DirectoryNode{{Name: "sub", Digest: cache.DigestOf(leafData).Proto()}}}
	rootData, _ := proto.Marshal(root)
	req := &repb.BatchUpdateBlobsRequest{}
	for _, b := range [][]byte{file, leafData, rootData} {
		req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: cache.DigestOf(b).Proto(), Data: b})
	}
	req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: cache.DigestOf([]byte("right")).Proto(), Data: []byte("wrong")})
	resp, err := casc.BatchUpdateBlobs(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.Responses {
		want := codes.OK
		if i == 3 {
			want = codes.InvalidArgument
		}
		if codes.Code(r.Status.Code) != want {
			t.Errorf("BatchUpdateBlobs entry %d: %v, want %v", i, r.Status, want)
		}
	}
	stream, err := casc.GetTree(ctx, &repb.GetTreeRequest{RootDigest: cache.DigestOf(rootData).Proto()})
	if err != nil {
		t.Fatal(err)
	}
	var dirs []*repb.Directory
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, r.Directories...)
	}
	if len(dirs) != 2 || !proto.Equal(dirs[0], root) || !proto.Equal(dirs[1], leaf) {
		t.Errorf("GetTree returned %d directories: %v", len(dirs), dirs)
	}
}

// TestServeBatchCallsRefusedWhole: a batch call the server refuses as a whole (a
// digest function other than SHA-256, a read over the batch limit) gets its
// status, and the server goes on serving: a refused batch reply is not there to
// be redacted.
func TestServeBatchCallsRefusedWhole(t *testing.T) {
	s := startServe(t)
	conn, ctx := dialServe(t, s)
	casc := repb.NewContentAddressableStorageClient(conn)
	blob, hash := randomBlob(t, 100)
	d := &repb.Digest{Hash: hash, SizeBytes: int64(len(blob))}
	if _, err := casc.BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{DigestFunction: repb.DigestFunction_SHA1,
		Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: d, Data: blob}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("BatchUpdateBlobs with SHA-1: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := casc.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{DigestFunction: repb.DigestFunction_SHA1,
		Digests: []*repb.Digest{d}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("BatchReadBlobs with SHA-1: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := casc.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{
		Digests: []*repb.Digest{{Hash: hash, SizeBytes: 10 << 20}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("BatchReadBlobs of 10 MiB: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := casc.FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{BlobDigests: []*repb.Digest{d}}); err != nil {
		t.Errorf("FindMissingBlobs after the refused batches: %v", err)
	}
	s.stop()
}

// TestServeBatchReadLimitCannotBeDodged: the sizes a BatchReadBlobs request
// claims cannot take it under the batch limit — a negative size, or sizes whose
// sum wraps around, beside a blob over the limit get INVALID_ARGUMENT, and the
// blob is not read into the server's memory.
func TestServeBatchReadLimitCannotBeDodged(t *testing.T) {
	s := startServe(t)
	blob, hash := randomBlob(t, 5<<20)
	if code, body := s.request("PUT", "/cas/"+hash, blob, true); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	conn, ctx := dialServe(t, s)
	casc := repb.NewContentAddressableStorageClient(conn)
	size := int64(len(blob))
	_, other := randomBlob(t, 10)
	for name, digests := range map[string][]*repb.Digest{
		"a negative size":  {{Hash: hash, SizeBytes: size}, {Hash: other, SizeBytes: -size}},
		"a sum that wraps": {{Hash: hash, SizeBytes: size}, {Hash: other, SizeBytes: math.MaxInt64 - size/2}, {Hash: other, SizeBytes: math.MaxInt64 - size/2}},
	} {
		resp, err := casc.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{Digests: digests}, grpc.MaxCallRecvMsgSize(64<<20))
		if status.Code(err) != codes.InvalidArgument {
			served := 0
			for _, r := range resp.GetResponses() {
				served += len(r.Data)
			}
			t.Errorf("BatchReadBlobs of a %d-byte blob beside %s: %v (%d bytes served), want INVALID_ARGUMENT", size, name, err, served)
		}
	}
	s.stop()
}
