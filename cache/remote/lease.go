package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/cache/internal/leasepb"
)

// The client side of build-once leases (docs/serve.md, "Build-once leases"). Only gantry's
// own server offers them, over HTTP ([/PREFIX]/lease/<sha256>) and gRPC
// (gantry.lease.v1.Leases on the REAPI port): both stores are Leasers; against any
// other server the asker gets ErrNoLeases and simply builds.

// ErrNoLeases: the remote does not offer build-once leases (it is not gantry's server).
var ErrNoLeases = errors.New("the remote offers no build-once leases (it is not gantry cache serve)")

// Leaser is a Store that can ask for build-once leases.
type Leaser interface {
	// Lease asks for the lease on the artifact of a full cache key, or renews the
	// lease of fencing token token (0: a new ask). A server without leases gives an
	// error wrapping ErrNoLeases.
	Lease(ctx context.Context, key string, token uint64) (LeaseReply, error)
	// ReleaseLease gives the lease of token up (the build failed or stopped).
	ReleaseLease(ctx context.Context, key string, token uint64) error
}

type fencingKey struct{}

// WithFencingToken returns ctx carrying a lease's fencing token: a store's
// UpdateEntry under it sends the token with the entry (X-Gantry-Fencing-Token,
// x-gantry-fencing-token metadata), and the server refuses the entry if a newer
// lease was granted since.
func WithFencingToken(ctx context.Context, token uint64) context.Context {
	if token == 0 {
		return ctx
	}
	return context.WithValue(ctx, fencingKey{}, token)
}

func fencingToken(ctx context.Context) uint64 {
	t, _ := ctx.Value(fencingKey{}).(uint64)
	return t
}

// leaseURL is [/PREFIX]/lease/<Key hash>: under the remote's path, as its cas/ and
// ac/, so that a path-prefix proxy passes it on and a request never leaves the
// remote's prefix on a shared host.
func (s *httpStore) leaseURL(key string, token uint64) string {
	u := *s.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/lease/" + Key(key).Hash
	if token != 0 {
		u.RawQuery = "token=" + strconv.FormatUint(token, 10)
	}
	return u.String()
}

// Lease: POST /lease/<key>[?token=N].
func (s *httpStore) Lease(ctx context.Context, key string, token uint64) (LeaseReply, error) {
	op := "asking for the build-once lease of key " + key
	var reply LeaseReply
	status, body, err := s.leaseRequest(ctx, op, http.MethodPost, s.leaseURL(key, token))
	if err != nil {
		return reply, err
	}
	if err := json.Unmarshal(body, &reply); err != nil || reply.TTLms <= 0 {
		// A 200 that is not a lease reply: a server that answers any POST.
		return reply, fmt.Errorf("remote %s: %s: answered HTTP %d without a lease reply: %w", s.name, op, status, ErrNoLeases)
	}
	return reply, nil
}

// ReleaseLease: DELETE /lease/<key>?token=N.
func (s *httpStore) ReleaseLease(ctx context.Context, key string, token uint64) error {
	_, _, err := s.leaseRequest(ctx, "giving up the build-once lease of key "+key, http.MethodDelete, s.leaseURL(key, token))
	return err
}

// leaseRequest sends a body-less lease request and reads the answer. The statuses
// of a server that has no /lease/ (404, 405, 400, 501) give ErrNoLeases.
func (s *httpStore) leaseRequest(ctx context.Context, op, method, rawURL string) (int, []byte, error) {
	x := s.start(ctx, op)
	defer x.end()
	resp, err := x.do(method, rawURL, nil, 0)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(&watchReader{r: resp.Body, x: x}, replyLimit))
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed ||
		resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotImplemented:
		return 0, nil, fmt.Errorf("remote %s: %s: HTTP %d: %w", s.name, op, resp.StatusCode, ErrNoLeases)
	case resp.StatusCode != http.StatusOK:
		return 0, nil, x.fail(resp.StatusCode, nil)
	case err != nil:
		return 0, nil, x.fail(0, err)
	}
	return resp.StatusCode, body, nil
}

// Lease: gantry.lease.v1.Leases/Acquire.
func (s *grpcStore) Lease(ctx context.Context, key string, token uint64) (LeaseReply, error) {
	op := "asking for the build-once lease of key " + key
	var r *leasepb.LeaseReply
	err := s.leaseCall(ctx, op, func(ctx context.Context) (err error) {
		r, err = s.leases.Acquire(ctx, &leasepb.AcquireRequest{InstanceName: s.instance, KeyHash: Key(key).Hash, Token: token})
		return err
	})
	if err != nil {
		return LeaseReply{}, err
	}
	return LeaseReply{Granted: r.Granted, Token: r.Token, Present: r.Present, TTLms: r.TtlMs, WaitMs: r.WaitMs, Holder: r.Holder}, nil
}

// ReleaseLease: gantry.lease.v1.Leases/Release.
func (s *grpcStore) ReleaseLease(ctx context.Context, key string, token uint64) error {
	return s.leaseCall(ctx, "giving up the build-once lease of key "+key, func(ctx context.Context) error {
		_, err := s.leases.Release(ctx, &leasepb.ReleaseRequest{InstanceName: s.instance, KeyHash: Key(key).Hash, Token: token})
		return err
	})
}

// leaseCall makes a lease call; a server without the Leases service (any REAPI
// server but gantry's) answers UNIMPLEMENTED: ErrNoLeases.
func (s *grpcStore) leaseCall(ctx context.Context, op string, f func(ctx context.Context) error) error {
	unimplemented := false
	err := s.call(ctx, op, func(ctx context.Context) error {
		err := f(ctx)
		unimplemented = status.Code(err) == codes.Unimplemented
		return err
	})
	if unimplemented {
		return fmt.Errorf("remote %s: %s: %w", s.name, op, ErrNoLeases)
	}
	return err
}
