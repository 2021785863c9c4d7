package serve

import (
	"bytes"
	"testing"

	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// TestReadChunkEncodedAsReadResponse: a ByteStream Read's chunk, sent from its
// own buffer, is the bytes of the ReadResponse gRPC's proto codec would send,
// for a small chunk, a whole one and one whose length takes another varint
// byte; any other message goes through the proto codec.
func TestReadChunkEncodedAsReadResponse(t *testing.T) {
	c := serverCodec{encoding.GetCodecV2(grpcproto.Name)}
	for _, n := range []int{1, 127, 128, 4096, readChunk} {
		b := readPool.Get(n)
		for i := range *b {
			(*b)[i] = byte(i * 7)
		}
		want, err := proto.Marshal(&bspb.ReadResponse{Data: *b})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Marshal(&readChunkMsg{mem.NewBuffer(b, readPool)})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want) {
			t.Errorf("chunk of %d bytes: encoded as %d bytes, not as the proto codec's %d", n, got.Len(), len(want))
		}
		got.Free()
	}
	other := &bspb.WriteResponse{CommittedSize: 42}
	got, err := c.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	var back bspb.WriteResponse
	if err := c.Unmarshal(got, &back); err != nil || back.CommittedSize != 42 {
		t.Errorf("WriteResponse through the codec: %v, %v; want committed_size 42", &back, err)
	}
}
