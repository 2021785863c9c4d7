package serve

import (
	"sync"

	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A ByteStream Read sends the blob's chunks from the buffers they were read
// into: gRPC's proto codec copied each into a message buffer (cleared
// first) from gRPC's pool — two passes over every byte sent, a fifth of the
// server's CPU on a large read. serverCodec is that codec for every message
// but readChunkMsg, whose encoding (ReadResponse's, the same bytes) is a
// few bytes of field header followed by the chunk's own buffer, which the
// transport gives back to readPool once it has written it.

// readChunkMsg is one ReadResponse of a ByteStream Read, its data in buf
// (a buffer of readPool's).
type readChunkMsg struct{ buf mem.Buffer }

// readDataField is ReadResponse's data field.
var readDataField = (&bspb.ReadResponse{}).ProtoReflect().Descriptor().Fields().ByName("data").Number()

type serverCodec struct{ proto encoding.CodecV2 }

func newServerCodec() grpc.ServerOption {
	return grpc.ForceServerCodecV2(serverCodec{encoding.GetCodecV2(grpcproto.Name)})
}

// Name is the proto codec's: the content type is application/grpc+proto.
func (serverCodec) Name() string { return grpcproto.Name }

func (c serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*readChunkMsg)
	if !ok {
		return c.proto.Marshal(v)
	}
	n := m.buf.Len()
	if n == 0 { // proto leaves out an empty bytes field
		m.buf.Free()
		return mem.BufferSlice{}, nil
	}
	head := protowire.AppendTag(make([]byte, 0, 8), readDataField, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(n))
	return mem.BufferSlice{mem.SliceBuffer(head), m.buf}, nil
}

func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.proto.Unmarshal(data, v)
}

// readPool holds the buffers of ByteStream reads, readChunk bytes each: a
// mem.BufferPool, to which the transport gives them back once written. Unlike
// gRPC's own pool, it does not clear them: a buffer is read into before it
// is sent, and only the bytes read are sent.
type readBufferPool struct{ pool sync.Pool }

var readPool = &readBufferPool{pool: sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}}

func (p *readBufferPool) Get(length int) *[]byte {
	if length > readChunk {
		b := make([]byte, length)
		return &b
	}
	b := p.pool.Get().(*[]byte)
	*b = (*b)[:length]
	return b
}

func (p *readBufferPool) Put(b *[]byte) {
	if cap(*b) == readChunk {
		p.pool.Put(b)
	}
}

// streamSink sends a Read's chunks as readChunkMsg messages.
type streamSink struct{ stream grpc.ServerStream }

func (s streamSink) get(size int) *[]byte { return readPool.Get(size) }

func (s streamSink) send(b *[]byte) error {
	return s.stream.SendMsg(&readChunkMsg{mem.NewBuffer(b, readPool)})
}

func (s streamSink) put(b *[]byte) { readPool.Put(b) }
