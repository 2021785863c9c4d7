package cli

// End-to-end tests of what `gantry cache serve` serves: a blob damaged on the
// server's disk reaches no client as a clean, complete response; it is
// quarantined, counted and healed by an upload; an action cache entry that
// needs a blob the store lost is removed when it is looked up.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/cache"
)

// damageStoreBlob gives the blob at path other bytes of the same size: one
// byte near its end flipped, so that most of it is sent before the damage
// can be known.
func damageStoreBlob(t *testing.T, path string, good []byte) {
	t.Helper()
	bad := append([]byte(nil), good...)
	bad[len(bad)-10] ^= 0xff
	os.Remove(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bad, 0o444); err != nil {
		t.Fatal(err)
	}
}

// TestServeNeverServesDamagedBlob: a blob whose bytes on the server's disk no
// longer match its name (same size) is refused to every reader: an HTTP GET
// is broken off (Go's client and curl both see an error, never a clean 200),
// ByteStream Read (whole or from an offset), BatchReadBlobs and GetTree get
// DATA_LOSS.
// Each time the blob is moved to quarantine/, logged and counted in /metrics,
// and an upload of the right bytes then stores and serves it again.
func TestServeNeverServesDamagedBlob(t *testing.T) {
	s := startServe(t)
	conn, ctx := dialServe(t, s)
	big, bigHash := randomBlob(t, 3<<20) // several chunks on both protocols
	small, smallHash := randomBlob(t, 1000)
	other, otherHash := randomBlob(t, 500)
	dir, _ := treeBlobs(t, other) // a Directory, for GetTree
	for _, b := range []struct {
		data []byte
		hash string
	}{{big, bigHash}, {small, smallHash}, {other, otherHash}, {dir, cache.DigestOf(dir).Hash}} {
		if code, _ := s.request("PUT", "/cas/"+b.hash, b.data, true); code != http.StatusOK {
			t.Fatalf("PUT: status %d", code)
		}
	}
	bigDigest := cache.DigestOf(big)
	readStream := func(offset int64) error {
		stream, err := bspb.NewByteStreamClient(conn).Read(ctx, &bspb.ReadRequest{
			ResourceName: fmt.Sprintf("blobs/%s/%d", bigHash, len(big)), ReadOffset: offset})
		if err != nil {
			return err
		}
		var got []byte
		for {
			msg, err := stream.Recv()
			if err == io.EOF {
				return fmt.Errorf("a clean end after %d bytes (right bytes: %v)", len(got), bytes.Equal(got, big[offset:]))
			}
			if err != nil {
				return err
			}
			got = append(got, msg.Data...)
		}
	}

	quarantined := int64(0)
	for _, tc := range []struct {
		name string
		blob []byte
		read func(t *testing.T) // fails unless the reader sees an error
	}{
		{"http-go-client", big, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://"+s.http+"/cas/"+bigHash, nil)
			req.Header.Set("Authorization", "Bearer "+s.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Logf("Go's client: %v", err) // broken off before the status line: an error too
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("GET of a damaged blob: a clean %d with %d bytes (right bytes: %v), want an error", resp.StatusCode, len(body), bytes.Equal(body, big))
			}
			t.Logf("Go's client: status %d, then %v after %d bytes", resp.StatusCode, err, len(body))
		}},
		{"http-curl", big, func(t *testing.T) {
			requireTools(t, "curl", "curl")
			out := filepath.Join(t.TempDir(), "blob")
			cmd := exec.Command("curl", "-sS", "-H", "Authorization: Bearer "+s.token, "-o", out, "http://"+s.http+"/cas/"+bigHash)
			msg, err := cmd.CombinedOutput()
			if err == nil {
				got, _ := os.ReadFile(out)
				t.Fatalf("curl of a damaged blob exited 0 with %d bytes (right bytes: %v), want an error", len(got), bytes.Equal(got, big))
			}
			t.Logf("curl: %v: %s", err, bytes.TrimSpace(msg))
		}},
		{"bytestream-read", big, func(t *testing.T) {
			if err := readStream(0); status.Code(err) != codes.DataLoss {
				t.Fatalf("ByteStream Read of a damaged blob: %v, want DATA_LOSS", err)
			}
		}},
		{"bytestream-read-from-offset", big, func(t *testing.T) {
			if err := readStream(int64(len(big) / 2)); status.Code(err) != codes.DataLoss {
				t.Fatalf("ByteStream Read from an offset of a damaged blob: %v, want DATA_LOSS", err)
			}
		}},
		{"batch-read", small, func(t *testing.T) {
			resp, err := repb.NewContentAddressableStorageClient(conn).BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{
				Digests: []*repb.Digest{cache.DigestOf(small).Proto(), cache.DigestOf(other).Proto()}})
			if err != nil {
				t.Fatal(err)
			}
			if r := resp.Responses[0]; codes.Code(r.Status.GetCode()) != codes.DataLoss || len(r.Data) != 0 {
				t.Fatalf("BatchReadBlobs of a damaged blob: status %v with %d bytes, want DATA_LOSS and none", r.Status, len(r.Data))
			}
			if r := resp.Responses[1]; codes.Code(r.Status.GetCode()) != codes.OK || !bytes.Equal(r.Data, other) {
				t.Fatalf("BatchReadBlobs of a sound blob beside it: status %v", r.Status)
			}
		}},
		{"get-tree", dir, func(t *testing.T) {
			stream, err := repb.NewContentAddressableStorageClient(conn).GetTree(ctx, &repb.GetTreeRequest{RootDigest: cache.DigestOf(dir).Proto()})
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != codes.DataLoss {
				t.Fatalf("GetTree of a damaged Directory: %v, want DATA_LOSS", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := cache.DigestOf(tc.blob)
			damageStoreBlob(t, s.blobPath(d.Hash), tc.blob)
			tc.read(t)
			quarantined++
			if _, err := os.Stat(s.blobPath(d.Hash)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the damaged blob is still in cas/ (%v)", err)
			}
			if n := s.metric("gantry_serve_quarantined_blobs_total"); n != quarantined {
				t.Errorf("gantry_serve_quarantined_blobs_total = %d, want %d", n, quarantined)
			}
			if code, _ := s.request("HEAD", "/cas/"+d.Hash, nil, true); code != http.StatusNotFound {
				t.Errorf("HEAD of the quarantined blob: status %d, want 404", code)
			}
			if code, _ := s.request("PUT", "/cas/"+d.Hash, tc.blob, true); code != http.StatusOK {
				t.Fatalf("PUT of the right bytes after quarantine: status %d", code)
			}
			if code, body := s.request("GET", "/cas/"+d.Hash, nil, true); code != http.StatusOK || !bytes.Equal(body, tc.blob) {
				t.Errorf("GET after the upload of the right bytes: status %d, right bytes %v", code, bytes.Equal(body, tc.blob))
			}
		})
	}
	if err := readStream(0); err == nil || !strings.Contains(err.Error(), "a clean end") || !strings.Contains(err.Error(), "right bytes: true") {
		t.Errorf("ByteStream Read of the healed blob: %v, want all its bytes", err)
	}
	if q, _ := os.ReadDir(filepath.Join(s.dir, "quarantine")); len(q) != int(quarantined) {
		t.Errorf("quarantine/ holds %d files, want %d", len(q), quarantined)
	}
	s.stop()
	if log := s.log(); !strings.Contains(log, "blob "+bigDigest.String()+" is damaged") || !strings.Contains(log, "quarantine") {
		t.Errorf("the server's log does not name the damaged blob %s and its quarantine:\n%s", bigDigest, log)
	}
	s.verifyStore()
}

// TestServeRemovesStaleACEntry: an action cache entry whose blob the store
// lost is a miss, and the lookup removes it from the store; a lookup of a
// sound entry keeps it.
func TestServeRemovesStaleACEntry(t *testing.T) {
	s := startServe(t)
	conn, ctx := dialServe(t, s)
	entry := func(blob []byte) (key string, ar []byte) {
		t.Helper()
		hash := cache.DigestOf(blob).Hash
		if code, _ := s.request("PUT", "/cas/"+hash, blob, true); code != http.StatusOK {
			t.Fatalf("PUT: status %d", code)
		}
		ar, _ = proto.Marshal(&repb.ActionResult{OutputFiles: []*repb.OutputFile{
			{Path: "a", Digest: &repb.Digest{Hash: hash, SizeBytes: int64(len(blob))}}}})
		_, key = randomBlob(t, 10)
		if code, _ := s.request("PUT", "/ac/"+key, ar, true); code != http.StatusOK {
			t.Fatalf("PUT /ac: status %d", code)
		}
		return key, ar
	}
	acPath := func(key string) string { return filepath.Join(s.dir, "ac", key[:2], key) }
	for _, via := range []string{"http", "grpc"} {
		t.Run(via, func(t *testing.T) {
			blob, hash := randomBlob(t, 300)
			key, _ := entry(blob)
			kept, keptAR := entry([]byte("a sound blob " + via))
			if err := os.Remove(s.blobPath(hash)); err != nil {
				t.Fatal(err)
			}
			lookup := func(key string) (found bool) {
				if via == "http" {
					code, _ := s.request("GET", "/ac/"+key, nil, true)
					return code == http.StatusOK
				}
				_, err := repb.NewActionCacheClient(conn).GetActionResult(ctx, &repb.GetActionResultRequest{
					ActionDigest: &repb.Digest{Hash: key, SizeBytes: 10}})
				if err != nil && status.Code(err) != codes.NotFound {
					t.Fatalf("GetActionResult: %v", err)
				}
				return err == nil
			}
			if lookup(key) {
				t.Fatal("an entry whose blob is gone is a hit")
			}
			if _, err := os.Stat(acPath(key)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the entry whose blob is gone is still in the store after the lookup (%v)", err)
			}
			if !lookup(kept) {
				t.Fatal("a sound entry is a miss")
			}
			if data, err := os.ReadFile(acPath(kept)); err != nil || !bytes.Equal(data, keptAR) {
				t.Errorf("the sound entry is not kept as written: %v", err)
			}
		})
	}
	if !strings.Contains(s.log(), "is missing") || !strings.Contains(s.log(), "removed the entry") {
		t.Errorf("the server's log does not say it removed the stale entries:\n%s", s.log())
	}
	s.stop()
	s.verifyStore()
}

// TestServeQuarantinesDamagedTreeOfEntry: an entry whose Tree blob is damaged
// is a miss and is removed, and the Tree is quarantined: were it kept, clients
// told the store has it would never upload it again, and the entry they write
// again would be a miss for good. Once the Tree and the entry are uploaded
// again, the entry is a hit.
func TestServeQuarantinesDamagedTreeOfEntry(t *testing.T) {
	s := startServe(t)
	file, _ := randomBlob(t, 100)
	root, tree := treeBlobs(t, file)
	treeHash := cache.DigestOf(tree).Hash
	for _, b := range [][]byte{file, root, tree} {
		if code, _ := s.request("PUT", "/cas/"+cache.DigestOf(b).Hash, b, true); code != http.StatusOK {
			t.Fatalf("PUT: status %d", code)
		}
	}
	ar, _ := proto.Marshal(&repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{
		{Path: "d", TreeDigest: cache.DigestOf(tree).Proto()}}})
	_, key := randomBlob(t, 10)
	if code, _ := s.request("PUT", "/ac/"+key, ar, true); code != http.StatusOK {
		t.Fatalf("PUT /ac: status %d", code)
	}
	damageStoreBlob(t, s.blobPath(treeHash), tree)
	if code, _ := s.request("GET", "/ac/"+key, nil, true); code != http.StatusNotFound {
		t.Fatalf("GET of an entry whose Tree is damaged: status %d, want 404", code)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "ac", key[:2], key)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the entry whose Tree is damaged is still in the store (%v)", err)
	}
	if code, _ := s.request("HEAD", "/cas/"+treeHash, nil, true); code != http.StatusNotFound {
		t.Errorf("HEAD of the damaged Tree: status %d, want 404 (quarantined)", code)
	}
	if n := s.metric("gantry_serve_quarantined_blobs_total"); n != 1 {
		t.Errorf("gantry_serve_quarantined_blobs_total = %d, want 1", n)
	}
	s.request("PUT", "/cas/"+treeHash, tree, true)
	s.request("PUT", "/ac/"+key, ar, true)
	if code, body := s.request("GET", "/ac/"+key, nil, true); code != http.StatusOK || !bytes.Equal(body, ar) {
		t.Errorf("GET of the entry written again with its Tree: status %d", code)
	}
	s.stop()
	s.verifyStore()
}

// TestServeReplacesADirectoryInPlaceOfABlob: a directory where a blob should be
// (damage) answered HEAD with 200, broke GET off, and failed every upload of the
// right bytes with 500 until `cache verify --dir --repair`; it is a miss, and an
// upload replaces it.
func TestServeReplacesADirectoryInPlaceOfABlob(t *testing.T) {
	s := startServe(t)
	blob, hash := randomBlob(t, 1000)
	if err := os.MkdirAll(filepath.Join(s.blobPath(hash), "stray"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _ := s.request("HEAD", "/cas/"+hash, nil, true); code != http.StatusNotFound {
		t.Errorf("HEAD of a blob with a directory in its place: %d, want 404", code)
	}
	if code, body := s.request("PUT", "/cas/"+hash, blob, true); code != http.StatusOK {
		t.Fatalf("PUT of the right bytes over a directory in the blob's place: %d %s, want 200", code, body)
	}
	if code, body := s.request("GET", "/cas/"+hash, nil, true); code != http.StatusOK || !bytes.Equal(body, blob) {
		t.Errorf("GET after the upload: %d, %d bytes, want 200 and the blob", code, len(body))
	}
	s.stop()
	s.verifyStore()
}
