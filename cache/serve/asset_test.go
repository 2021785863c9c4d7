package serve

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// assetServer is a running server for the Remote Asset tests.
type assetServer struct {
	srv  *Server
	conn *grpc.ClientConn
	stop func()
}

// startAssetServer serves a store at dir over gRPC until stop (or the test's
// end); tokens: "s3cret" may write, "r3ad" may only read.
func startAssetServer(t *testing.T, dir string, opts Options) *assetServer {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret ci\nr3ad reader read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.Dir, opts.GRPCAddr, opts.TokenFile, opts.ShutdownGrace = dir, "127.0.0.1:0", tokens, time.Second
	srv, stop := serveForTest(t, opts)
	_, addr := srv.Addrs()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	a := &assetServer{srv: srv, conn: conn, stop: func() { conn.Close(); stop() }}
	t.Cleanup(func() { conn.Close() })
	return a
}

// serveForTest serves New(opts) until stop or the test's end.
func serveForTest(t *testing.T, opts Options) (srv *Server, stop func()) {
	t.Helper()
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return srv, stop
}

// as returns a context carrying token ("" for none).
func as(token string) context.Context {
	if token == "" {
		return context.Background()
	}
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

func (a *assetServer) fetchBlob(t *testing.T, token string, req *rapb.FetchBlobRequest) (*rapb.FetchBlobResponse, error) {
	t.Helper()
	return rapb.NewFetchClient(a.conn).FetchBlob(as(token), req)
}

func (a *assetServer) pushBlob(t *testing.T, req *rapb.PushBlobRequest) {
	t.Helper()
	if _, err := rapb.NewPushClient(a.conn).PushBlob(as("s3cret"), req); err != nil {
		t.Fatal(err)
	}
}

func qs(pairs ...string) []*rapb.Qualifier {
	var out []*rapb.Qualifier
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, &rapb.Qualifier{Name: pairs[i], Value: pairs[i+1]})
	}
	return out
}

// wantStatus checks a response status (inline) or an RPC error.
func wantStatus(t *testing.T, what string, st *status.Status, code codes.Code, msg string) {
	t.Helper()
	if st.Code() != code || st.Message() != msg {
		t.Errorf("%s: %s %q, want %s %q", what, st.Code(), st.Message(), code, msg)
	}
}

func rpcStatus(err error) *status.Status { st, _ := status.FromError(err); return st }

func putBlob(t *testing.T, c *cache.Cache, data string) cache.Digest {
	t.Helper()
	d, err := c.PutBlob([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestAssetPushThenFetch: a pushed blob is found by any of its URIs with the
// same qualifiers, in any order; other qualifiers, an unknown URI, an expired
// push and content older than the client accepts are NOT_FOUND in the
// response's status; a push of a blob the CAS lacks, or with a qualifier given
// twice, is refused.
func TestAssetPushThenFetch(t *testing.T) {
	dir := t.TempDir()
	a := startAssetServer(t, dir, Options{})
	d := putBlob(t, a.srv.c, "pushed content")
	a.pushBlob(t, &rapb.PushBlobRequest{Uris: []string{"https://a.example/x.tar", "urn:x"}, Qualifiers: qs("resource_type", "application/x-tar", "vcs.commit", "abc"), BlobDigest: d.Proto()})

	ok := func(uris []string, q []*rapb.Qualifier) {
		t.Helper()
		resp, err := a.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: uris, Qualifiers: q})
		if err != nil || resp.Status.Code != 0 || cache.DigestFromProto(resp.BlobDigest) != d {
			t.Fatalf("fetch %v %v: %v %v", uris, q, resp, err)
		}
	}
	ok([]string{"urn:x"}, qs("vcs.commit", "abc", "resource_type", "application/x-tar"))
	ok([]string{"https://elsewhere.example/x.tar", "https://a.example/x.tar"}, qs("resource_type", "application/x-tar", "vcs.commit", "abc"))

	miss := func(what string, req *rapb.FetchBlobRequest) {
		t.Helper()
		resp, err := a.fetchBlob(t, "s3cret", req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		wantStatus(t, what, status.FromProto(resp.Status), codes.NotFound, "no blob pushed or fetched for "+strings.Join(req.Uris, ", ")+" with these qualifiers")
	}
	miss("other qualifiers", &rapb.FetchBlobRequest{Uris: []string{"urn:x"}, Qualifiers: qs("vcs.commit", "abc")})
	miss("unknown URI", &rapb.FetchBlobRequest{Uris: []string{"urn:y"}, Qualifiers: qs("resource_type", "application/x-tar", "vcs.commit", "abc")})
	miss("too old for the client", &rapb.FetchBlobRequest{Uris: []string{"urn:x"}, Qualifiers: qs("resource_type", "application/x-tar", "vcs.commit", "abc"),
		OldestContentAccepted: timestamppb.New(time.Now().Add(time.Hour))})

	a.pushBlob(t, &rapb.PushBlobRequest{Uris: []string{"urn:expired"}, BlobDigest: d.Proto(), ExpireAt: timestamppb.New(time.Now().Add(-time.Second))})
	miss("expired", &rapb.FetchBlobRequest{Uris: []string{"urn:expired"}})
	if _, err := os.Stat(a.srv.assetPath(assetBlob, "urn:expired", nil)); !os.IsNotExist(err) {
		t.Errorf("the expired record is still there: %v", err)
	}
	a.pushBlob(t, &rapb.PushBlobRequest{Uris: []string{"urn:later"}, BlobDigest: d.Proto(), ExpireAt: timestamppb.New(time.Now().Add(time.Hour))})
	if resp, err := a.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: []string{"urn:later"}}); err != nil || resp.ExpiresAt == nil {
		t.Errorf("a push with expire_at: fetch %v %v, want expires_at", resp, err)
	}

	push := rapb.NewPushClient(a.conn)
	absent := cache.DigestOf([]byte("never stored"))
	_, err := push.PushBlob(as("s3cret"), &rapb.PushBlobRequest{Uris: []string{"urn:z"}, BlobDigest: absent.Proto()})
	wantStatus(t, "push of an absent blob", rpcStatus(err), codes.FailedPrecondition, "urn:z: blob "+absent.String()+" is not in the CAS: push it first")
	_, err = push.PushBlob(as("s3cret"), &rapb.PushBlobRequest{Uris: []string{"urn:z"}, BlobDigest: d.Proto(), Qualifiers: qs("a", "1", "a", "2")})
	wantStatus(t, "a qualifier twice", rpcStatus(err), codes.InvalidArgument, `qualifier "a" given twice: qualifier names must be unique`)
	_, err = push.PushBlob(as("s3cret"), &rapb.PushBlobRequest{BlobDigest: d.Proto()})
	wantStatus(t, "no URI", rpcStatus(err), codes.InvalidArgument, "no URI: a request names at least one")
}

// TestAssetDirectory: a pushed directory needs its whole tree in the CAS, of
// valid Directories; a record whose tree lost a blob is NOT_FOUND and
// removed, never handed out.
func TestAssetDirectory(t *testing.T) {
	a := startAssetServer(t, t.TempDir(), Options{})
	c := a.srv.c
	file := putBlob(t, c, "a file of the tree")
	sub, err := c.PutDirectory(&repb.Directory{Files: []*repb.FileNode{{Name: "f", Digest: file.Proto()}}})
	if err != nil {
		t.Fatal(err)
	}
	root, err := c.PutDirectory(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "sub", Digest: sub.Proto()}}})
	if err != nil {
		t.Fatal(err)
	}
	push, fetch := rapb.NewPushClient(a.conn), rapb.NewFetchClient(a.conn)
	if _, err := push.PushDirectory(as("s3cret"), &rapb.PushDirectoryRequest{Uris: []string{"git+https://h/r"}, Qualifiers: qs("vcs.commit", "c0"), RootDirectoryDigest: root.Proto()}); err != nil {
		t.Fatal(err)
	}
	req := &rapb.FetchDirectoryRequest{Uris: []string{"git+https://h/r"}, Qualifiers: qs("vcs.commit", "c0")}
	resp, err := fetch.FetchDirectory(as("r3ad"), req)
	if err != nil || resp.Status.Code != 0 || cache.DigestFromProto(resp.RootDirectoryDigest) != root {
		t.Fatalf("fetch directory: %v %v", resp, err)
	}
	if r, err := fetch.FetchBlob(as("r3ad"), &rapb.FetchBlobRequest{Uris: req.Uris, Qualifiers: req.Qualifiers}); err != nil || r.Status.Code != int32(codes.NotFound) {
		t.Errorf("a directory fetched as a blob: %v %v, want NOT_FOUND", r, err)
	}

	lost := putBlob(t, c, "another file")
	root2, err := c.PutDirectory(&repb.Directory{Files: []*repb.FileNode{{Name: "g", Digest: lost.Proto()}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.RemoveBlob(lost.Hash); err != nil {
		t.Fatal(err)
	}
	_, err = push.PushDirectory(as("s3cret"), &rapb.PushDirectoryRequest{Uris: []string{"urn:d2"}, RootDirectoryDigest: root2.Proto()})
	wantStatus(t, "a directory with a missing file", rpcStatus(err), codes.FailedPrecondition, "urn:d2: blob "+lost.String()+" is not in the CAS: push it first")

	absentDir := cache.DigestOf([]byte("no such directory"))
	_, err = push.PushDirectory(as("s3cret"), &rapb.PushDirectoryRequest{Uris: []string{"urn:d3"}, RootDirectoryDigest: absentDir.Proto()})
	wantStatus(t, "a directory not in the CAS", rpcStatus(err), codes.FailedPrecondition, "urn:d3: blob "+absentDir.String()+" is not in the CAS: push it first")
	unsorted, err := c.PutBlob(mustMarshal(t, &repb.Directory{Files: []*repb.FileNode{{Name: "b", Digest: file.Proto()}, {Name: "a", Digest: file.Proto()}}}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = push.PushDirectory(as("s3cret"), &rapb.PushDirectoryRequest{Uris: []string{"urn:d4"}, RootDirectoryDigest: unsorted.Proto()})
	wantStatus(t, "an invalid directory", rpcStatus(err), codes.InvalidArgument,
		"urn:d4: directory "+unsorted.String()+`: entries not sorted by name at "a": cache entry is corrupt`)

	if _, _, err := c.RemoveBlob(file.Hash); err != nil {
		t.Fatal(err)
	}
	resp, err = fetch.FetchDirectory(as("r3ad"), req)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "a tree that lost a file", status.FromProto(resp.Status), codes.NotFound, "no directory pushed or fetched for git+https://h/r with these qualifiers")
	if _, err := os.Stat(a.srv.assetPath(assetDirectory, "git+https://h/r", []qualifier{{"vcs.commit", "c0"}})); !os.IsNotExist(err) {
		t.Errorf("the record of a tree that lost a file is still there: %v", err)
	}
}

// TestAssetRecordsSurviveARestart: a record pushed to one server is found by
// the next server on the same store.
func TestAssetRecordsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	a := startAssetServer(t, dir, Options{})
	d := putBlob(t, a.srv.c, "kept across a restart")
	a.pushBlob(t, &rapb.PushBlobRequest{Uris: []string{"urn:kept"}, BlobDigest: d.Proto()})
	a.stop()
	b := startAssetServer(t, dir, Options{})
	resp, err := b.fetchBlob(t, "r3ad", &rapb.FetchBlobRequest{Uris: []string{"urn:kept"}})
	if err != nil || resp.Status.Code != 0 || cache.DigestFromProto(resp.BlobDigest) != d {
		t.Fatalf("fetch after a restart: %v %v", resp, err)
	}
}

// TestAssetAuth: Push needs a client that may write; Fetch of a record is a
// read (anonymous with --allow-anonymous-read); a fetch from origin needs a
// client that may write, and a reader's does not reach the origin.
func TestAssetAuth(t *testing.T) {
	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); io.WriteString(w, "origin") }))
	defer origin.Close()
	a := startAssetServer(t, t.TempDir(), Options{AllowAnonymousRead: true, AssetFetch: true})
	d := putBlob(t, a.srv.c, "x")
	push := rapb.NewPushClient(a.conn)
	req := &rapb.PushBlobRequest{Uris: []string{"urn:a"}, BlobDigest: d.Proto()}
	_, err := push.PushBlob(as("r3ad"), req)
	wantStatus(t, "push with a read-only token", rpcStatus(err), codes.PermissionDenied, "client reader may only read")
	_, err = push.PushBlob(as(""), req)
	wantStatus(t, "push without credentials", rpcStatus(err), codes.Unauthenticated, "credentials required")
	_, err = push.PushBlob(as("wrong"), req)
	wantStatus(t, "push with a wrong token", rpcStatus(err), codes.PermissionDenied, "credentials refused")
	a.pushBlob(t, req)
	if resp, err := a.fetchBlob(t, "", &rapb.FetchBlobRequest{Uris: []string{"urn:a"}}); err != nil || resp.Status.Code != 0 {
		t.Errorf("anonymous fetch of a record: %v %v", resp, err)
	}
	_, err = a.fetchBlob(t, "", &rapb.FetchBlobRequest{Uris: []string{origin.URL + "/f"}})
	wantStatus(t, "anonymous fetch from origin", rpcStatus(err), codes.Unauthenticated, "fetching from origin (--asset-fetch) needs a client that may write: credentials required")
	_, err = a.fetchBlob(t, "r3ad", &rapb.FetchBlobRequest{Uris: []string{origin.URL + "/f"}})
	wantStatus(t, "reader's fetch from origin", rpcStatus(err), codes.PermissionDenied, "fetching from origin (--asset-fetch) needs a client that may write: client reader may only read")
	resp, err := a.fetchBlob(t, "r3ad", &rapb.FetchBlobRequest{Uris: []string{"urn:gantry:git-bundle:https://h/r"}, Qualifiers: qs("vcs.commit", "c0")})
	if err != nil || resp.Status.Code != int32(codes.NotFound) {
		t.Errorf("a reader's fetch of an unknown URN: %v %v, want NOT_FOUND: nothing to fetch from origin", resp, err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("refused fetches reached the origin %d times", n)
	}
}

func sri(algo string, data string) string {
	var sum []byte
	switch algo {
	case "sha256":
		s := sha256.Sum256([]byte(data))
		sum = s[:]
	case "sha384":
		s := sha512.Sum384([]byte(data))
		sum = s[:]
	case "sha512":
		s := sha512.Sum512([]byte(data))
		sum = s[:]
	}
	return algo + "-" + base64.StdEncoding.EncodeToString(sum)
}

// TestAssetFetchFromOrigin: with AssetFetch the server downloads an http URI
// once, checks checksum.sri (sha256, sha384, sha512; one of several is
// enough) and answers the next fetch from its record; a mismatch stores
// nothing and names the URI and both hashes; an origin's 404 is NOT_FOUND;
// qualifiers it cannot honour are refused; without AssetFetch the origin is
// never asked.
func TestAssetFetchFromOrigin(t *testing.T) {
	const content = "the origin's file"
	var hits atomic.Int64
	var gotAuth atomic.Value
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		gotAuth.Store(r.Header.Get("Authorization"))
		switch r.URL.Path {
		case "/missing":
			http.NotFound(w, r)
		case "/bad":
			io.WriteString(w, "not what was asked for")
		default:
			io.WriteString(w, content)
		}
	}))
	defer origin.Close()
	a := startAssetServer(t, t.TempDir(), Options{AssetFetch: true})
	want := cache.DigestOf([]byte(content))

	for i, q := range [][]*rapb.Qualifier{
		qs("checksum.sri", sri("sha256", content)),
		qs("checksum.sri", sri("sha384", content)),
		qs("checksum.sri", sri("sha512", content)+"?opt md5-AAAA"),
		qs("checksum.sri", sri("sha256", "other")+" "+sri("sha512", content), "bazel.canonical_id", "c"),
		nil,
	} {
		before := hits.Load()
		uri := origin.URL + "/file"
		for j := range 2 {
			resp, err := a.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: []string{"ftp://skipped/file", uri}, Qualifiers: q})
			if err != nil || resp.Status.Code != 0 || cache.DigestFromProto(resp.BlobDigest) != want || (j == 0 && resp.Uri != uri) {
				t.Fatalf("case %d: fetch %d: %v %v", i, j, resp, err)
			}
		}
		if n := hits.Load() - before; n != 1 {
			t.Errorf("case %d: the origin was asked %d times for two fetches, want 1", i, n)
		}
	}
	if !a.srv.c.HasBlob(want) {
		t.Error("the fetched blob is not in the CAS")
	}

	uri := origin.URL + "/bad"
	resp, err := a.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: []string{uri}, Qualifiers: qs("checksum.sri", sri("sha256", "expected"))})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "mismatch", status.FromProto(resp.Status), codes.Aborted,
		uri+": checksum mismatch: checksum.sri wants "+sri("sha256", "expected")+", the content is "+sri("sha256", "not what was asked for")+": nothing stored")
	if a.srv.c.HasBlob(cache.DigestOf([]byte("not what was asked for"))) {
		t.Error("the content of a checksum mismatch is in the CAS")
	}
	if _, err := os.Stat(a.srv.assetPath(assetBlob, uri, []qualifier{{"checksum.sri", sri("sha256", "expected")}})); !os.IsNotExist(err) {
		t.Errorf("a record of the mismatch: %v", err)
	}

	uri = origin.URL + "/missing"
	resp, err = a.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: []string{uri}})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "origin 404", status.FromProto(resp.Status), codes.NotFound, uri+": the origin answered 404 Not Found")

	auth := `{"` + origin.URL + `/private":{"Authorization":"Bearer origin-token"}}`
	if resp, err := a.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: []string{origin.URL + "/private"}, Qualifiers: qs("bazel.auth_headers", auth)}); err != nil || resp.Status.Code != 0 {
		t.Fatalf("fetch with auth headers: %v %v", resp, err)
	}
	if got := gotAuth.Load(); got != "Bearer origin-token" {
		t.Errorf("the origin got Authorization %q", got)
	}
	data, err := os.ReadFile(a.srv.assetPath(assetBlob, origin.URL+"/private", nil))
	if err != nil || strings.Contains(string(data), "origin-token") {
		t.Errorf("the record (%v) keeps the origin's credentials or is missing:\n%s", err, data)
	}

	for _, tc := range []struct {
		q   []*rapb.Qualifier
		msg string
	}{
		{qs("checksum.sri", "md5-AAAA"), `checksum.sri "md5-AAAA": no sha256, sha384 or sha512 hash in it`},
		{qs("checksum.sri", "sha256-nope"), `checksum.sri "sha256-nope": "nope" is not a base64 sha256 hash`},
		{qs("vcs.branch", "main"), `qualifier "vcs.branch" is not supported when fetching from origin (supported: checksum.sri, bazel.canonical_id, bazel.auth_headers, http_header:NAME, http_header_url:INDEX:NAME)`},
	} {
		_, err := a.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: []string{origin.URL + "/q"}, Qualifiers: tc.q})
		wantStatus(t, tc.msg, rpcStatus(err), codes.InvalidArgument, tc.msg)
	}

	b := startAssetServer(t, t.TempDir(), Options{})
	before := hits.Load()
	resp, err = b.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: []string{origin.URL + "/file"}})
	if err != nil || resp.Status.Code != int32(codes.NotFound) || hits.Load() != before {
		t.Errorf("without AssetFetch: %v %v, origin asked %d times", resp, err, hits.Load()-before)
	}
}

// TestAssetEvictionKeepsRecordedBlobs: under the quota's pressure, the blobs
// of a record (a directory's tree) stay while the record does, and go with it.
func TestAssetEvictionKeepsRecordedBlobs(t *testing.T) {
	const unit = 64 << 10
	for _, tc := range []struct {
		name      string
		recordAge time.Duration
		treeGone  bool
	}{
		{"a recent record keeps its old blobs", time.Hour, false},
		{"the oldest record goes with its blobs", 5 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAssetServer(t, t.TempDir(), Options{})
			c := a.srv.c
			age := func(p string, d time.Duration) {
				then := time.Now().Add(-d)
				if err := os.Chtimes(p, then, then); err != nil {
					t.Fatal(err)
				}
			}
			big := func(b byte) cache.Digest { return putBlob(t, c, strings.Repeat(string(b), unit)) }
			file := big('f')
			root, err := c.PutDirectory(&repb.Directory{Files: []*repb.FileNode{{Name: "f", Digest: file.Proto()}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rapb.NewPushClient(a.conn).PushDirectory(as("s3cret"), &rapb.PushDirectoryRequest{Uris: []string{"urn:tree"}, RootDirectoryDigest: root.Proto()}); err != nil {
				t.Fatal(err)
			}
			free, newer := big('a'), big('b')
			record := a.srv.assetPath(assetDirectory, "urn:tree", nil)
			age(record, tc.recordAge)
			age(c.BlobPath(file), 4*time.Hour)
			age(c.BlobPath(root), 4*time.Hour)
			age(c.BlobPath(free), 2*time.Hour)
			age(c.BlobPath(newer), time.Hour/2)
			e := newEvictor(c, 2.5*unit, newMetrics(), discardLog)
			if err := e.evict(); err != nil {
				t.Fatal(err)
			}
			if c.HasBlob(free) != tc.treeGone { // the record's going made room enough
				t.Errorf("the oldest free blob present: %v, want %v", c.HasBlob(free), tc.treeGone)
			}
			if c.HasBlob(file) == tc.treeGone || c.HasBlob(root) == tc.treeGone {
				t.Errorf("tree blobs present: file %v, root %v; want %v", c.HasBlob(file), c.HasBlob(root), !tc.treeGone)
			}
			resp, err := rapb.NewFetchClient(a.conn).FetchDirectory(as("s3cret"), &rapb.FetchDirectoryRequest{Uris: []string{"urn:tree"}})
			if err != nil {
				t.Fatal(err)
			}
			if found := resp.Status.Code == 0; found == tc.treeGone {
				t.Errorf("fetch after eviction: %v, want found %v", resp.Status, !tc.treeGone)
			}
		})
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestAssetFetchLimits: a download from origin over --max-blob-size is
// RESOURCE_EXHAUSTED, whether the origin states its size or not, and one past
// the request's timeout is DEADLINE_EXCEEDED; nothing is recorded.
func TestAssetFetchLimits(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stated":
			io.WriteString(w, "twelve bytes")
		case "/chunked":
			w.(http.Flusher).Flush() // no Content-Length
			io.WriteString(w, "twelve bytes")
		case "/slow":
			<-r.Context().Done()
		}
	}))
	defer origin.Close()
	a := startAssetServer(t, t.TempDir(), Options{AssetFetch: true, MaxBlobSize: 5})
	for _, tc := range []struct{ path, msg string }{
		{"/stated", "12 B (12 bytes) is over the server's limit of 5 B (5 bytes)"},
		{"/chunked", "over the server's limit of 5 B (5 bytes)"},
	} {
		uri := origin.URL + tc.path
		resp, err := a.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: []string{uri}})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, tc.path, status.FromProto(resp.Status), codes.ResourceExhausted, uri+": "+tc.msg)
	}
	uri := origin.URL + "/slow"
	resp, err := a.fetchBlob(t, "s3cret", &rapb.FetchBlobRequest{Uris: []string{uri}, Timeout: durationpb.New(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if st := status.FromProto(resp.Status); st.Code() != codes.DeadlineExceeded || !strings.HasPrefix(st.Message(), uri+": ") {
		t.Errorf("a download past its timeout: %s %q", st.Code(), st.Message())
	}
	entries, _ := os.ReadDir(filepath.Join(a.srv.c.Root, assetDir))
	if len(entries) != 0 {
		t.Errorf("records of failed downloads: %v", entries)
	}
}
