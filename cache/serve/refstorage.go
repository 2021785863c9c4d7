package serve

import (
	"context"
	"errors"
	"fmt"
	"path"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/internal/bstpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// BuildStream 1.x's artifact references (buildstream.v2.ReferenceStorage, what
// bst-artifact-server serves): a reference names the root Directory of an
// artifact, whose blobs the client uploads beforehand through the CAS.
//
// A reference is kept as an action cache entry, so that it lives by the rules
// of every entry of the store: the entry under refKey(NAME) is an ActionResult
// listing every blob the reference reaches — each distinct Directory of the
// tree as an output directory (its root_directory_digest; the root first, each
// at the first path it was reached by) and each distinct file as an output
// file. Hence the evictor's unit is the reference with its whole tree (a blob
// goes only with the last entry that needs it), a lookup is a hit only when
// every blob is present (a reference never names evicted blobs: it reads as
// NOT_FOUND and is removed), a lookup refreshes them all for the LRU, and
// `gantry cache verify` checks them. Instance names are ignored, as for the
// action cache: one store for every instance.
//
// Who may write is decided as for the action cache (grpcWrites):
// UpdateReference needs a credential that may write (bst 1.x sends none, so in
// practice a client certificate under --client-ca); GetReference and Status are
// reads. Status tells the client whether it may update.

// refKeyPrefix makes a reference's action cache key: no action's digest can be
// the hash of this text.
const refKeyPrefix = "buildstream.v2.ReferenceStorage:"

// refKey is the action cache key under which reference name is kept.
func refKey(name string) cache.Digest { return cache.DigestOf([]byte(refKeyPrefix + name)) }

type refStorage struct {
	bstpb.UnimplementedReferenceStorageServer
	s *Server
}

func (r *refStorage) GetReference(ctx context.Context, req *bstpb.GetReferenceRequest) (*bstpb.GetReferenceResponse, error) {
	if req.Key == "" {
		return nil, status.Error(codes.InvalidArgument, "no reference name")
	}
	ar, _, err := r.s.lookupAC(refKey(req.Key))
	r.s.metrics.lookup(err == nil)
	if errors.Is(err, cache.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "reference %s is not in the cache", req.Key)
	}
	if err != nil {
		return nil, grpcError(err)
	}
	if len(ar.OutputDirectories) == 0 || ar.OutputDirectories[0].RootDirectoryDigest == nil {
		// An action cache entry written under this key by other means.
		return nil, status.Errorf(codes.NotFound, "reference %s is not in the cache", req.Key)
	}
	return &bstpb.GetReferenceResponse{Digest: ar.OutputDirectories[0].RootDirectoryDigest}, nil
}

func (r *refStorage) UpdateReference(ctx context.Context, req *bstpb.UpdateReferenceRequest) (*bstpb.UpdateReferenceResponse, error) {
	root := cache.DigestFromProto(req.Digest)
	if err := root.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "directory digest: %v", err)
	}
	if len(req.Keys) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no reference name")
	}
	for _, k := range req.Keys {
		if k == "" {
			return nil, status.Error(codes.InvalidArgument, "an empty reference name")
		}
	}
	ar, err := r.s.referenceEntry(root)
	if err != nil {
		r.s.metrics.rejected.Add(1)
		return nil, err
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(ar)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encoding the reference: %v", err)
	}
	for _, k := range req.Keys {
		if _, err := r.s.updateAC(refKey(k), data, 0); err != nil {
			return nil, grpcError(fmt.Errorf("reference %s: %w", k, err))
		}
	}
	return &bstpb.UpdateReferenceResponse{}, nil
}

func (r *refStorage) Status(ctx context.Context, _ *bstpb.StatusRequest) (*bstpb.StatusResponse, error) {
	return &bstpb.StatusResponse{AllowUpdates: grpcIdentity(ctx).mayWrite()}, nil
}

// mayWrite reports whether the client may change the store (authorize lets its writes through).
func (id identity) mayWrite() bool { return id.result == authOK && !id.readOnly }

// referenceEntry walks the tree of the Directory root in the store and returns
// the ActionResult that keeps it (see above). Every Directory and file of the
// tree must be present: a reference is written only after its blobs
// (FAILED_PRECONDITION otherwise, as REAPI answers for missing inputs).
func (s *Server) referenceEntry(root cache.Digest) (*repb.ActionResult, error) {
	type node struct {
		path string
		d    cache.Digest
	}
	missing := func(what, p string, d cache.Digest) error {
		return status.Errorf(codes.FailedPrecondition, "%s %s (%s) of directory %s is not on the server: upload the blobs before the reference", what, p, d, root)
	}
	ar := &repb.ActionResult{}
	dirs, files := map[cache.Digest]bool{}, map[cache.Digest]bool{}
	queue := []node{{".", root}}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if dirs[n.d] {
			continue
		}
		dirs[n.d] = true
		if !s.c.HasBlob(n.d) {
			return nil, missing("directory", n.path, n.d)
		}
		data, err := s.readBatched(n.d)
		if servedCorrupt(err) {
			return nil, status.Errorf(codes.FailedPrecondition, "%s: upload it again before the reference", corruptStatus(n.d))
		}
		if err != nil {
			return nil, grpcError(err)
		}
		dir := &repb.Directory{}
		if err := proto.Unmarshal(data, dir); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "directory %s (%s) of directory %s: not a Directory: %v", n.path, n.d, root, err)
		}
		ar.OutputDirectories = append(ar.OutputDirectories, &repb.OutputDirectory{Path: n.path, RootDirectoryDigest: n.d.Proto()})
		for _, f := range dir.Files {
			p := path.Join(n.path, f.Name)
			d := cache.DigestFromProto(f.Digest)
			if err := d.Validate(); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "file %s of directory %s: %v", p, root, err)
			}
			if files[d] {
				continue
			}
			files[d] = true
			if !s.c.HasBlob(d) {
				return nil, missing("file", p, d)
			}
			ar.OutputFiles = append(ar.OutputFiles, &repb.OutputFile{Path: p, Digest: f.Digest, IsExecutable: f.IsExecutable})
		}
		for _, sub := range dir.Directories {
			p := path.Join(n.path, sub.Name)
			d := cache.DigestFromProto(sub.Digest)
			if err := d.Validate(); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "directory %s of directory %s: %v", p, root, err)
			}
			queue = append(queue, node{p, d})
		}
	}
	return ar, nil
}
