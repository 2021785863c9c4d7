package serve

import (
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/internal/bstpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// refTree is a small artifact as BuildStream 1.x uploads it: root/{a, sub/,
// again/ (the same Directory as sub/)}, sub/{b (executable), deep/}, deep/{c}.
type refTree struct {
	root, sub, deep cache.Digest
	files           map[string][]byte // a, b, c
	blobs           map[cache.Digest][]byte
}

func newRefTree(t *testing.T, fileSize int) *refTree {
	t.Helper()
	rt := &refTree{files: map[string][]byte{}, blobs: map[cache.Digest][]byte{}}
	file := func(name string) *repb.Digest {
		data := make([]byte, fileSize)
		rand.Read(data)
		rt.files[name] = data
		d := cache.DigestOf(data)
		rt.blobs[d] = data
		return d.Proto()
	}
	dir := func(d *repb.Directory) cache.Digest {
		data, err := cache.MarshalDirectory(d)
		if err != nil {
			t.Fatal(err)
		}
		dg := cache.DigestOf(data)
		rt.blobs[dg] = data
		return dg
	}
	rt.deep = dir(&repb.Directory{Files: []*repb.FileNode{{Name: "c", Digest: file("c")}}})
	rt.sub = dir(&repb.Directory{
		Files:       []*repb.FileNode{{Name: "b", Digest: file("b"), IsExecutable: true}},
		Directories: []*repb.DirectoryNode{{Name: "deep", Digest: rt.deep.Proto()}},
	})
	rt.root = dir(&repb.Directory{
		Files: []*repb.FileNode{{Name: "a", Digest: file("a")}},
		Directories: []*repb.DirectoryNode{
			{Name: "again", Digest: rt.sub.Proto()},
			{Name: "sub", Digest: rt.sub.Proto()},
		},
	})
	return rt
}

// store puts every blob of the tree into c.
func (rt *refTree) store(t *testing.T, c *cache.Cache) {
	t.Helper()
	for _, data := range rt.blobs {
		if _, err := c.PutBlob(data); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReferenceStorageOverGRPC: BuildStream 1.x's calls through the server's
// interceptors. A reference is written only by a client that may write, and
// only once every blob of its tree is on the server; any client that may read
// resolves it; Status tells each client whether it may update.
func TestReferenceStorageOverGRPC(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret ci\nlook-only dev read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, _ := serveForTest(t, Options{Dir: dir, GRPCAddr: "127.0.0.1:0", TokenFile: tokens, AllowAnonymousRead: true, ShutdownGrace: time.Second})
	_, addr := srv.Addrs()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	refs, cas := bstpb.NewReferenceStorageClient(conn), repb.NewContentAddressableStorageClient(conn)
	as := func(token string) context.Context {
		if token == "" {
			return context.Background()
		}
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	}
	wantStatus := func(what string, err error, code codes.Code, msg string) {
		t.Helper()
		if st, _ := status.FromError(err); st.Code() != code || st.Message() != msg {
			t.Errorf("%s: %v, want %s %q", what, err, code, msg)
		}
	}

	for _, tc := range []struct {
		token string
		want  bool
	}{{"s3cret", true}, {"look-only", false}, {"", false}} {
		st, err := refs.Status(as(tc.token), &bstpb.StatusRequest{})
		if err != nil || st.AllowUpdates != tc.want {
			t.Errorf("Status with token %q: %v, %v; want allow_updates %v", tc.token, st, err, tc.want)
		}
	}

	rt := newRefTree(t, 100)
	const name = "bsttest/hello/0123abcd"
	update := &bstpb.UpdateReferenceRequest{Keys: []string{name, "bsttest/hello/weak"}, Digest: rt.root.Proto()}
	_, err = refs.UpdateReference(as("s3cret"), update)
	wantStatus("a reference before its blobs", err, codes.FailedPrecondition,
		"directory . ("+rt.root.String()+") of directory "+rt.root.String()+" is not on the server: upload the blobs before the reference")

	// Every blob but the deepest file: still refused, naming it.
	req := &repb.BatchUpdateBlobsRequest{}
	for d, data := range rt.blobs {
		if d != cache.DigestOf(rt.files["c"]) {
			req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: d.Proto(), Data: data})
		}
	}
	if _, err := cas.BatchUpdateBlobs(as("s3cret"), req); err != nil {
		t.Fatal(err)
	}
	_, err = refs.UpdateReference(as("s3cret"), update)
	c := cache.DigestOf(rt.files["c"])
	wantStatus("a reference with a file missing", err, codes.FailedPrecondition,
		"file again/deep/c ("+c.String()+") of directory "+rt.root.String()+" is not on the server: upload the blobs before the reference")
	if _, err := cas.BatchUpdateBlobs(as("s3cret"), &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: c.Proto(), Data: rt.files["c"]}}}); err != nil {
		t.Fatal(err)
	}

	_, err = refs.UpdateReference(as(""), update)
	wantStatus("an anonymous update", err, codes.Unauthenticated, "credentials required")
	_, err = refs.UpdateReference(as("look-only"), update)
	wantStatus("a read-only update", err, codes.PermissionDenied, "client dev may only read")
	_, err = refs.GetReference(as(""), &bstpb.GetReferenceRequest{Key: name})
	wantStatus("a reference never written", err, codes.NotFound, "reference "+name+" is not in the cache")

	if _, err := refs.UpdateReference(as("s3cret"), update); err != nil {
		t.Fatal(err)
	}
	for _, key := range update.Keys {
		for _, token := range []string{"", "look-only", "s3cret"} {
			got, err := refs.GetReference(as(token), &bstpb.GetReferenceRequest{Key: key})
			if err != nil || cache.DigestFromProto(got.Digest) != rt.root {
				t.Errorf("GetReference %s with token %q: %v, %v; want %s", key, token, got, err, rt.root)
			}
		}
	}
	store, err := cache.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := store.Verify(); err != nil || !rep.Clean() || rep.ACEntries != 2 {
		t.Errorf("cache verify of the store: %+v, %v; want clean with 2 entries", rep, err)
	}
}

// TestReferenceNeverNamesMissingBlobs: a reference whose tree lost a blob (a
// sub-directory's Directory, or a file in it) is a miss, and its entry is
// removed; the quota's eviction keeps a reference whole — its Directories are
// blobs it needs, however old — or takes it with all its blobs.
func TestReferenceNeverNamesMissingBlobs(t *testing.T) {
	const unit = 64 << 10
	newServer := func(t *testing.T, quota int64) *Server {
		t.Helper()
		tokens := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(tokens, []byte("s3cret ci\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := New(Options{Dir: t.TempDir(), GRPCAddr: "127.0.0.1:0", TokenFile: tokens, Quota: quota})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const name = "bsttest/app/key"
	write := func(t *testing.T, s *Server, rt *refTree) {
		t.Helper()
		rt.store(t, s.c)
		r := &refStorage{s: s}
		if _, err := r.UpdateReference(context.Background(), &bstpb.UpdateReferenceRequest{Keys: []string{name}, Digest: rt.root.Proto()}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(s *Server) error {
		_, err := (&refStorage{s: s}).GetReference(context.Background(), &bstpb.GetReferenceRequest{Key: name})
		return err
	}
	age := func(t *testing.T, p string, d time.Duration) {
		t.Helper()
		then := time.Now().Add(-d)
		if err := os.Chtimes(p, then, then); err != nil {
			t.Fatal(err)
		}
	}
	entryPath := func(s *Server) string {
		k := refKey(name)
		return filepath.Join(s.c.Root, cache.ACDir, k.Hash[:2], k.Hash)
	}

	for _, lost := range []string{"deep directory", "deep file"} {
		t.Run(lost, func(t *testing.T) {
			s := newServer(t, 0)
			rt := newRefTree(t, 10)
			write(t, s, rt)
			if err := get(s); err != nil {
				t.Fatal(err)
			}
			d := rt.deep
			if lost == "deep file" {
				d = cache.DigestOf(rt.files["c"])
			}
			if err := os.Remove(s.c.BlobPath(d)); err != nil {
				t.Fatal(err)
			}
			if err := get(s); status.Code(err) != codes.NotFound {
				t.Errorf("GetReference with the %s gone: %v, want NOT_FOUND", lost, err)
			}
			if _, err := os.Stat(entryPath(s)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the stale reference's entry is still there: %v", err)
			}
		})
	}

	t.Run("eviction keeps the reference whole", func(t *testing.T) {
		s := newServer(t, unit*5/2)
		rt := newRefTree(t, unit/2) // a, b, c: 1.5 units
		write(t, s, rt)
		for d := range rt.blobs { // the tree is older than anything else
			age(t, s.c.BlobPath(d), 10*time.Hour)
		}
		age(t, entryPath(s), time.Hour)
		var orphans []string
		for i := range 2 {
			data := make([]byte, unit)
			rand.Read(data)
			d, err := s.c.PutBlob(data)
			if err != nil {
				t.Fatal(err)
			}
			orphans = append(orphans, s.c.BlobPath(d))
			age(t, orphans[i], 3*time.Hour-time.Duration(i)*time.Hour)
		}
		if err := s.evictor.evict(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(orphans[0]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the oldest unreferenced blob was kept")
		}
		for d := range rt.blobs {
			if !s.c.HasBlob(d) {
				t.Errorf("blob %s of the reference was evicted", d)
			}
		}
		if err := get(s); err != nil {
			t.Errorf("GetReference after eviction: %v", err)
		}
	})

	t.Run("eviction takes the reference with its blobs", func(t *testing.T) {
		s := newServer(t, unit*3/2)
		rt := newRefTree(t, unit/2)
		write(t, s, rt)
		age(t, entryPath(s), 10*time.Hour)
		for d := range rt.blobs {
			age(t, s.c.BlobPath(d), 10*time.Hour)
		}
		data := make([]byte, unit)
		rand.Read(data)
		if _, err := s.c.PutBlob(data); err != nil {
			t.Fatal(err)
		}
		if err := s.evictor.evict(); err != nil {
			t.Fatal(err)
		}
		for d := range rt.blobs {
			if s.c.HasBlob(d) {
				t.Errorf("blob %s of the evicted reference was kept", d)
			}
		}
		if err := get(s); status.Code(err) != codes.NotFound {
			t.Errorf("GetReference after its eviction: %v, want NOT_FOUND", err)
		}
	})
}
