package cli

// End-to-end tests of `gantry cache serve` under abuse: idle and stalled
// connections, password guessing, read-only credentials, oversized uploads,
// error replies, and the leftovers of a killed server.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"golang.org/x/crypto/bcrypt"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/cache"
)

// restartServe starts a server on the store of s (running or not), with extra flags.
func restartServe(t *testing.T, s *serveProc, extra ...string) *serveProc {
	t.Helper()
	n := startServe(t, append([]string{"--dir", s.dir}, extra...)...)
	n.dir = s.dir
	return n
}

// writeHtpasswd writes an htpasswd file of user:password pairs, bcrypt of cost.
func writeHtpasswd(t *testing.T, cost int, pairs ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), cost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%s\n", pairs[i], h)
	}
	p := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// dialServeAs connects a raw REAPI client sending authorization (none if "").
func dialServeAs(t *testing.T, s *serveProc, authorization string) (*grpc.ClientConn, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	if authorization != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", authorization)
	}
	return conn, ctx
}

// closedBy waits until the server closes conn (a read ends in EOF or a reset),
// up to deadline, and reports whether it did.
func closedBy(conn net.Conn, r io.Reader, deadline time.Time) bool {
	conn.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestServeClosesIdleConnections: with --idle-timeout and --header-timeout of
// 1 s, the server closes 50 HTTP connections that got their 401 and then sent
// nothing, 10 that never sent a request, one whose upload stalled (and drops
// that upload), and gRPC connections that got UNAUTHENTICATED, all within 8 s.
func TestServeClosesIdleConnections(t *testing.T) {
	s := startServe(t, "--idle-timeout", "1s", "--header-timeout", "1s")
	_, hash := randomBlob(t, 10)
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", s.http)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	start := time.Now()
	type opened struct {
		conn net.Conn
		r    *bufio.Reader
	}
	var after401 []opened
	for range 50 {
		conn := dial()
		fmt.Fprintf(conn, "GET /cas/%s HTTP/1.1\r\nHost: cache\r\n\r\n", hash)
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET without credentials: %d, want 401", resp.StatusCode)
		}
		after401 = append(after401, opened{conn, r})
	}
	var silent []net.Conn
	for range 10 {
		silent = append(silent, dial())
	}
	stalled := dial()
	fmt.Fprintf(stalled, "PUT /cas/%s HTTP/1.1\r\nHost: cache\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n0123456789", hash, s.token)

	var grpcConns []*grpc.ClientConn
	for range 10 {
		conn, ctx := dialServeAs(t, s, "")
		_, err := repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("GetCapabilities without credentials: %v, want UNAUTHENTICATED", err)
		}
		grpcConns = append(grpcConns, conn)
	}

	deadline := start.Add(8 * time.Second)
	open := 0
	for _, o := range after401 {
		if !closedBy(o.conn, o.r, deadline) {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of 50 connections still open %v after their 401 (idle timeout 1s)", open, time.Since(start).Round(time.Millisecond))
	}
	open = 0
	for _, c := range silent {
		if !closedBy(c, c, deadline) {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of 10 connections that sent no request still open after %v (header timeout 1s)", open, time.Since(start).Round(time.Millisecond))
	}
	if !closedBy(stalled, stalled, deadline) {
		t.Errorf("a connection whose upload stalled still open after %v (idle timeout 1s)", time.Since(start).Round(time.Millisecond))
	}
	open = 0
	for _, c := range grpcConns {
		wait, cancel := context.WithDeadline(context.Background(), deadline)
		for c.GetState() == connectivity.Ready && c.WaitForStateChange(wait, connectivity.Ready) {
		}
		cancel()
		if c.GetState() == connectivity.Ready {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of 10 gRPC connections still open after %v after UNAUTHENTICATED (idle timeout 1s)", open, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("connections checked after %v", time.Since(start).Round(time.Millisecond))
	eventually(t, e2eTimeout, "the stalled upload's temporary file is removed", func() bool {
		left, _ := os.ReadDir(filepath.Join(s.dir, "tmp"))
		return len(left) == 0
	})
	s.stop()
	s.verifyStore()
}

// TestServePasswordLimits: a password that passed is checked with bcrypt once
// (20 requests: one check); past 5 wrong passwords the client gets 429 (and
// RESOURCE_EXHAUSTED over gRPC) without any bcrypt, for the same user and for
// others, while the password that passed goes on working.
func TestServePasswordLimits(t *testing.T) {
	s := startServe(t, "--auth-retry-interval", "1h")
	_, hash := randomBlob(t, 10)
	get := func(authorization string) (int, []byte) {
		return s.request("GET", "/cas/"+hash, nil, false, "Authorization", authorization)
	}
	right := basicAuth("ci-user", serveTestPassword)
	for range 20 {
		if code, body := get(right); code != http.StatusNotFound {
			t.Fatalf("GET with the right password: %d %s, want 404 (a miss)", code, body)
		}
	}
	if n := s.metric("gantry_serve_password_checks_total"); n != 1 {
		t.Errorf("20 requests with one password ran %d bcrypt checks, want 1", n)
	}
	var codes403, codes429 int
	for i := range 12 {
		code, _ := get(basicAuth("ci-user", fmt.Sprintf("guess-%d", i)))
		switch code {
		case http.StatusForbidden:
			codes403++
		case http.StatusTooManyRequests:
			codes429++
		default:
			t.Errorf("wrong password %d: status %d", i, code)
		}
	}
	if codes403 != 5 || codes429 != 7 {
		t.Errorf("12 wrong passwords: %d refused (403), %d limited (429); want 5 and 7", codes403, codes429)
	}
	if n := s.metric("gantry_serve_password_checks_total"); n != 6 {
		t.Errorf("bcrypt checks after 12 wrong passwords: %d, want 6 (1 + 5)", n)
	}
	if code, _ := get(basicAuth("someone-else", "x")); code != http.StatusTooManyRequests {
		t.Errorf("another user from the limited address: %d, want 429", code)
	}
	if code, _ := get(right); code != http.StatusNotFound {
		t.Errorf("the password that passed, while the address is limited: %d, want 404", code)
	}
	conn, ctx := dialServeAs(t, s, basicAuth("ci-user", "grpc-guess"))
	_, err := repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gRPC with a wrong password from the limited address: %v, want RESOURCE_EXHAUSTED", err)
	}
	if n := s.metric("gantry_serve_password_checks_total"); n != 6 {
		t.Errorf("bcrypt checks after limited attempts: %d, want still 6", n)
	}
	if n := s.metric("gantry_serve_auth_limited_total"); n != 9 {
		t.Errorf("gantry_serve_auth_limited_total = %d, want 9", n)
	}
	s.stop()
	if strings.Contains(s.log(), "guess-") || strings.Contains(s.log(), serveTestPassword) {
		t.Error("a password appears in the server's log")
	}
}

// TestServeUnknownUserCostsABcrypt: a wrong password for a user the server does
// not know takes as long as one for a user it knows (bcrypt cost 11), so user
// names cannot be probed by timing.
func TestServeUnknownUserCostsABcrypt(t *testing.T) {
	htpasswd := writeHtpasswd(t, 11, "known", "right-password")
	s := startServe(t, "--htpasswd", htpasswd, "--auth-retry-interval", "1ms")
	_, hash := randomBlob(t, 10)
	fastest := func(user string) time.Duration {
		best := time.Hour
		for i := range 3 {
			begin := time.Now()
			code, _ := s.request("GET", "/cas/"+hash, nil, false, "Authorization", basicAuth(user, fmt.Sprintf("wrong-%d", i)))
			if code != http.StatusForbidden {
				t.Fatalf("wrong password for %s: status %d, want 403", user, code)
			}
			best = min(best, time.Since(begin))
		}
		return best
	}
	known, unknown := fastest("known"), fastest("nobody")
	t.Logf("fastest of 3 wrong passwords: known user %v, unknown user %v", known, unknown)
	// Without the stand-in hash the unknown user took 0.08 ms against 151 ms: a
	// tenth keeps the check far from the noise of a loaded machine.
	if unknown < known/10 {
		t.Errorf("a wrong password took %v for an unknown user and %v for a known one: user names can be probed", unknown, known)
	}
	if n := s.metric("gantry_serve_password_checks_total"); n != 6 {
		t.Errorf("bcrypt checks for 6 wrong passwords: %d, want 6", n)
	}
}

// TestServeReadOnlyCredentials: a token marked read in the token file and a user
// of --htpasswd-read read over HTTP and gRPC, and every write they try is refused
// (403 / PERMISSION_DENIED) and stores nothing; a token marked write writes; a
// token file with another access word is refused at start with its file:line.
func TestServeReadOnlyCredentials(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("s3cret-token ci\nro-token reader read\nrw-token writer write\n"), 0o600)
	readers := writeHtpasswd(t, bcrypt.MinCost, "viewer", "view-pass")
	s := startServe(t, "--token-file", tokens, "--htpasswd-read", readers)
	blob, hash := randomBlob(t, 100)
	if code, _ := s.request("PUT", "/cas/"+hash, blob, true); code != http.StatusOK {
		t.Fatalf("PUT with a token of no stated access (write): %d", code)
	}
	ro := "Bearer ro-token"
	viewer := basicAuth("viewer", "view-pass")
	other, otherHash := randomBlob(t, 100)
	_, key := randomBlob(t, 10)
	for _, who := range []string{ro, viewer} {
		for _, w := range []struct{ method, path string }{{"PUT", "/cas/" + otherHash}, {"PUT", "/ac/" + key}, {"POST", "/lease/" + key}, {"DELETE", "/lease/" + key}} {
			if code, body := s.request(w.method, w.path, other, false, "Authorization", who); code != http.StatusForbidden {
				t.Errorf("%s %s with a read-only credential: %d %s, want 403", w.method, w.path, code, body)
			}
		}
		if code, body := s.request("GET", "/cas/"+hash, nil, false, "Authorization", who); code != http.StatusOK || !bytes.Equal(body, blob) {
			t.Errorf("GET with a read-only credential: %d", code)
		}
	}
	if _, err := os.Stat(s.blobPath(otherHash)); err == nil {
		t.Error("a read-only credential stored a blob")
	}
	if code, _ := s.request("PUT", "/cas/"+otherHash, other, false, "Authorization", "Bearer rw-token"); code != http.StatusOK {
		t.Errorf("PUT with a token marked write: %d", code)
	}

	conn, ctx := dialServeAs(t, s, ro)
	casc := repb.NewContentAddressableStorageClient(conn)
	third, _ := randomBlob(t, 50)
	d := cache.DigestOf(third)
	_, err := casc.BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: d.Proto(), Data: third}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("BatchUpdateBlobs with a read-only token: %v, want PERMISSION_DENIED", err)
	}
	w, err := bspb.NewByteStreamClient(conn).Write(ctx)
	if err == nil {
		w.Send(&bspb.WriteRequest{ResourceName: fmt.Sprintf("uploads/u1/blobs/%s/%d", d.Hash, d.Size), Data: third, FinishWrite: true})
		_, err = w.CloseAndRecv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("ByteStream Write with a read-only token: %v, want PERMISSION_DENIED", err)
	}
	_, err = repb.NewActionCacheClient(conn).UpdateActionResult(ctx, &repb.UpdateActionResultRequest{
		ActionDigest: cache.DigestOf([]byte("action")).Proto(), ActionResult: &repb.ActionResult{}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("UpdateActionResult with a read-only token: %v, want PERMISSION_DENIED", err)
	}
	if _, err := os.Stat(s.blobPath(d.Hash)); err == nil {
		t.Error("a read-only token stored a blob over gRPC")
	}
	read, err := casc.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{Digests: []*repb.Digest{cache.DigestOf(blob).Proto()}})
	if err != nil || len(read.Responses) != 1 || !bytes.Equal(read.Responses[0].Data, blob) {
		t.Errorf("BatchReadBlobs with a read-only token: %v", err)
	}
	if n := s.metric("gantry_serve_auth_refused_total"); n != 11 {
		t.Errorf("gantry_serve_auth_refused_total = %d, want 11 (8 HTTP writes, 3 gRPC)", n)
	}
	s.stop()

	os.WriteFile(tokens, []byte("s3cret-token ci\nbad-token someone admin\n"), 0o600)
	_, stderr, code := newE2EProject(t, nil).run("cache", "serve", "--dir", s.dir, "--http", "127.0.0.1:0", "--token-file", tokens)
	if code != 2 || !strings.Contains(stderr, tokens+":2:") || !strings.Contains(stderr, "read|write") {
		t.Errorf("a token file with access word admin: exit %d, want 2 naming %s:2:\n%s", code, tokens, stderr)
	}
	writers := writeHtpasswd(t, bcrypt.MinCost, "viewer", "other-pass")
	_, stderr, code = newE2EProject(t, nil).run("cache", "serve", "--dir", s.dir, "--http", "127.0.0.1:0", "--htpasswd", writers, "--htpasswd-read", readers)
	if code != 2 || !strings.Contains(stderr, readers+":1:") || !strings.Contains(stderr, "user viewer") {
		t.Errorf("a user in --htpasswd and --htpasswd-read: exit %d, want 2 naming %s:1:\n%s", code, readers, stderr)
	}
}

// TestServeUploadLimitsAndErrorsHideTheStore: a chunked upload (no
// Content-Length) over --max-blob-size gets 413; the replies to requests that
// fail on the server (its tmp/ broken, an action cache entry damaged), over
// HTTP and gRPC, never carry the store's path, which the server's log keeps.
func TestServeUploadLimitsAndErrorsHideTheStore(t *testing.T) {
	s := startServe(t, "--max-blob-size", "1K")
	var replies []string
	reply := func(what string, text string) { replies = append(replies, what+": "+text) }

	big, bigHash := randomBlob(t, 4<<10)
	req, _ := http.NewRequest("PUT", "http://"+s.http+"/cas/"+bigHash, io.MultiReader(bytes.NewReader(big)))
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	reply("chunked PUT over the limit", string(body))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked PUT of 4 KiB over a limit of 1 KiB: %d %s, want 413", resp.StatusCode, body)
	}

	conn, ctx := dialServe(t, s)
	// A damaged action cache entry.
	key := cache.DigestOf([]byte("damaged entry"))
	entry := filepath.Join(s.dir, "ac", key.Hash[:2], key.Hash)
	os.MkdirAll(filepath.Dir(entry), 0o755)
	os.WriteFile(entry, []byte("\xff\xff not an action result"), 0o644)
	_, err = repb.NewActionCacheClient(conn).GetActionResult(ctx, &repb.GetActionResultRequest{ActionDigest: key.Proto()})
	reply("GetActionResult of a damaged entry", status.Convert(err).Message())
	code, body := s.request("GET", "/ac/"+key.Hash, nil, true)
	reply("GET of a damaged entry", string(body))
	if code != http.StatusNotFound {
		t.Errorf("GET of a damaged entry: %d, want 404", code)
	}

	// tmp/ broken: every write fails on the server.
	tmp := filepath.Join(s.dir, "tmp")
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(tmp, nil, 0o644)
	small, smallHash := randomBlob(t, 100)
	code, body = s.request("PUT", "/cas/"+smallHash, small, true)
	reply("PUT with tmp/ broken", string(body))
	if code != http.StatusInternalServerError {
		t.Errorf("PUT with tmp/ broken: %d, want 500", code)
	}
	code, body = s.request("PUT", "/ac/"+key.Hash, nil, true)
	reply("PUT /ac/ with tmp/ broken", string(body))
	if code != http.StatusInternalServerError {
		t.Errorf("PUT /ac/ with tmp/ broken: %d, want 500", code)
	}
	d := cache.DigestOf(small)
	batch, err := repb.NewContentAddressableStorageClient(conn).BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{
		Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: d.Proto(), Data: small}}})
	if err != nil || len(batch.Responses) != 1 || codes.Code(batch.Responses[0].Status.Code) != codes.Internal {
		t.Errorf("BatchUpdateBlobs with tmp/ broken: %v %v, want an INTERNAL entry", batch, err)
	} else {
		reply("BatchUpdateBlobs with tmp/ broken", batch.Responses[0].Status.Message)
	}
	w, err := bspb.NewByteStreamClient(conn).Write(ctx)
	if err == nil {
		w.Send(&bspb.WriteRequest{ResourceName: fmt.Sprintf("uploads/u1/blobs/%s/%d", d.Hash, d.Size), Data: small, FinishWrite: true})
		_, err = w.CloseAndRecv()
	}
	reply("ByteStream Write with tmp/ broken", status.Convert(err).Message())
	if status.Code(err) != codes.Internal {
		t.Errorf("ByteStream Write with tmp/ broken: %v, want INTERNAL", err)
	}
	_, err = repb.NewActionCacheClient(conn).UpdateActionResult(ctx, &repb.UpdateActionResultRequest{
		ActionDigest: key.Proto(), ActionResult: &repb.ActionResult{}})
	reply("UpdateActionResult with tmp/ broken", status.Convert(err).Message())

	for _, r := range replies {
		if strings.Contains(r, s.dir) {
			t.Errorf("a reply names the store's path %s: %s", s.dir, r)
		}
	}
	if !strings.Contains(s.log(), filepath.Join(s.dir, "tmp")) {
		t.Errorf("the server's log does not keep the full error:\n%s", s.log())
	}
	t.Logf("replies:\n  %s", strings.Join(replies, "\n  "))
	os.Remove(tmp)
	os.Mkdir(tmp, 0o755)
}

// TestServeRemovesDeadUploads: partial ByteStream uploads of a server killed with
// SIGKILL are removed when a server starts on the store again, whatever their
// age; those of a server still running are kept.
func TestServeRemovesDeadUploads(t *testing.T) {
	uploads := func(dir string) int {
		n := 0
		entries, _ := os.ReadDir(filepath.Join(dir, "tmp"))
		for _, e := range entries {
			if strings.Contains(e.Name(), "-upload-") {
				n++
			}
		}
		return n
	}
	park := func(s *serveProc, count int) {
		conn, ctx := dialServe(t, s)
		bs := bspb.NewByteStreamClient(conn)
		for i := range count {
			blob, hash := randomBlob(t, 64<<10)
			name := fmt.Sprintf("uploads/6d1a2c4e-0000-4000-8000-00000000000%d/blobs/%s/%d", i, hash, len(blob))
			w, err := bs.Write(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Send(&bspb.WriteRequest{ResourceName: name, Data: blob[:1000]}); err != nil {
				t.Fatal(err)
			}
			w.CloseSend() // broken off: the server keeps the partial upload
			w.CloseAndRecv()
			eventually(t, e2eTimeout, "the server holds the partial upload", func() bool {
				st, err := bs.QueryWriteStatus(ctx, &bspb.QueryWriteStatusRequest{ResourceName: name})
				return err == nil && st.CommittedSize == 1000
			})
		}
	}
	first := startServe(t)
	park(first, 3)
	live := restartServe(t, first)
	park(live, 2)
	if n := uploads(first.dir); n != 5 {
		t.Fatalf("%d partial uploads in tmp/, want 5", n)
	}
	first.cmd.Process.Kill()
	<-first.done
	if n := uploads(first.dir); n != 5 {
		t.Fatalf("after SIGKILL: %d partial uploads in tmp/, want 5", n)
	}
	again := restartServe(t, first)
	if n := uploads(first.dir); n != 2 {
		t.Errorf("a server started after SIGKILL left %d partial uploads in tmp/, want 2 (those of the server still running)", n)
	}
	eventually(t, e2eTimeout, "the server says it removed 3 partial uploads", func() bool {
		return strings.Contains(again.log(), "removed 3 partial uploads")
	})
	again.stop()
	live.stop()
	if n := uploads(first.dir); n != 0 {
		t.Errorf("after SIGTERM: %d partial uploads in tmp/, want 0", n)
	}
}

// TestServeCutsAStalledDownload: a client that asks for a large blob and stops
// reading held its connection, its admission and an open file for as long as it
// liked; with --idle-timeout 1s the server gives up on it, says so in its log,
// and the client never gets the whole body.
func TestServeCutsAStalledDownload(t *testing.T) {
	s := startServe(t, "--idle-timeout", "1s")
	blob, hash := randomBlob(t, 16<<20)
	if code, body := s.request("PUT", "/cas/"+hash, blob, true); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	conn, err := net.Dial("tcp", s.http)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(64 << 10) // keep the kernel from taking it all in for us
	fmt.Fprintf(conn, "GET /cas/%s HTTP/1.1\r\nHost: cache\r\nAuthorization: Bearer %s\r\n\r\n", hash, s.token)
	eventually(t, e2eTimeout, "the server gives up on the client that stopped reading", func() bool {
		return strings.Contains(s.log(), "read nothing for 1s")
	})
	conn.SetReadDeadline(time.Now().Add(e2eTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	if n >= int64(len(blob)) {
		t.Errorf("the stalled client still got the whole blob (%d bytes) after the server gave up on it", n)
	}
	s.stop()
}
