package remote

import (
	"errors"
	"sync"
	"sync/atomic"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// batchCodec is the codec of the batch calls: gRPC's proto codec, except that a
// BatchUpdateBlobs request is sent from the blobs' own buffers and a
// BatchReadBlobs response's blobs are slices of the message received. The proto
// codec copies every blob into a cleared message buffer on the way out, and out of
// the message into a new slice on the way in: for 256 KiB blobs a third of a
// pull's page faults and copies. The bytes on the wire are the same.
var batchCodec = grpc.ForceCodecV2(blobCodec{})

type blobCodec struct{}

func protoCodec() encoding.CodecV2 { return encoding.GetCodecV2(grpcproto.Name) }

// Name is the proto codec's: the call's content-type is application/grpc+proto.
func (blobCodec) Name() string { return grpcproto.Name }

// Marshal encodes a BatchUpdateBlobsRequest as the proto codec would (fields in
// another order, which decoders accept), each blob's bytes a buffer of its own, not
// copied; the caller leaves them untouched until the call returns, and drops them
// rather than reuse them (a canceled call's transport may still hold them).
func (blobCodec) Marshal(v any) (mem.BufferSlice, error) {
	req, ok := v.(*repb.BatchUpdateBlobsRequest)
	if !ok {
		return protoCodec().Marshal(v)
	}
	head, err := proto.Marshal(&repb.BatchUpdateBlobsRequest{InstanceName: req.InstanceName, DigestFunction: req.DigestFunction})
	if err != nil {
		return nil, err
	}
	out := make(mem.BufferSlice, 0, 2*len(req.Requests)+1)
	for _, r := range req.Requests {
		fields, err := proto.Marshal(&repb.BatchUpdateBlobsRequest_Request{Digest: r.Digest, Compressor: r.Compressor})
		if err != nil {
			return nil, err
		}
		size := len(fields)
		if len(r.Data) > 0 {
			size += protowire.SizeTag(2) + protowire.SizeBytes(len(r.Data))
		}
		head = protowire.AppendTag(head, 2, protowire.BytesType) // requests
		head = protowire.AppendVarint(head, uint64(size))
		head = append(head, fields...)
		if len(r.Data) > 0 {
			head = protowire.AppendTag(head, 2, protowire.BytesType) // data
			head = protowire.AppendVarint(head, uint64(len(r.Data)))
			out = append(out, mem.SliceBuffer(head), mem.SliceBuffer(r.Data))
			head = nil
		}
	}
	if len(head) > 0 {
		out = append(out, mem.SliceBuffer(head))
	}
	return out, nil
}

// errBadBatch is a BatchReadBlobs response that is not valid protobuf.
var errBadBatch = errors.New("malformed BatchReadBlobsResponse")

// Unmarshal decodes a BatchReadBlobsResponse with each blob's Data a slice of the
// message (one copy out of the transport's frames, none per blob); every other
// field is decoded by the proto codec. A batchReadReply's message is copied into a
// pooled buffer, neither allocated nor cleared per call.
func (blobCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch v := v.(type) {
	case *repb.BatchReadBlobsResponse:
		return decodeBatchRead(data.Materialize(), v)
	case *batchReadReply:
		buf := messageBuffer(data.Len())
		data.CopyTo(*buf)
		if err := decodeBatchRead(*buf, v.resp); err != nil {
			messageBuffers.Put(buf)
			return err
		}
		v.buf = buf
		return nil
	}
	return protoCodec().Unmarshal(data, v)
}

// batchReadReply is a BatchReadBlobsResponse that blobCodec decodes into buf, a
// pooled buffer its blobs' Data are slices of: given back (sharedBuffer) once
// every blob is written out.
type batchReadReply struct {
	resp *repb.BatchReadBlobsResponse
	buf  *[]byte
}

// messageBuffers hold the buffers batch read replies are decoded into.
var messageBuffers sync.Pool

// messageBuffer returns a buffer of n bytes from messageBuffers, or a new one of
// n rounded up to the next MiB.
func messageBuffer(n int) *[]byte {
	if p, ok := messageBuffers.Get().(*[]byte); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n, (n+1<<20-1)&^(1<<20-1))
	return &b
}

// sharedBuffer is a reply's buffer shared by the reads it answers: the last to
// release it puts it back in messageBuffers. A read abandoned by its caller never
// releases it, and the buffer is left to the garbage collector.
type sharedBuffer struct {
	refs atomic.Int64
	buf  *[]byte
}

func (s *sharedBuffer) release() {
	if s.refs.Add(-1) == 0 {
		messageBuffers.Put(s.buf)
	}
}

// decodeBatchRead decodes the BatchReadBlobsResponse b into resp, each blob's
// Data a slice of b.
func decodeBatchRead(b []byte, resp *repb.BatchReadBlobsResponse) error {
	var rest []byte // the message without its responses
	var responses []*repb.BatchReadBlobsResponse_Response
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errBadBatch
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return errBadBatch
		}
		if num != 1 || typ != protowire.BytesType {
			rest = append(rest, b[:n+m]...)
			b = b[n+m:]
			continue
		}
		msg, _ := protowire.ConsumeBytes(b[n:])
		r, err := unmarshalResponse(msg)
		if err != nil {
			return err
		}
		responses = append(responses, r)
		b = b[n+m:]
	}
	if err := proto.Unmarshal(rest, resp); err != nil {
		return err
	}
	resp.Responses = responses
	return nil
}

// unmarshalResponse decodes one Response of a BatchReadBlobsResponse, its Data a
// slice of b (the last one, as proto does for a repeated scalar field).
func unmarshalResponse(b []byte) (*repb.BatchReadBlobsResponse_Response, error) {
	var rest, blob []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errBadBatch
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, errBadBatch
		}
		if num == 2 && typ == protowire.BytesType {
			blob, _ = protowire.ConsumeBytes(b[n:])
		} else {
			rest = append(rest, b[:n+m]...)
		}
		b = b[n+m:]
	}
	r := &repb.BatchReadBlobsResponse_Response{}
	if err := proto.Unmarshal(rest, r); err != nil {
		return nil, err
	}
	r.Data = blob
	return r, nil
}
