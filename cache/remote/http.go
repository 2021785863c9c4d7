package remote

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/netx"
	"github.com/gantry-build/gantry/internal/version"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
)

// parallelism bounds the requests one transfer has in flight at once.
const parallelism = 16

// httpStore speaks the HTTP cache protocol of Bazel and bazel-remote (DESIGN.md §7):
// PREFIX/cas/<sha256> holds blobs, PREFIX/ac/<sha256> holds serialized ActionResults.
// nginx with WebDAV PUT serves it too.
type httpStore struct {
	name   string   // URL without userinfo
	base   *url.URL // scheme, host and prefix, without userinfo or trailing slash
	user   *url.Userinfo
	token  string
	client *http.Client
	idle   time.Duration // see Spec.IdleTimeout
}

// newHTTPStore returns the Store of an http(s):// remote.
func newHTTPStore(spec Spec, u *url.URL) (Store, error) {
	tlsCfg, err := tlsConfig(spec)
	if err != nil {
		return nil, err
	}
	token, err := readToken(spec)
	if err != nil {
		return nil, err
	}
	base := *u
	base.User = nil
	base.RawQuery, base.Fragment = "", ""
	base.Path = strings.TrimSuffix(base.Path, "/")
	base.RawPath = ""
	t := netx.Transport()
	t.MaxIdleConnsPerHost = parallelism
	t.ResponseHeaderTimeout = spec.idleTimeout()
	t.DisableCompression = true // blobs are verified as stored
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg
	}
	return &httpStore{name: spec.Display(), base: &base, user: u.User, token: token, client: &http.Client{Transport: t}, idle: spec.idleTimeout()}, nil
}

func (s *httpStore) Name() string { return s.name }

func (s *httpStore) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

func (s *httpStore) url(kind, hash string) string {
	return s.base.String() + "/" + kind + "/" + hash
}

// replyLimit is the most read of a reply that is not a blob (a PUT's answer,
// a lease reply): enough for any server's, not a stranger's endless body.
const replyLimit = 64 << 10

// errStalled cancels an exchange that received nothing for the idle timeout.
var errStalled = errors.New("stalled")

// exchange is one request with its stall watchdog: every byte received pushes it back.
type exchange struct {
	s        *httpStore
	op       string
	parent   context.Context
	ctx      context.Context
	watchdog *netx.Watchdog
}

func (s *httpStore) start(parent context.Context, op string) *exchange {
	ctx, watchdog := netx.WithWatchdog(parent, s.idle, errStalled)
	return &exchange{s: s, op: op, parent: parent, ctx: ctx, watchdog: watchdog}
}

func (x *exchange) end() {
	x.watchdog.Stop()
}

// do sends a request. body may be nil; size is its length.
func (x *exchange) do(method, rawURL string, body func() (io.ReadCloser, error), size int64) (*http.Response, error) {
	var rd io.ReadCloser
	if body != nil {
		var err error
		if rd, err = body(); err != nil {
			return nil, fmt.Errorf("%s: %w", x.op, err)
		}
	}
	req, err := http.NewRequestWithContext(x.ctx, method, rawURL, rd)
	if err != nil {
		if rd != nil {
			rd.Close()
		}
		return nil, x.fail(0, err)
	}
	if body != nil {
		req.ContentLength = size
		req.GetBody = body
		if size == 0 {
			req.Body = http.NoBody
			rd.Close()
		}
	}
	req.Header.Set("User-Agent", version.UserAgent())
	req.Header.Set("Accept-Encoding", "identity")
	if t := fencingToken(x.ctx); t != 0 && method == http.MethodPut {
		// Read by the server on the entry's PUT; the blobs' PUTs of a push carry it too.
		req.Header.Set(FencingHeader, strconv.FormatUint(t, 10))
	}
	switch {
	case x.s.token != "":
		req.Header.Set("Authorization", "Bearer "+x.s.token)
	case x.s.user != nil:
		pw, _ := x.s.user.Password()
		req.SetBasicAuth(x.s.user.Username(), pw)
	}
	resp, err := x.s.client.Do(req)
	if err != nil {
		var ue *uploadError
		if errors.As(err, &ue) {
			// The local content failed, not the remote: the request was abandoned.
			return nil, fmt.Errorf("remote %s: %s: %w", x.s.name, x.op, ue)
		}
		return nil, x.fail(0, err)
	}
	x.watchdog.Kick()
	return resp, nil
}

// fail classifies a failed exchange: status is the HTTP status (0 for a transport
// error), err what went wrong.
func (x *exchange) fail(status int, err error) error {
	if x.parent.Err() != nil {
		return fmt.Errorf("remote %s: %s: %w", x.s.name, x.op, context.Cause(x.parent))
	}
	if context.Cause(x.ctx) == errStalled {
		return &Error{Remote: x.s.name, Op: x.op, Kind: Unavailable, Err: fmt.Errorf("no data received for %s", x.s.idle)}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is in the message already, without its userinfo
	}
	kind := Unavailable
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		kind = Auth
	case status >= 500 || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests:
		kind = Unavailable
	case status >= 400:
		kind = Refused
	case status == 0 && isTLSError(err):
		kind = Refused
	}
	if status != 0 {
		err = fmt.Errorf("HTTP %s", http.StatusText(status)+fmt.Sprintf(" (%d)", status))
	}
	return &Error{Remote: x.s.name, Op: x.op, Kind: kind, Err: err}
}

// isTLSError reports a certificate the client refuses: retrying will not help.
func isTLSError(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn)
}

// watchReader pushes the watchdog back on every byte read.
type watchReader struct {
	r io.Reader
	x *exchange
	n int64
}

func (w *watchReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.n += int64(n)
		w.x.watchdog.Kick()
	}
	return n, err
}

// get reads PREFIX/kind/hash into w. A miss (404, or 204 as bazel-remote may answer)
// gives an error wrapping ErrNotFound.
func (s *httpStore) get(ctx context.Context, op, kind, hash string, w io.Writer) error {
	x := s.start(ctx, op)
	defer x.end()
	resp, err := x.do(http.MethodGet, s.url(kind, hash), nil, 0)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusNoContent:
		return fmt.Errorf("remote %s: %s: %w", s.name, op, cache.ErrNotFound)
	default:
		return x.fail(resp.StatusCode, nil)
	}
	wr := &watchReader{r: resp.Body, x: x}
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	if _, err := io.CopyBuffer(w, wr, *buf); err != nil {
		var we *writeErr
		if errors.As(err, &we) {
			return fmt.Errorf("remote %s: %s: %w", s.name, op, we.err)
		}
		return x.fail(0, fmt.Errorf("connection closed after %d bytes: %w", wr.n, err))
	}
	if resp.ContentLength >= 0 && wr.n != resp.ContentLength {
		return x.fail(0, fmt.Errorf("received %d of %d bytes", wr.n, resp.ContentLength))
	}
	return nil
}

// copyBuffers hold the buffers a download is copied through: 256 KiB, so a
// blob of that size takes one write into the cache rather than eight of
// io.Copy's 32 KiB, and no buffer is allocated per blob.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// writeErr marks an error of the local writer, so it is not taken for the remote's.
type writeErr struct{ err error }

func (e *writeErr) Error() string { return e.err.Error() }

type localWriter struct{ w io.Writer }

func (l localWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if err != nil {
		err = &writeErr{err}
	}
	return n, err
}

// put uploads PREFIX/kind/hash.
func (s *httpStore) put(ctx context.Context, op, kind, hash string, open func() (io.ReadCloser, error), size int64) error {
	x := s.start(ctx, op)
	defer x.end()
	resp, err := x.do(http.MethodPut, s.url(kind, hash), open, size)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, replyLimit))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated, http.StatusAccepted, http.StatusNoContent:
		return nil
	}
	return x.fail(resp.StatusCode, nil)
}

func (s *httpStore) FindMissing(ctx context.Context, ds []cache.Digest) ([]cache.Digest, error) {
	missing := make([]bool, len(ds))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	for i, d := range ds {
		g.Go(func() error {
			x := s.start(gctx, "looking for blob "+d.String())
			defer x.end()
			resp, err := x.do(http.MethodHead, s.url("cas", d.Hash), nil, 0)
			if err != nil {
				return err
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				// A blob of the wrong size is as good as missing: upload it again.
				missing[i] = resp.ContentLength >= 0 && resp.ContentLength != d.Size
			case http.StatusNotFound, http.StatusNoContent:
				missing[i] = true
			default:
				return x.fail(resp.StatusCode, nil)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []cache.Digest
	for i, d := range ds {
		if missing[i] {
			out = append(out, d)
		}
	}
	return out, nil
}

func (s *httpStore) ReadBlob(ctx context.Context, d cache.Digest, w io.Writer) error {
	return s.get(ctx, "reading blob "+d.String(), "cas", d.Hash, localWriter{w})
}

func (s *httpStore) WriteBlob(ctx context.Context, d cache.Digest, open func() (io.ReadCloser, error)) error {
	return s.put(ctx, "writing blob "+d.String(), "cas", d.Hash, hashedUpload(d, open), d.Size)
}

func (s *httpStore) GetEntry(ctx context.Context, key string) (*Entry, error) {
	op := "reading the artifact entry of key " + key
	var buf bytes.Buffer
	if err := s.get(ctx, op, "ac", Key(key).Hash, localWriter{&buf}); err != nil {
		return nil, err
	}
	var ar repb.ActionResult
	if err := proto.Unmarshal(buf.Bytes(), &ar); err != nil {
		return nil, &Error{Remote: s.name, Op: op, Kind: Corrupt, Err: fmt.Errorf("decoding the ActionResult: %w", err)}
	}
	e, err := actionResultEntry(&ar)
	if err != nil {
		return nil, &Error{Remote: s.name, Op: op, Kind: Corrupt, Err: err}
	}
	return e, nil
}

func (s *httpStore) UpdateEntry(ctx context.Context, key string, e *Entry) error {
	data, err := proto.Marshal(entryActionResult(e))
	if err != nil {
		return fmt.Errorf("encoding the artifact entry of key %s: %w", key, err)
	}
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	return s.put(ctx, "writing the artifact entry of key "+key, "ac", Key(key).Hash, open, int64(len(data)))
}
