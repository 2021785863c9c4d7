package remote

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/testtree"
)

// largeFile is the digest of the largest file of artifact a (streamed in
// several reads on upload).
func largeFile(t *testing.T, c *cache.Cache, a *cache.Artifact) cache.Digest {
	t.Helper()
	var big cache.Digest
	c.WalkTree(a.Files, func(e cache.TreeEntry) error {
		if e.Type == cache.TypeFile && e.Size > big.Size {
			big = e.Digest
		}
		return nil
	})
	if big.Size < 1000 {
		t.Fatalf("no large file in the artifact")
	}
	return big
}

// checkDamagedPush checks that err, from pushing a after its blob bad was
// damaged in the CAS with the same size, says so and that the cache lost the
// blob.
func checkDamagedPush(t *testing.T, c *cache.Cache, bad cache.Digest, err error) {
	t.Helper()
	var be *cache.BlobError
	if !errors.As(err, &be) || be.Digest != bad || be.Missing || !errors.Is(err, cache.ErrCorrupt) {
		t.Fatalf("push of an artifact with a damaged blob: got %v, want a *BlobError for %s", err, bad)
	}
	var re *Error
	if errors.As(err, &re) {
		t.Fatalf("the local damage was reported as the remote's: %v", err)
	}
	if c.HasBlob(bad) {
		t.Fatal("the damaged blob is still in the cache")
	}
}

func TestPushNeverUploadsADamagedBlobHTTP(t *testing.T) {
	remote := newMemRemote(t)
	c := openTestCache(t)
	a := builtArtifact(t, c)
	bad := largeFile(t, c, a)
	testtree.CorruptFile(t, c.BlobPath(bad))
	_, pushed, err := PushArtifact(context.Background(), c, remote.store(t, ""), a, nil)
	if pushed {
		t.Fatal("pushed an artifact with a damaged blob")
	}
	checkDamagedPush(t, c, bad, err)
	if data, ok := remote.Get("cas/" + bad.Hash); ok {
		t.Fatalf("the remote stored %d bytes for the damaged blob", len(data))
	}
	if n := remote.Count(func(k string) bool { return strings.HasPrefix(k, "ac/") }); n != 0 {
		t.Fatalf("the remote holds %d entries", n)
	}
}

func TestPushNeverUploadsADamagedBlobGRPC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int64 // the server's batch limit: the large file is batched or streamed
	}{{"batch", 4 << 20}, {"bytestream", 64 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newTestREAPI()
			srv.trusting, srv.batchLimit = true, tc.limit
			store := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
			c := openTestCache(t)
			a := builtArtifact(t, c)
			bad := largeFile(t, c, a)
			testtree.CorruptFile(t, c.BlobPath(bad))
			_, pushed, err := PushArtifact(context.Background(), c, store, a, nil)
			if pushed {
				t.Fatal("pushed an artifact with a damaged blob")
			}
			checkDamagedPush(t, c, bad, err)
			if data, ok := srv.blob(bad); ok {
				t.Fatalf("the server stored %d bytes for the damaged blob", len(data))
			}
			srv.locked(func() {
				if len(srv.ac) != 0 {
					t.Fatalf("the server holds %d entries", len(srv.ac))
				}
			})
		})
	}
}

// TestUploadStopsBeforeTheLastBytes: content that is not its digest, whatever
// its length, never completes an upload, on every path.
func TestUploadStopsBeforeTheLastBytes(t *testing.T) {
	srv := newTestREAPI()
	srv.trusting, srv.batchLimit = true, 64<<10
	g := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	remote := newMemRemote(t)
	h := remote.store(t, "")
	ctx := context.Background()
	for d, data := range testBlobs(1, 3<<20) { // one batched, one streamed
		if d.Size == 0 {
			continue
		}
		for _, tc := range []struct {
			name    string
			content []byte
		}{
			{"flipped", append(bytes.Clone(data[:len(data)-1]), data[len(data)-1]^1)},
			{"short", data[:len(data)-1]},
			{"long", append(bytes.Clone(data), 0)},
		} {
			open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tc.content)), nil }
			for name, s := range map[string]Store{"grpc": g, "http": h} {
				err := s.WriteBlob(ctx, d, open)
				var ue *uploadError
				if !errors.As(err, &ue) || !errors.Is(err, cache.ErrCorrupt) || IsKind(err, Unavailable) {
					t.Errorf("%s: %s blob of %d bytes: WriteBlob = %v, want an *uploadError wrapping ErrCorrupt", name, tc.name, d.Size, err)
				}
			}
			if _, ok := srv.blob(d); ok {
				t.Errorf("grpc: the server stored the %s blob of %d bytes", tc.name, d.Size)
			}
			if _, ok := remote.Get("cas/" + d.Hash); ok {
				t.Errorf("http: the server stored the %s blob of %d bytes", tc.name, d.Size)
			}
		}
	}
}

// poison makes remote serve wrong bytes of the right length for blob d.
func poison(remote *memRemote, d cache.Digest) {
	remote.Put("cas/"+d.Hash, bytes.Repeat([]byte("X"), int(d.Size)))
}

func TestRepairArtifactReplacesAPoisonedBlob(t *testing.T) {
	remote := newMemRemote(t)
	src, dst := openTestCache(t), openTestCache(t)
	a := builtArtifact(t, src)
	store := remote.store(t, "")
	ctx := context.Background()
	if _, _, err := PushArtifact(ctx, src, store, a, nil); err != nil {
		t.Fatal(err)
	}
	bad := largeFile(t, src, a)
	poison(remote, bad)
	_, err := PullArtifact(ctx, dst, store, a.Project, a.Element, a.Key, nil)
	if name, d, ok := WrongBytes(err); !ok || d != bad || name != store.Name() {
		t.Fatalf("pull of a poisoned blob: WrongBytes(%v) = %q, %v, %v; want %s", err, name, d, ok, bad)
	}
	// A push sees the entry and pushes nothing; a repair replaces the blob.
	if _, pushed, err := PushArtifact(ctx, src, store, a, nil); err != nil || pushed {
		t.Fatalf("push: pushed %v, %v", pushed, err)
	}
	_, rep, err := RepairArtifact(ctx, src, store, a, []cache.Digest{bad, cache.DigestOf([]byte("not in it"))}, nil)
	if err != nil || len(rep.Replaced) != 1 || rep.Replaced[0] != bad || len(rep.NotInArtifact) != 1 {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	if _, err := PullArtifact(ctx, dst, store, a.Project, a.Element, a.Key, nil); err != nil {
		t.Fatalf("pull after the repair: %v", err)
	}
}

// TestRepairArtifactOverGRPC: a REAPI server that replaces a blob written again
// (in a batch, here) is repaired, and the artifact pulls intact; one that skips
// the write of a blob it has (ByteStream, here), as REAPI allows, keeps its
// wrong copy: the repair reads it back, says so, and leaves the entry alone.
func TestRepairArtifactOverGRPC(t *testing.T) {
	for _, tc := range []struct {
		name     string
		limit    int64 // the server's batch limit: the large file is batched or streamed
		repaired bool
	}{{"batch", 1 << 20, true}, {"bytestream", 64 << 10, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newTestREAPI()
			srv.batchLimit = tc.limit
			store := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
			src, dst := openTestCache(t), openTestCache(t)
			a := builtArtifact(t, src)
			ctx := context.Background()
			if _, _, err := PushArtifact(ctx, src, store, a, nil); err != nil {
				t.Fatal(err)
			}
			bad := largeFile(t, src, a)
			srv.locked(func() { srv.blobs[bad] = bytes.Repeat([]byte("X"), int(bad.Size)) })
			if _, err := PullArtifact(ctx, dst, store, a.Project, a.Element, a.Key, nil); !IsKind(err, Corrupt) {
				t.Fatalf("pull of a poisoned blob: %v", err)
			}
			_, rep, err := RepairArtifact(ctx, src, store, a, []cache.Digest{bad}, nil)
			if !tc.repaired {
				if name, d, ok := WrongBytes(err); !ok || d != bad || name != store.Name() || !strings.Contains(err.Error(), "still serves wrong") {
					t.Fatalf("repair against a server that keeps the first copy: %v", err)
				}
				return
			}
			if err != nil || len(rep.Replaced) != 1 {
				t.Fatalf("repair: %+v, %v", rep, err)
			}
			if _, err := PullArtifact(ctx, dst, store, a.Project, a.Element, a.Key, nil); err != nil {
				t.Fatalf("pull after the repair: %v", err)
			}
		})
	}
}
