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
