package remote

import (
	"bytes"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The batch codec's messages decode as the proto codec's, and the blobs are not
// copied: a request's blob is sent from its own buffer, a response's blobs are
// slices of one received message.
func TestBatchCodecSendsBlobsUncopied(t *testing.T) {
	blob := bytes.Repeat([]byte("x"), 300<<10)
	req := &repb.BatchUpdateBlobsRequest{InstanceName: "main", DigestFunction: repb.DigestFunction_SHA256,
		Requests: []*repb.BatchUpdateBlobsRequest_Request{
			{Digest: cache.DigestOf(blob).Proto(), Data: blob},
			{Digest: cache.DigestOf(nil).Proto()},
			{Digest: cache.DigestOf([]byte("a")).Proto(), Data: []byte("a"), Compressor: 0},
		}}
	bs, err := blobCodec{}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var got repb.BatchUpdateBlobsRequest
	if err := proto.Unmarshal(bs.Materialize(), &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, req) {
		t.Errorf("decoded %v, want %v", &got, req)
	}
	shared := false
	for _, b := range bs {
		if d := b.ReadOnlyData(); len(d) == len(blob) && &d[0] == &blob[0] {
			shared = true
		}
	}
	if !shared {
		t.Error("the request's blob was copied into the message")
	}

	resp := &repb.BatchReadBlobsResponse{Responses: []*repb.BatchReadBlobsResponse_Response{
		{Digest: cache.DigestOf(blob).Proto(), Data: blob, Status: &rpcstatus.Status{}},
		{Digest: cache.DigestOf([]byte("gone")).Proto(), Status: &rpcstatus.Status{Code: int32(codes.NotFound), Message: "not here"}},
		{Digest: cache.DigestOf([]byte("b")).Proto(), Data: []byte("b")},
	}}
	wire, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	// Received in pieces, as the transport's frames.
	in := mem.BufferSlice{mem.SliceBuffer(wire[:1000]), mem.SliceBuffer(wire[1000:])}
	var dec repb.BatchReadBlobsResponse
	if err := (blobCodec{}).Unmarshal(in, &dec); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&dec, resp) {
		t.Errorf("decoded %v, want %v", &dec, resp)
	}
	first, last := dec.Responses[0].Data, dec.Responses[2].Data
	if &first[:cap(first)][cap(first)-1] != &last[:cap(last)][cap(last)-1] {
		t.Error("the response's blobs were copied out of the message")
	}

	// A reply decoded into a pooled buffer: its blobs are slices of it.
	reply := &batchReadReply{resp: &repb.BatchReadBlobsResponse{}}
	if err := (blobCodec{}).Unmarshal(in, reply); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(reply.resp, resp) {
		t.Errorf("decoded %v, want %v", reply.resp, resp)
	}
	buf := *reply.buf
	if d := reply.resp.Responses[0].Data; &d[0] != &buf[bytes.Index(buf, blob)] {
		t.Error("the reply's blob is not a slice of its buffer")
	}

	if err := (blobCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire[:len(wire)-1])}, &dec); err == nil {
		t.Error("a truncated response decoded")
	}
}
