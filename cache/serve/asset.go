package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The Remote Asset API (build.bazel.remote.asset.v1) on the server's store:
// Push records URI + qualifiers → a blob or directory digest of the CAS;
// Fetch answers from those records and, with Options.AssetFetch, fetches
// http(s) URIs itself into the CAS (assetfetch.go).
//
// A record is a file asset/<ab>/<sha256 of kind, URI and qualifiers> in the
// store (JSON, written by temp+rename with a directory fsync), one per URI of
// a Push: it survives a restart. For the evictor a record is what an
// ActionCache entry is: a unit of its own whose blobs (the blob, or every
// Directory and file of the tree, and the references the push named) go
// only with the last record or entry that needs them; a Fetch hit refreshes
// the record and its blobs. A record whose blob is gone anyway reads as a
// miss and is removed, never handed out.

// assetDir is where the records live in the store.
const assetDir = "asset"

// The kinds of asset: a Push of one kind is found by a Fetch of the same kind.
const (
	assetBlob      = "blob"
	assetDirectory = "directory"
)

// The Push methods change the store: writes, for authorization. Fetch is a
// read, but one that makes the server go to origin needs a client that may
// write (fetchOrigin): a reader cannot make the server download and keep
// whatever it names.
const (
	pushBlobMethod      = "/build.bazel.remote.asset.v1.Push/PushBlob"
	pushDirectoryMethod = "/build.bazel.remote.asset.v1.Push/PushDirectory"
)

func init() {
	grpcWrites[pushBlobMethod] = true
	grpcWrites[pushDirectoryMethod] = true
}

// assetRecord is one stored association.
type assetRecord struct {
	Kind       string         `json:"kind"`
	URI        string         `json:"uri"`
	Qualifiers []qualifier    `json:"qualifiers,omitempty"`
	Digest     cache.Digest   `json:"digest"`
	RefBlobs   []cache.Digest `json:"references_blobs,omitempty"`
	RefDirs    []cache.Digest `json:"references_directories,omitempty"`
	Stored     time.Time      `json:"stored"`              // pushed, or fetched from origin
	ExpireAt   *time.Time     `json:"expire_at,omitempty"` // not returned after this
}

type qualifier struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// credentialQualifier reports whether a qualifier carries credentials for the
// origin (Bazel's bazel.auth_headers, http_header:NAME, http_header_url:N:NAME):
// they are sent to the origin, never part of a record's key or stored.
func credentialQualifier(name string) bool {
	return name == "bazel.auth_headers" || strings.HasPrefix(name, "http_header:") || strings.HasPrefix(name, "http_header_url:")
}

// keyQualifiers returns the qualifiers that identify an asset, sorted by name:
// all but the credentials. Names must be unique (the API says so).
func keyQualifiers(qs []*rapb.Qualifier) ([]qualifier, error) {
	var out []qualifier
	seen := map[string]bool{}
	for _, q := range qs {
		if q.Name == "" {
			return nil, status.Error(codes.InvalidArgument, "a qualifier without a name")
		}
		if seen[q.Name] {
			return nil, status.Errorf(codes.InvalidArgument, "qualifier %q given twice: qualifier names must be unique", q.Name)
		}
		seen[q.Name] = true
		if !credentialQualifier(q.Name) {
			out = append(out, qualifier{q.Name, q.Value})
		}
	}
	slices.SortFunc(out, func(a, b qualifier) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func qualifierProtos(qs []qualifier) []*rapb.Qualifier {
	out := make([]*rapb.Qualifier, len(qs))
	for i, q := range qs {
		out[i] = &rapb.Qualifier{Name: q.Name, Value: q.Value}
	}
	return out
}

// assetPath is where the record of (kind, uri, qs) lives.
func (s *Server) assetPath(kind, uri string, qs []qualifier) string {
	h := sha256.New()
	fmt.Fprintf(h, "gantry asset v1\x00%s\x00%s\x00", kind, uri)
	for _, q := range qs {
		fmt.Fprintf(h, "%s\x00%s\x00", q.Name, q.Value)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	return filepath.Join(s.c.Root, assetDir, sum[:2], sum)
}

// assetBlobs returns every blob a record needs: its blob, or the Directory
// blobs and files of its tree, and those of its references. An error (a
// Directory missing, a *missingBlobError, or damaged) means the record cannot
// be answered; the blobs found until then are returned with it.
func assetBlobs(c *cache.Cache, r *assetRecord) ([]cache.Digest, error) {
	out := append([]cache.Digest(nil), r.RefBlobs...)
	dirs := r.RefDirs
	if r.Kind == assetDirectory {
		dirs = append([]cache.Digest{r.Digest}, dirs...)
	} else {
		out = append(out, r.Digest)
	}
	seen := map[cache.Digest]bool{}
	var walk func(d cache.Digest) error
	walk = func(d cache.Digest) error {
		if seen[d] {
			return nil
		}
		seen[d] = true
		out = append(out, d)
		dir, err := c.ReadDirectory(d)
		if errors.Is(err, fs.ErrNotExist) {
			return &missingBlobError{d}
		}
		if err != nil {
			return err
		}
		for _, f := range dir.Files {
			out = append(out, cache.DigestFromProto(f.Digest))
		}
		for _, sub := range dir.Directories {
			if err := walk(cache.DigestFromProto(sub.Digest)); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range dirs {
		if err := walk(d); err != nil {
			return out, err // what was found, for the evictor
		}
	}
	return out, nil
}

// missingBlobError is a Directory of a record's tree that is not in the CAS.
type missingBlobError struct{ d cache.Digest }

func (e *missingBlobError) Error() string { return fmt.Sprintf("blob %s is not in the CAS", e.d) }

// readAssetRecord reads the record at path, and returns its bytes too.
func readAssetRecord(path string) (*assetRecord, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	r := &assetRecord{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, data, fmt.Errorf("asset record %s: %v: %w", filepath.Base(path), err, cache.ErrCorrupt)
	}
	return r, data, nil
}

// dropAssetRecord removes the record at path if it still holds data: a push
// that replaced it meanwhile is kept.
func dropAssetRecord(path string, data []byte) {
	if now, err := os.ReadFile(path); err == nil && bytes.Equal(now, data) {
		os.Remove(path)
	}
}

// assetRefs is the evictor's view of the record at path: the hashes of the
// blobs it keeps. A record that does not read keeps nothing (and goes in its turn).
func assetRefs(c *cache.Cache, path string) []string {
	r, _, err := readAssetRecord(path)
	if err != nil {
		return nil
	}
	ds, _ := assetBlobs(c, r) // a tree cut short keeps what was found
	hashes := make([]string, len(ds))
	for i, d := range ds {
		hashes[i] = d.Hash
	}
	return hashes
}

// lookupAsset returns the first record of kind for one of uris with exactly
// the qualifiers qs, stored no earlier than oldest (zero: any age), unexpired
// and with all its blobs present; it refreshes the record and its blobs. A
// record expired or missing a blob is removed.
func (s *Server) lookupAsset(kind string, uris []string, qs []qualifier, oldest time.Time) *assetRecord {
	for _, uri := range uris {
		p := s.assetPath(kind, uri, qs)
		r, data, err := readAssetRecord(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			s.log.Warn("asset record broken: removed the record", "error", err)
			dropAssetRecord(p, data)
			continue
		}
		if r.ExpireAt != nil && !time.Now().Before(*r.ExpireAt) {
			dropAssetRecord(p, data)
			continue
		}
		if !oldest.IsZero() && r.Stored.Before(oldest) {
			continue
		}
		blobs, err := assetBlobs(s.c, r)
		if err == nil {
			for _, d := range blobs {
				if !s.c.HasBlob(d) {
					err = fmt.Errorf("blob %s is missing", d)
					break
				}
			}
		}
		if err != nil {
			s.log.Warn(fmt.Sprintf("asset %s (%s): %v: removed the record", uri, kind, err), "uri", uri, "error", err)
			dropAssetRecord(p, data)
			continue
		}
		for _, d := range blobs {
			s.c.TouchBlob(d)
		}
		now := time.Now()
		os.Chtimes(p, now, now)
		return r
	}
	return nil
}

// storeAsset writes a record for each of uris. Its blobs are refreshed first,
// so that an eviction scan running meanwhile keeps them.
func (s *Server) storeAsset(uris []string, r assetRecord) error {
	if blobs, err := assetBlobs(s.c, &r); err == nil {
		for _, d := range blobs {
			s.c.TouchBlob(d)
		}
	}
	for _, uri := range uris {
		r.URI = uri
		data, err := json.Marshal(&r)
		if err != nil {
			return err
		}
		if err := s.writeAtomic(s.assetPath(r.Kind, uri, r.Qualifiers), data); err != nil {
			return fmt.Errorf("storing the asset record of %s: %w", uri, err)
		}
		s.evictor.wrote(int64(len(data)))
	}
	return nil
}

// writeAtomic writes data to path by temp file, fsync and rename, and fsyncs
// the directory.
func (s *Server) writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := s.c.TempName("asset")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

type assetService struct {
	rapb.UnimplementedFetchServer
	rapb.UnimplementedPushServer
	s *Server
}

// registerAsset serves Fetch and Push on g.
func (s *Server) registerAsset(g *grpc.Server) {
	a := &assetService{s: s}
	rapb.RegisterFetchServer(g, a)
	rapb.RegisterPushServer(g, a)
}

// checkURIs refuses a request without URIs or with an empty one.
func checkURIs(uris []string) error {
	if len(uris) == 0 {
		return status.Error(codes.InvalidArgument, "no URI: a request names at least one")
	}
	if slices.Contains(uris, "") {
		return status.Error(codes.InvalidArgument, "an empty URI")
	}
	return nil
}

// digestArg validates a digest of a request (what names it).
func digestArg(what string, p *repb.Digest) (cache.Digest, error) {
	if p == nil {
		return cache.Digest{}, status.Errorf(codes.InvalidArgument, "no %s", what)
	}
	d := cache.DigestFromProto(p)
	if err := d.Validate(); err != nil {
		return cache.Digest{}, status.Errorf(codes.InvalidArgument, "%s: %v", what, err)
	}
	return d, nil
}

func digestArgs(what string, ps []*repb.Digest) ([]cache.Digest, error) {
	out := make([]cache.Digest, len(ps))
	for i, p := range ps {
		d, err := digestArg(what, p)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// push stores r for uris once everything it needs is in the CAS.
func (a *assetService) push(ctx context.Context, op string, uris []string, qs []*rapb.Qualifier, expire *timestamppb.Timestamp, r assetRecord) error {
	if err := checkURIs(uris); err != nil {
		return err
	}
	var err error
	if r.Qualifiers, err = keyQualifiers(qs); err != nil {
		return err
	}
	if expire != nil {
		t := expire.AsTime()
		r.ExpireAt = &t
	}
	r.Stored = time.Now()
	blobs, err := assetBlobs(a.s.c, &r)
	var missing *missingBlobError
	switch {
	case errors.As(err, &missing):
		return status.Errorf(codes.FailedPrecondition, "%s: %v: push it first", uris[0], err)
	case errors.Is(err, cache.ErrCorrupt):
		return status.Errorf(codes.InvalidArgument, "%s: %v", uris[0], err)
	case err != nil:
		return grpcError(err)
	}
	for _, d := range blobs {
		if !a.s.c.HasBlob(d) {
			return status.Errorf(codes.FailedPrecondition, "%s: blob %s is not in the CAS: push it first", uris[0], d)
		}
	}
	if err := a.s.storeAsset(uris, r); err != nil {
		return grpcError(err) // logged in full and redacted by the interceptor
	}
	return nil
}

// pushRequest is PushBlob and PushDirectory: the record of kind for digest
// (named digestField in the request).
func (a *assetService) pushRequest(ctx context.Context, op, kind, digestField string, digest *repb.Digest, refBlobs, refDirs []*repb.Digest,
	f repb.DigestFunction_Value, uris []string, qs []*rapb.Qualifier, expire *timestamppb.Timestamp) error {
	if err := checkDigestFunction(f); err != nil {
		return err
	}
	r := assetRecord{Kind: kind}
	var err error
	if r.Digest, err = digestArg(digestField, digest); err != nil {
		return err
	}
	if r.RefBlobs, err = digestArgs("references_blobs", refBlobs); err != nil {
		return err
	}
	if r.RefDirs, err = digestArgs("references_directories", refDirs); err != nil {
		return err
	}
	return a.push(ctx, op, uris, qs, expire, r)
}

func (a *assetService) PushBlob(ctx context.Context, req *rapb.PushBlobRequest) (*rapb.PushBlobResponse, error) {
	if err := a.pushRequest(ctx, "push_blob", assetBlob, "blob_digest", req.BlobDigest, req.ReferencesBlobs, req.ReferencesDirectories,
		req.DigestFunction, req.Uris, req.Qualifiers, req.ExpireAt); err != nil {
		return nil, err
	}
	return &rapb.PushBlobResponse{}, nil
}

func (a *assetService) PushDirectory(ctx context.Context, req *rapb.PushDirectoryRequest) (*rapb.PushDirectoryResponse, error) {
	if err := a.pushRequest(ctx, "push_directory", assetDirectory, "root_directory_digest", req.RootDirectoryDigest, req.ReferencesBlobs,
		req.ReferencesDirectories, req.DigestFunction, req.Uris, req.Qualifiers, req.ExpireAt); err != nil {
		return nil, err
	}
	return &rapb.PushDirectoryResponse{}, nil
}

// fetchLookup checks what a Fetch request of kind shares and looks its asset
// up: nil when there is no record to answer it.
func (s *Server) fetchLookup(kind string, f repb.DigestFunction_Value, uris []string, qs []*rapb.Qualifier, oldest *timestamppb.Timestamp) ([]qualifier, *assetRecord, error) {
	if err := checkDigestFunction(f); err != nil {
		return nil, nil, err
	}
	if err := checkURIs(uris); err != nil {
		return nil, nil, err
	}
	kq, err := keyQualifiers(qs)
	if err != nil {
		return nil, nil, err
	}
	var since time.Time
	if oldest != nil {
		since = oldest.AsTime()
	}
	r := s.lookupAsset(kind, uris, kq, since)
	s.metrics.lookup(r != nil)
	return kq, r, nil
}

// notFound is the answer for an asset the server has no record of.
func notFound(kind string, uris []string) *status.Status {
	return status.Newf(codes.NotFound, "no %s pushed or fetched for %s with these qualifiers", kind, strings.Join(uris, ", "))
}

func expiresAt(r *assetRecord) *timestamppb.Timestamp {
	if r.ExpireAt == nil {
		return nil
	}
	return timestamppb.New(*r.ExpireAt)
}

func (a *assetService) FetchBlob(ctx context.Context, req *rapb.FetchBlobRequest) (*rapb.FetchBlobResponse, error) {
	qs, r, err := a.s.fetchLookup(assetBlob, req.DigestFunction, req.Uris, req.Qualifiers, req.OldestContentAccepted)
	if err != nil {
		return nil, err
	}
	if r == nil && a.s.opts.AssetFetch {
		if r, err = a.s.fetchOrigin(ctx, req, qs); err != nil {
			var oe *originError
			if !errors.As(err, &oe) {
				return nil, err // the request's fault or the store's, not the origin's
			}
			return &rapb.FetchBlobResponse{Status: oe.st.Proto(), Uri: oe.uri}, nil
		}
	}
	if r == nil {
		return &rapb.FetchBlobResponse{Status: notFound(assetBlob, req.Uris).Proto(), Uri: req.Uris[0]}, nil
	}
	return &rapb.FetchBlobResponse{Status: status.New(codes.OK, "").Proto(), Uri: r.URI, Qualifiers: qualifierProtos(r.Qualifiers),
		ExpiresAt: expiresAt(r), BlobDigest: r.Digest.Proto(), DigestFunction: repb.DigestFunction_SHA256}, nil
}

func (a *assetService) FetchDirectory(ctx context.Context, req *rapb.FetchDirectoryRequest) (*rapb.FetchDirectoryResponse, error) {
	_, r, err := a.s.fetchLookup(assetDirectory, req.DigestFunction, req.Uris, req.Qualifiers, req.OldestContentAccepted)
	if err != nil {
		return nil, err
	}
	if r == nil {
		if slices.ContainsFunc(req.Uris, isBuildStreamURN) {
			// BuildStream 1.x reads a miss only as the call's NOT_FOUND: a miss
			// in the response (the protocol's way, Bazel's) makes it fetch an
			// empty digest and crash.
			return nil, notFound(assetDirectory, req.Uris).Err()
		}
		return &rapb.FetchDirectoryResponse{Status: notFound(assetDirectory, req.Uris).Proto(), Uri: req.Uris[0]}, nil
	}
	return &rapb.FetchDirectoryResponse{Status: status.New(codes.OK, "").Proto(), Uri: r.URI, Qualifiers: qualifierProtos(r.Qualifiers),
		ExpiresAt: expiresAt(r), RootDirectoryDigest: r.Digest.Proto(), DigestFunction: repb.DigestFunction_SHA256}, nil
}

// buildStreamURNPrefix starts the URIs under which BuildStream keeps its artifacts
// and sources as assets (urn:fdc:buildstream.build:2020:v1:<ref> and the like).
const buildStreamURNPrefix = "urn:fdc:buildstream.build:"

// isBuildStreamURN says whether uri names one of BuildStream's assets.
func isBuildStreamURN(uri string) bool { return strings.HasPrefix(uri, buildStreamURNPrefix) }
