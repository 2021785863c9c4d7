package serve

import (
	"context"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/internal/leasepb"
	"github.com/gantry-build/gantry/cache/remote"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// leaseService is gantry.lease.v1.Leases: build-once leases over gRPC, the same
// table and answers as POST and DELETE [/PREFIX]/lease/<sha256>.
type leaseService struct {
	leasepb.UnimplementedLeasesServer
	s *Server
}

func (l *leaseService) Acquire(ctx context.Context, req *leasepb.AcquireRequest) (*leasepb.LeaseReply, error) {
	if err := (cache.Digest{Hash: req.KeyHash}).Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "lease key: %v", err)
	}
	r := l.s.askLease(req.KeyHash, grpcClient(ctx), req.Token)
	return &leasepb.LeaseReply{Granted: r.Granted, Token: r.Token, Present: r.Present, TtlMs: r.TTLms, WaitMs: r.WaitMs, Holder: r.Holder}, nil
}

func (l *leaseService) Release(ctx context.Context, req *leasepb.ReleaseRequest) (*leasepb.ReleaseResponse, error) {
	if err := (cache.Digest{Hash: req.KeyHash}).Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "lease key: %v", err)
	}
	l.s.leases.release(req.KeyHash, req.Token)
	return &leasepb.ReleaseResponse{}, nil
}

// askLease answers a lease request on the artifact of key hash: present when its
// entry is stored (pull it), else the lease table's answer.
func (s *Server) askLease(hash, client string, token uint64) remote.LeaseReply {
	if _, _, err := s.lookupAC(cache.Digest{Hash: hash}); err == nil {
		return remote.LeaseReply{Present: true, TTLms: s.opts.LeaseTTL.Milliseconds()}
	}
	return s.leases.acquire(hash, client, token, time.Now())
}
