package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	"github.com/gantry-build/gantry/cache"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Assets is a client of a grpc(s):// remote's Remote Asset API
// (build.bazel.remote.asset.v1 Fetch and Push) with its CAS: blobs named by a
// URI and qualifiers. gantry keeps sources there ([[remote]] sources = true;
// package source says which URI and qualifiers name what).
type Assets struct {
	store   *grpcStore
	canPush bool // the remote's push = true
	fetch   rapb.FetchClient
	push    rapb.PushClient
}

// OpenAssets returns the asset client of the remote of spec, which must be
// grpc:// or grpcs://: the Remote Asset API is gRPC only. It does not connect yet.
func OpenAssets(spec Spec) (*Assets, error) {
	u, err := url.Parse(spec.URL)
	if err != nil {
		return nil, fmt.Errorf("remote %s: invalid url: %w", RedactURL(spec.URL), err)
	}
	if u.Scheme != "grpc" && u.Scheme != "grpcs" {
		return nil, fmt.Errorf("remote %s: sources are kept through the Remote Asset API, which is gRPC: use a grpc:// or grpcs:// url", spec.Display())
	}
	st, err := newGRPCStore(spec, u)
	if err != nil {
		return nil, err
	}
	s := st.(*grpcStore)
	return &Assets{store: s, canPush: spec.Push, fetch: rapb.NewFetchClient(s.conn), push: rapb.NewPushClient(s.conn)}, nil
}

// Name is the remote's URL without userinfo.
func (a *Assets) Name() string { return a.store.name }

// CanPush says whether the remote is pushed to (push = true).
func (a *Assets) CanPush() bool { return a.canPush }

// Close releases the connection.
func (a *Assets) Close() error { return a.store.Close() }

func qualifierList(qs [][2]string) []*rapb.Qualifier {
	out := make([]*rapb.Qualifier, len(qs))
	for i, q := range qs {
		out[i] = &rapb.Qualifier{Name: q[0], Value: q[1]}
	}
	return out
}

// GetAsset writes the blob the remote holds for uri with exactly the
// qualifiers qs to w; found is false when it holds none. The caller verifies
// what it receives.
func (a *Assets) GetAsset(ctx context.Context, uri string, qs [][2]string, w io.Writer) (found bool, err error) {
	op := "fetching the asset " + uri
	var resp *rapb.FetchBlobResponse
	err = a.store.call(ctx, op, func(ctx context.Context) error {
		var err error
		resp, err = a.fetch.FetchBlob(ctx, &rapb.FetchBlobRequest{InstanceName: a.store.instance, Uris: []string{uri}, Qualifiers: qualifierList(qs)})
		return err
	})
	if errors.Is(err, cache.ErrNotFound) { // a server that answers a miss as an RPC error
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st := status.FromProto(resp.Status); st.Code() == codes.NotFound {
		return false, nil
	} else if st.Code() != codes.OK {
		return false, a.store.fail(ctx, op, st.Err())
	}
	d := cache.DigestFromProto(resp.BlobDigest)
	if err := d.Validate(); err != nil {
		return false, &Error{Remote: a.store.name, Op: op, Kind: Corrupt, Err: err}
	}
	if err := a.store.ReadBlob(ctx, d, w); err != nil {
		return false, err
	}
	return true, nil
}

// PutAsset uploads the file at path, unless the remote has it, and records it
// for uri with the qualifiers qs.
func (a *Assets) PutAsset(ctx context.Context, uri string, qs [][2]string, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	d, err := cache.DigestOfReader(f)
	f.Close()
	if err != nil {
		return err
	}
	missing, err := a.store.FindMissing(ctx, []cache.Digest{d})
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		if err := a.store.WriteBlob(ctx, d, func() (io.ReadCloser, error) { return os.Open(path) }); err != nil {
			return err
		}
	}
	return a.store.call(ctx, "pushing the asset "+uri, func(ctx context.Context) error {
		_, err := a.push.PushBlob(ctx, &rapb.PushBlobRequest{InstanceName: a.store.instance, Uris: []string{uri}, Qualifiers: qualifierList(qs), BlobDigest: d.Proto()})
		return err
	})
}
