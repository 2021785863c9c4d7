package remote

// The names clients and `gantry cache serve` agree on beyond REAPI: the
// build-once lease (docs/serve.md, "Build-once leases") and its fencing token.
// A server is free to ignore them; gantry's reads them.

// FencingHeader carries the fencing token of a build-once lease on an AC PUT.
const FencingHeader = "X-Gantry-Fencing-Token"

// FencingMetadata carries the fencing token of a build-once lease on UpdateActionResult.
const FencingMetadata = "x-gantry-fencing-token"

// LeaseReply is the answer to a lease request (POST /lease/<key>).
type LeaseReply struct {
	Granted bool   `json:"granted"`          // the caller holds the lease: build, then push with Token
	Token   uint64 `json:"token,omitempty"`  // fencing token of the caller's lease
	Present bool   `json:"present"`          // the entry is there: pull it
	TTLms   int64  `json:"ttl_ms"`           // how long the lease lasts without renewal
	WaitMs  int64  `json:"wait_ms"`          // when not granted: ask again after this long
	Holder  string `json:"holder,omitempty"` // when not granted: the client holding the lease (its name, never a credential)
}

// gRPC flow control of blob transfers, on gantry's clients and on `cache
// serve`: fixed windows large enough that a 1 MiB ByteStream message never
// waits for a window update on loopback or a LAN (gRPC's default starts at
// 64 KiB and grows by probing the bandwidth-delay product), and transport
// buffers of 256 KiB rather than 32 KiB (fewer system calls per MiB).
const (
	GRPCStreamWindow = 8 << 20  // per stream
	GRPCConnWindow   = 32 << 20 // per connection, all its streams
	GRPCBufferSize   = 256 << 10
)
