package remote

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/testpki"
	"github.com/gantry-build/gantry/internal/version"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// openGRPC opens the grpc store of spec, closed when the test ends.
func openGRPC(t testing.TB, spec Spec) *grpcStore {
	t.Helper()
	s, err := Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*grpcStore)
}

// bstPython runs bst-artifact-server (BuildStream 1.x) on 127.0.0.1 on a port
// the kernel picks, printed for the test; it stops when its stdin closes.
const bstPython = `
import sys
from buildstream._artifactcache.casserver import create_server
server = create_server(sys.argv[1], enable_push=sys.argv[2] == "push",
                       max_head_size=int(2e6), min_head_size=int(1e6))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
sys.stdin.read()
server.stop(0)
`

// startBST starts bst-artifact-server with a repository in a temporary
// directory and returns its grpc:// URL. Without Debian's buildstream package it
// skips the test, or fails it under CI=true.
func startBST(t testing.TB, push bool) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import buildstream._artifactcache.casserver").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("bst-artifact-server is not available (%v: %s)", err, bytes.TrimSpace(out))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg + "; install the Debian package buildstream to run this test, CI=true makes this a failure")
	}
	mode := "pull"
	if push {
		mode = "push"
	}
	cmd := exec.Command(python, "-c", bstPython, filepath.Join(t.TempDir(), "repo"), mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("bst-artifact-server: %v\n%s", err, stderr.Bytes())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("bst-artifact-server did not start: %v\n%s", err, stderr.Bytes())
	}
	return "grpc://127.0.0.1:" + strings.TrimSpace(line)
}

// testBlobs returns blobs of many sizes: the empty blob, many small ones (for
// batches), and the given large ones (for ByteStream).
func testBlobs(small int, large ...int) map[cache.Digest][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	blobs := map[cache.Digest][]byte{}
	add := func(n int) {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		blobs[cache.DigestOf(data)] = data
	}
	add(0)
	for i := range small {
		add(1 + i*97%20000)
	}
	for _, n := range large {
		add(n)
	}
	return blobs
}

// putBlobs uploads blobs with 16 concurrent writers.
func putBlobs(ctx context.Context, s Store, blobs map[cache.Digest][]byte) error {
	var g errgroup.Group
	g.SetLimit(16)
	for d, data := range blobs {
		g.Go(func() error {
			return s.WriteBlob(ctx, d, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		})
	}
	return g.Wait()
}

// checkBlobs reads blobs back with 16 concurrent readers and compares them.
func checkBlobs(ctx context.Context, s Store, blobs map[cache.Digest][]byte) error {
	var g errgroup.Group
	g.SetLimit(16)
	for d, data := range blobs {
		g.Go(func() error {
			var buf bytes.Buffer
			if err := s.ReadBlob(ctx, d, &buf); err != nil {
				return err
			}
			if !bytes.Equal(buf.Bytes(), data) {
				return fmt.Errorf("blob %s: read back %d bytes that differ", d, buf.Len())
			}
			return nil
		})
	}
	return g.Wait()
}

func digestSet(ds []cache.Digest) []string {
	var ss []string
	for _, d := range ds {
		ss = append(ss, d.String())
	}
	slices.Sort(ss)
	return ss
}

// exerciseStore is the round trip every grpc server must pass: blobs of all
// sizes up and back, FindMissing before and after, misses, and an artifact
// entry written, read, overwritten. It returns the entry read back.
func exerciseStore(t *testing.T, s Store) *Entry {
	t.Helper()
	ctx := context.Background()
	blobs := testBlobs(300, 3<<20, 5<<20) // above bst's 1 MiB batch limit and above 4 MiB
	var ds []cache.Digest
	for d := range blobs {
		ds = append(ds, d)
	}
	missing, err := s.FindMissing(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(digestSet(missing), digestSet(ds)) {
		t.Fatalf("FindMissing on an empty remote: %d of %d missing", len(missing), len(ds))
	}
	if err := putBlobs(ctx, s, blobs); err != nil {
		t.Fatal(err)
	}
	absent := cache.DigestOf([]byte("never uploaded"))
	absentLarge := cache.Digest{Hash: absent.Hash, Size: 8 << 20}
	missing, err = s.FindMissing(ctx, append(ds, absent))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(missing, []cache.Digest{absent}) {
		t.Fatalf("FindMissing after the upload = %v, want only %s", missing, absent)
	}
	if err := checkBlobs(ctx, s, blobs); err != nil {
		t.Fatal(err)
	}
	for _, d := range []cache.Digest{absent, absentLarge} {
		if err := s.ReadBlob(ctx, d, io.Discard); !errors.Is(err, cache.ErrNotFound) {
			t.Errorf("ReadBlob of absent blob %s = %v, want ErrNotFound", d, err)
		}
	}

	// An artifact: a files tree with one file, a record, a log.
	put := func(data []byte) cache.Digest {
		d := cache.DigestOf(data)
		if err := putBlobs(ctx, s, map[cache.Digest][]byte{d: data}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	file := put([]byte("hello\n"))
	root := &repb.Directory{Files: []*repb.FileNode{{Name: "hello.txt", Digest: file.Proto()}}}
	rootData, _ := cache.MarshalDirectory(root)
	treeData, _ := cache.MarshalDirectory(root) // stands in for a Tree blob: the store does not read it
	want := &Entry{Files: put(rootData), Tree: put(append([]byte("tree:"), treeData...)), Record: put([]byte(`{"version":1}`)), Log: put([]byte("build log\n"))}
	if _, err := s.GetEntry(ctx, "k1"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("GetEntry before UpdateEntry = %v, want ErrNotFound", err)
	}
	if err := s.UpdateEntry(ctx, "k1", want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetEntry(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Files != want.Files || got.Record != want.Record || got.Log != want.Log {
		t.Fatalf("GetEntry = %+v, want %+v", got, want)
	}
	if _, err := s.GetEntry(ctx, "k2"); !errors.Is(err, cache.ErrNotFound) {
		t.Errorf("GetEntry of another key = %v, want ErrNotFound", err)
	}
	again := *want
	again.Log = cache.Digest{}
	if err := s.UpdateEntry(ctx, "k1", &again); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetEntry(ctx, "k1"); err != nil || got.Log != (cache.Digest{}) || got.Files != want.Files {
		t.Errorf("GetEntry after an update without log = %+v, %v", got, err)
	}
	return got
}

func TestGRPCBuildStreamServer(t *testing.T) {
	t.Parallel()
	s := openGRPC(t, Spec{URL: startBST(t, true), Push: true})
	got := exerciseStore(t, s)
	if s.info.api != apiReferences || s.info.batchLimit != 1<<20 {
		t.Errorf("bst-artifact-server detected as %v with batch limit %d, want references and 1 MiB", s.info.api, s.info.batchLimit)
	}
	if !got.Tree.IsZero() {
		t.Errorf("an entry from reference storage has a Tree %s", got.Tree)
	}
}

func TestGRPCBuildStreamServerReadOnly(t *testing.T) {
	t.Parallel()
	s := openGRPC(t, Spec{URL: startBST(t, false)})
	err := s.UpdateEntry(context.Background(), "k", &Entry{Files: cache.DigestOf(nil), Record: cache.DigestOf(nil)})
	if !IsKind(err, Refused) || !strings.Contains(err.Error(), "--enable-push") {
		t.Errorf("UpdateEntry on a read-only bst-artifact-server = %v, want refused, naming --enable-push", err)
	}
}

func TestGRPCActionCacheServer(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t), Instance: "main"})
	got := exerciseStore(t, s)
	if s.info.api != apiActionCache {
		t.Errorf("REAPI server detected as %v", s.info.api)
	}
	if got.Tree.IsZero() {
		t.Error("an entry from an action cache lost its Tree")
	}
	srv.locked(func() {
		if ar := srv.ac[Key("k1").Hash]; ar == nil || len(ar.OutputFiles) != 1 {
			t.Errorf("the action cache holds %v under Key(k1)", ar)
		}
		if srv.earlyWrites != 0 {
			t.Errorf("%d writes ended early on an empty server", srv.earlyWrites)
		}
	})
	// A large blob the server has already: the server ends the stream early.
	big := testBlobs(0, 3<<20)
	for range 2 {
		if err := putBlobs(context.Background(), s, big); err != nil {
			t.Fatal(err)
		}
	}
	srv.locked(func() {
		if srv.earlyWrites != 1 {
			t.Errorf("rewriting a large blob: %d early ends, want 1", srv.earlyWrites)
		}
	})
}

// The batcher packs requests queued while its lanes are busy into one call.
func TestGRPCBatchPacksQueuedReads(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	ctx := context.Background()
	blobs := testBlobs(batchLanes + 17)
	delete(blobs, cache.DigestOf(nil))
	if err := putBlobs(ctx, s, blobs); err != nil {
		t.Fatal(err)
	}
	info, err := s.server(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gate, arrived := make(chan struct{}), make(chan struct{}, batchLanes)
	srv.locked(func() { srv.readGate, srv.readArrived = gate, arrived })
	var ops []*batchOp
	for d := range blobs {
		op := &batchOp{d: d}
		ops = append(ops, op)
		info.reads.submit(op)
		if len(ops) <= batchLanes {
			<-arrived // each of the first ops has a lane of its own, held by the server
		}
	}
	close(gate)
	for _, op := range ops {
		<-op.done
		if op.err != nil || !bytes.Equal(op.data, blobs[op.d]) {
			t.Fatalf("batched read of %s: %v", op.d, op.err)
		}
	}
	srv.locked(func() {
		if want := append(slices.Repeat([]int{1}, batchLanes), 17); !slices.Equal(srv.batchReads, want) {
			t.Errorf("blobs per BatchReadBlobs call = %v, want %d single reads then the 17 queued ones in one call", srv.batchReads, batchLanes)
		}
	})
}

func TestGRPCBatchTakeRespectsLimit(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	b := newBatcher(limit, 4, nil)
	var sizes []int64
	for range 20 {
		sizes = append(sizes, 10<<10)
	}
	sizes = append(sizes, limit-b.base-batchBlobOverhead) // fits only alone
	sizes = append(sizes, 1)
	for _, n := range sizes {
		b.queue = append(b.queue, &batchOp{d: cache.Digest{Size: n}})
	}
	var got []int
	for len(b.queue) > 0 {
		ops := b.take()
		total := b.base
		for _, op := range ops {
			total += op.d.Size + batchBlobOverhead
		}
		if total > limit {
			t.Errorf("a batch of %d blobs costs %d bytes, over the limit %d", len(ops), total, limit)
		}
		got = append(got, len(ops))
	}
	if want := []int{6, 6, 6, 2, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("batch sizes = %v, want %v", got, want)
	}
	if !b.fits(cache.Digest{Size: limit - b.base - batchBlobOverhead}) || b.fits(cache.Digest{Size: limit - b.base - batchBlobOverhead + 1}) {
		t.Error("fits disagrees with the overhead take counts")
	}
}

func TestGRPCFindMissingInChunks(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	var ds []cache.Digest
	for i := range 2*findMissingChunk + 5 {
		ds = append(ds, cache.DigestOf([]byte(strconv.Itoa(i))))
	}
	missing, err := s.FindMissing(context.Background(), ds)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != len(ds) {
		t.Errorf("%d of %d digests missing, want all", len(missing), len(ds))
	}
	srv.locked(func() {
		if want := []int{findMissingChunk, findMissingChunk, 5}; !slices.Equal(srv.findCalls, want) {
			t.Errorf("digests per FindMissingBlobs call = %v, want %v", srv.findCalls, want)
		}
	})
}

func TestGRPCReadOnlyActionCache(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	srv.updateEnabled = false
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	err := s.UpdateEntry(context.Background(), "k", &Entry{Files: cache.DigestOf(nil), Tree: cache.DigestOf(nil), Record: cache.DigestOf(nil)})
	if !IsKind(err, Refused) {
		t.Errorf("UpdateEntry on a server without action cache updates = %v, want refused", err)
	}
}

func TestGRPCNoArtifactIndex(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	srv.noActionCache = true
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	_, err := s.GetEntry(context.Background(), "k")
	if !IsKind(err, Refused) || !strings.Contains(err.Error(), "neither") {
		t.Errorf("GetEntry on a CAS-only server = %v, want refused: neither an action cache nor reference storage", err)
	}
}

func TestGRPCUnreachable(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	s := openGRPC(t, Spec{URL: "grpc://" + addr})
	ctx := context.Background()
	if _, err := s.FindMissing(ctx, []cache.Digest{cache.DigestOf(nil)}); !IsKind(err, Unavailable) {
		t.Errorf("FindMissing on a closed port = %v, want unavailable", err)
	}
	if err := s.ReadBlob(ctx, cache.DigestOf([]byte("x")), io.Discard); !IsKind(err, Unavailable) || !strings.Contains(err.Error(), addr) {
		t.Errorf("ReadBlob on a closed port = %v, want unavailable, naming %s", err, addr)
	}
}

func TestGRPCCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := func(tok string) string {
		p := filepath.Join(dir, tok)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bearer := "grpc://" + newTestREAPI().start(t, requireAuthorization("Bearer s3cret-token")...)
	basic := newTestREAPI().start(t, requireAuthorization("Basic dXNlcjpwYXNzLXdvcmQ=")...) // user:pass-word
	for _, tc := range []struct {
		name string
		spec Spec
		ok   bool
	}{
		{"no token", Spec{URL: bearer}, false},
		{"wrong token", Spec{URL: bearer, TokenFile: tokenFile("wrong-token")}, false},
		{"token", Spec{URL: bearer, TokenFile: tokenFile("s3cret-token")}, true},
		{"no password", Spec{URL: "grpc://" + basic}, false},
		{"wrong password", Spec{URL: "grpc://user:bad-word@" + basic}, false},
		{"password", Spec{URL: "grpc://user:pass-word@" + basic}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openGRPC(t, tc.spec)
			_, err := s.FindMissing(context.Background(), []cache.Digest{cache.DigestOf([]byte("x"))})
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !IsKind(err, Auth) {
				t.Fatalf("FindMissing = %v, want credentials refused", err)
			}
			for _, secret := range []string{"wrong-token", "bad-word"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error shows the secret %q: %v", secret, err)
				}
			}
		})
	}
}

func TestGRPCServerSendsWrongBytes(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	ctx := context.Background()
	blobs := testBlobs(1, 2<<20) // one batched, one streamed
	if err := putBlobs(ctx, s, blobs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tamper func([]byte) []byte
		kind   ErrorKind // -1: no error, the bytes differ
	}{
		{"flipped", func(b []byte) []byte { c := slices.Clone(b); c[len(c)-1] ^= 1; return c }, -1},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, Corrupt},
		{"extended", func(b []byte) []byte { return append(slices.Clone(b), 0) }, Corrupt},
	} {
		srv.locked(func() { srv.tamper = tc.tamper })
		for d, data := range blobs {
			if d.Size == 0 {
				continue
			}
			var buf bytes.Buffer
			err := s.ReadBlob(ctx, d, &buf)
			if tc.kind == -1 {
				if err != nil || bytes.Equal(buf.Bytes(), data) || buf.Len() != len(data) {
					t.Errorf("%s blob of %d bytes: err %v, %d bytes received: want the altered bytes, for the caller to verify", tc.name, d.Size, err, buf.Len())
				}
				continue
			}
			if !IsKind(err, tc.kind) {
				t.Errorf("%s blob of %d bytes: ReadBlob = %v, want %v", tc.name, d.Size, err, tc.kind)
			}
		}
	}
}

func TestGRPCResumesBrokenReads(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	ctx := context.Background()
	blobs := testBlobs(0, 2<<20)
	delete(blobs, cache.DigestOf(nil))
	if err := putBlobs(ctx, s, blobs); err != nil {
		t.Fatal(err)
	}
	srv.locked(func() { srv.breakReads = streamResumes })
	if err := checkBlobs(ctx, s, blobs); err != nil {
		t.Fatalf("a read broken %d times after one message each: %v", streamResumes, err)
	}
	srv.locked(func() {
		if want := []int64{0, 64 << 10, 128 << 10, 192 << 10}; !slices.Equal(srv.readOffsets, want) {
			t.Errorf("read offsets = %v, want %v: each resumed where the last stopped", srv.readOffsets, want)
		}
		srv.breakReads = streamResumes + 1
	})
	if err := checkBlobs(ctx, s, blobs); !IsKind(err, Unavailable) {
		t.Errorf("a read broken once more than it is resumed = %v, want unavailable", err)
	}
}

func TestGRPCReadsOverByteStreamWithoutBatchReads(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	srv.noBatchReads = true
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	ctx := context.Background()
	blobs := testBlobs(20)
	if err := putBlobs(ctx, s, blobs); err != nil {
		t.Fatal(err)
	}
	if err := checkBlobs(ctx, s, blobs); err != nil {
		t.Fatalf("reading small blobs from a server without BatchReadBlobs: %v", err)
	}
	var batches int
	srv.locked(func() { batches = len(srv.batchReads) })
	if batches == 0 || batches >= len(blobs) {
		t.Errorf("%d BatchReadBlobs calls for %d blobs: the first refusal sends the reads after it to ByteStream", batches, len(blobs))
	}
	if err := checkBlobs(ctx, s, blobs); err != nil {
		t.Fatal(err)
	}
	srv.locked(func() {
		if len(srv.batchReads) != batches {
			t.Errorf("%d more BatchReadBlobs calls after the server refused them", len(srv.batchReads)-batches)
		}
		if len(srv.readOffsets) < len(blobs) {
			t.Errorf("%d ByteStream reads, want one per blob at least (%d)", len(srv.readOffsets), len(blobs))
		}
	})
}

func TestGRPCWritesToAServerNamingNoDigests(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	srv.anonymousWrites = true
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	ctx := context.Background()
	blobs := testBlobs(20)
	if err := putBlobs(ctx, s, blobs); err != nil {
		t.Fatalf("writing to a server whose batch answers name no digests: %v", err)
	}
	if err := checkBlobs(ctx, s, blobs); err != nil {
		t.Fatal(err)
	}
}

func TestGRPCStall(t *testing.T) {
	t.Parallel()
	srv := newTestREAPI()
	s := openGRPC(t, Spec{URL: "grpc://" + srv.start(t)})
	s.idle = 300 * time.Millisecond
	ctx := context.Background()
	blobs := testBlobs(0, 2<<20)
	if err := putBlobs(ctx, s, blobs); err != nil {
		t.Fatal(err)
	}
	srv.locked(func() { srv.stall = true })
	for d := range blobs {
		if d.Size == 0 {
			continue
		}
		err := s.ReadBlob(ctx, d, io.Discard)
		var stall *stallError
		if !IsKind(err, Unavailable) || !errors.As(err, &stall) {
			t.Errorf("ReadBlob from a server that stops sending = %v, want unavailable: stalled", err)
		}
	}
	if _, err := s.FindMissing(ctx, []cache.Digest{cache.DigestOf(nil)}); !IsKind(err, Unavailable) {
		t.Errorf("FindMissing on a server that never answers = %v, want unavailable", err)
	}
	for d, data := range testBlobs(0, 8<<20) { // more than the flow-control windows hold
		err := s.WriteBlob(ctx, d, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if d.Size > 0 && !IsKind(err, Unavailable) {
			t.Errorf("WriteBlob to a server that reads nothing = %v, want unavailable", err)
		}
	}
	// A slow but steady stream outlives the idle timeout: each message rearms it.
	s.idle = 500 * time.Millisecond
	srv.locked(func() { srv.stall, srv.pace = false, 25*time.Millisecond })
	for d := range blobs {
		if err := s.ReadBlob(ctx, d, io.Discard); err != nil {
			t.Errorf("ReadBlob of %d bytes in 64 KiB messages 25 ms apart, idle timeout 500 ms: %v", d.Size, err)
		}
	}
	srv.locked(func() { srv.stall, srv.pace = true, 0 })

	// The caller's context is honoured too, and named as the cause.
	s.idle = time.Hour
	cctx, cancel := context.WithCancelCause(ctx)
	stalled := make(chan struct{}, 1)
	srv.locked(func() { srv.findStalled = stalled })
	go func() { <-stalled; cancel(errors.New("interrupted by user")) }()
	if _, err := s.FindMissing(cctx, []cache.Digest{cache.DigestOf(nil)}); err == nil || !strings.Contains(err.Error(), "interrupted by user") {
		t.Errorf("FindMissing canceled by its caller = %v, want the cause", err)
	}
}

func TestGRPCTLS(t *testing.T) {
	t.Parallel()
	pki := testpki.New(t)
	tlsURL := "grpcs://" + newTestREAPI().start(t, testServerTLS(t, pki, false))
	mtlsURL := "grpcs://" + newTestREAPI().start(t, testServerTLS(t, pki, true))
	for _, tc := range []struct {
		name string
		spec Spec
		kind ErrorKind // -1: works
	}{
		{"server-ca", Spec{URL: tlsURL, ServerCA: pki.CA}, -1},
		{"system roots", Spec{URL: tlsURL}, Refused},
		{"mutual", Spec{URL: mtlsURL, ServerCA: pki.CA, ClientCert: pki.ClientCert, ClientKey: pki.ClientKey}, -1},
		{"mutual without client-cert", Spec{URL: mtlsURL, ServerCA: pki.CA}, Auth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openGRPC(t, tc.spec)
			_, err := s.FindMissing(context.Background(), []cache.Digest{cache.DigestOf([]byte("x"))})
			if tc.kind == -1 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !IsKind(err, tc.kind) {
				t.Errorf("FindMissing = %v, want %v", err, tc.kind)
			}
		})
	}
}

func TestGRPCOpenRefusesBadSettings(t *testing.T) {
	t.Parallel()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("t"), 0o600)
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{URL: "grpc://cache.example"}, "no port"},
		{Spec{URL: "grpc://cache.example:9092/main"}, "instance"},
		{Spec{URL: "grpc://cache.example:9092", ServerCA: "ca.pem"}, "grpcs://"},
		{Spec{URL: "grpcs://u:secret@cache.example:9092", TokenFile: tok}, "keep one"},
	} {
		_, err := Open(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%s) = %v, want an error about %q without the password", tc.spec.Display(), err, tc.want)
		}
	}
}

// A grpc:// (plaintext) client of a TLS server: the server hangs up on the HTTP/2
// preface, and the error says so and what to use, instead of gRPC's "error reading
// server preface: EOF"; retrying cannot mend it.
func TestGRPCPlaintextToTLSServer(t *testing.T) {
	t.Parallel()
	addr := newTestREAPI().start(t, testServerTLS(t, testpki.New(t), false))
	s := openGRPC(t, Spec{URL: "grpc://" + addr})
	_, err := s.FindMissing(context.Background(), []cache.Digest{cache.DigestOf([]byte("x"))})
	if !IsKind(err, Refused) || !strings.Contains(err.Error(), "the server closed the connection at once, refusing a connection without TLS: if it serves TLS, use grpcs://") {
		t.Errorf("FindMissing over grpc:// on a TLS server = %v, want refused, saying to use grpcs://", err)
	}
}

// gantry's gRPC clients say who they are: gantry and its version.
func TestGRPCUserAgentHasGantrysVersion(t *testing.T) {
	t.Parallel()
	agent := make(chan string, 1)
	addr := newTestREAPI().start(t, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		select {
		case agent <- strings.Join(md.Get("user-agent"), ","):
		default:
		}
		return h(ctx, req)
	}))
	s := openGRPC(t, Spec{URL: "grpc://" + addr})
	if _, err := s.FindMissing(context.Background(), []cache.Digest{cache.DigestOf([]byte("x"))}); err != nil {
		t.Fatal(err)
	}
	if got := <-agent; !strings.HasPrefix(got, version.UserAgent()+" grpc-go/") || !strings.HasPrefix(got, "gantry/") {
		t.Errorf("user-agent = %q, want %q first", got, version.UserAgent())
	}
}

// A TLS server ends a plaintext client's connection before the HTTP/2 preface by
// closing it or, depending on timing, resetting it: both read as a refusal of a
// connection without TLS (the reset failed TestGRPCPlaintextToTLSServer under load).
func TestPrefaceRefused(t *testing.T) {
	for msg, want := range map[string]bool{
		`connection error: desc = "error reading server preface: EOF"`:                                                               true,
		`connection error: desc = "error reading server preface: connection reset by peer"`:                                          true,
		`connection error: desc = "error reading server preface: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"`: true,
		`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`:               false,
	} {
		if got := prefaceRefused(msg); got != want {
			t.Errorf("prefaceRefused(%q) = %v, want %v", msg, got, want)
		}
	}
}
