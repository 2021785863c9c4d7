package source

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/gantry-build/gantry/internal/netx"
	"github.com/gantry-build/gantry/internal/units"
	"github.com/gantry-build/gantry/internal/version"
)

// NetworkError is a failed download or git remote operation. Temporary ones (connection
// errors, timeouts, HTTP 5xx, 408, 429, truncated bodies) are worth retrying; the
// scheduler does that, not Fetch.
type NetworkError struct {
	URL       string
	Op        string // what was done: "downloading", "git fetch", …
	Status    int    // HTTP status, or 0
	Temporary bool
	Err       error
}

func (e *NetworkError) Error() string {
	msg := e.Op + " " + redactURL(e.URL)
	if e.Status != 0 {
		msg += fmt.Sprintf(": HTTP status %d %s", e.Status, http.StatusText(e.Status))
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *NetworkError) Unwrap() error { return e.Err }

// ChecksumError is a download whose content is not the one its ref names. It is not
// temporary: downloading again gives the same bytes.
type ChecksumError struct {
	URL      string
	Expected string // sha256, hex
	Actual   string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("checksum mismatch for %s: expected sha256 %s, got %s (the file changed upstream, or the ref is wrong; `gantry track` records the current one)",
		redactURL(e.URL), e.Expected, e.Actual)
}

// IsTemporary reports whether err (or an error it wraps) is a NetworkError worth retrying.
func IsTemporary(err error) bool {
	var me *MirrorsError
	if errors.As(err, &me) {
		return me.temporary()
	}
	var ne *NetworkError
	return errors.As(err, &ne) && ne.Temporary
}

// temporaryStatus reports whether an HTTP status may go away by itself.
func temporaryStatus(code int) bool {
	return code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests
}

// redactURL hides a password in u, for messages.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	return p.Redacted()
}

// defaultIdleTimeout ends a download that received nothing for this long, when
// FetchOptions sets no other.
const defaultIdleTimeout = 60 * time.Second

// The HTTP client's limits on one connection beyond netx.Transport's dial settings: to
// complete the TLS handshake, and from the request sent to the response's headers.
const (
	tlsHandshakeTimeout   = 30 * time.Second
	responseHeaderTimeout = 60 * time.Second
)

// Limits on one download besides the idle timeout: a server that trickles a byte a minute,
// or sends without end, would otherwise hold a fetch job (and fill the disk) for ever.
// Both failures are final, not temporary: a transfer alive but too slow, or too large, is
// likely to be so again, and retrying would multiply the bound by network-retries.
const (
	DefaultNetDeadline       = 4 * time.Hour
	DefaultMaxDownload int64 = 32 << 30
)

func (o *FetchOptions) deadline() (time.Duration, error) {
	if o.Deadline > 0 {
		return o.Deadline, nil
	}
	v := os.Getenv("GANTRY_NET_DEADLINE")
	if v == "" {
		return DefaultNetDeadline, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("GANTRY_NET_DEADLINE=%q: want a duration such as 2h", v)
	}
	return d, nil
}

func (o *FetchOptions) maxDownload() (int64, error) {
	if o.MaxDownload > 0 {
		return o.MaxDownload, nil
	}
	return sizeFromEnv("GANTRY_MAX_DOWNLOAD_SIZE", DefaultMaxDownload)
}

// sizeFromEnv reads a size ("500M", "10G") from the environment variable name, or def.
func sizeFromEnv(name string, def int64) (int64, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, ok := units.ParseSize(v)
	if !ok {
		return 0, fmt.Errorf("%s=%q: want a size like 500M, 10G or 2T", name, v)
	}
	return n, nil
}

// LimitError is a source past one of gantry's size limits: a download past
// GANTRY_MAX_DOWNLOAD_SIZE, an archive unpacking past GANTRY_MAX_UNPACKED_SIZE. The limit
// is this machine's setting, not a property of the element, so a build that meets one is
// a staging failure: never cached as the element's, built again once the limit is raised.
type LimitError struct {
	Limit  int64
	Unpack bool // GANTRY_MAX_UNPACKED_SIZE, else GANTRY_MAX_DOWNLOAD_SIZE
}

func (e *LimitError) Error() string {
	if e.Unpack {
		return fmt.Sprintf("the archive unpacks to more than %s (%d bytes), the limit (a decompression bomb? GANTRY_MAX_UNPACKED_SIZE raises it)", units.Bytes(e.Limit), e.Limit)
	}
	return fmt.Sprintf("larger than %s (%d bytes), the download limit (raise GANTRY_MAX_DOWNLOAD_SIZE if it is genuine)", units.Bytes(e.Limit), e.Limit)
}

func (o *FetchOptions) httpClient() *http.Client {
	if o.HTTPClient != nil {
		return o.HTTPClient
	}
	t := netx.Transport()
	t.TLSHandshakeTimeout = tlsHandshakeTimeout
	t.ResponseHeaderTimeout = responseHeaderTimeout
	return &http.Client{Transport: t}
}

func (o *FetchOptions) idleTimeout() time.Duration {
	if o.IdleTimeout > 0 {
		return o.IdleTimeout
	}
	return defaultIdleTimeout
}

func (o *FetchOptions) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// errIdle cancels a download that received nothing for the idle timeout; errDeadline one
// that did not finish in time.
var (
	errIdle     = errors.New("download stalled")
	errDeadline = errors.New("download deadline passed")
)

// download copies rawURL (http, https or file) to w, reporting progress. Errors reaching
// the remote are *NetworkError; a cancelled ctx gives its cause.
func download(ctx context.Context, rawURL string, w io.Writer, o *FetchOptions) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("downloading %s: bad url: %w", redactURL(rawURL), err)
	}
	switch u.Scheme {
	case "http", "https":
		return downloadHTTP(ctx, rawURL, w, o)
	case "file":
		return copyLocalFile(ctx, u, w, o)
	}
	return fmt.Errorf("downloading %s: unsupported url scheme %q (use http, https or file)", redactURL(rawURL), u.Scheme)
}

func downloadHTTP(parent context.Context, rawURL string, w io.Writer, o *FetchOptions) error {
	idle := o.idleTimeout()
	deadline, err := o.deadline()
	if err != nil {
		return err
	}
	limit, err := o.maxDownload()
	if err != nil {
		return err
	}
	// The watchdog: every byte that arrives pushes it back; it covers waiting for the
	// response headers too.
	ctx, watchdog := netx.WithWatchdog(parent, idle, errIdle)
	defer watchdog.Stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	overall := time.AfterFunc(deadline, func() { cancel(errDeadline) })
	defer overall.Stop()

	netErr := func(status int, temporary bool, err error) error {
		switch {
		case parent.Err() != nil:
			return fmt.Errorf("downloading %s: %w", redactURL(rawURL), context.Cause(parent))
		case context.Cause(ctx) == errIdle:
			return &NetworkError{URL: rawURL, Op: "downloading", Status: status, Temporary: true,
				Err: fmt.Errorf("no data received for %s", idle)}
		case context.Cause(ctx) == errDeadline:
			return &NetworkError{URL: rawURL, Op: "downloading", Status: status,
				Err: fmt.Errorf("not finished after %s, the download deadline (raise GANTRY_NET_DEADLINE for a slow mirror)", deadline)}
		}
		return &NetworkError{URL: rawURL, Op: "downloading", Status: status, Temporary: temporary, Err: err}
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return fmt.Errorf("downloading %s: %w", redactURL(rawURL), err)
	}
	// Ask for the bytes as stored: a transparently decompressed body would not match its
	// checksum.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", version.UserAgent())
	client := o.httpClient()
	if o.HTTPClient == nil {
		defer client.CloseIdleConnections() // the client is this download's alone
	}
	resp, err := client.Do(req)
	if err != nil {
		return netErr(0, !isCertificateError(err), unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return netErr(resp.StatusCode, temporaryStatus(resp.StatusCode), nil)
	}
	total := max(resp.ContentLength, 0)
	if total > limit {
		return &NetworkError{URL: rawURL, Op: "downloading", Err: &LimitError{Limit: limit}}
	}
	o.logf("downloading %s (%s)", redactURL(rawURL), sizeString(total))
	pw := &progressWriter{w: w, total: total, limit: limit, progress: o.Progress, onData: watchdog.Kick}
	if _, err := io.Copy(pw, resp.Body); err != nil {
		var big *LimitError
		if errors.As(err, &big) {
			return &NetworkError{URL: rawURL, Op: "downloading", Err: big}
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			if total > 0 {
				err = fmt.Errorf("connection closed after %d of %d bytes", pw.done, total)
			} else {
				err = fmt.Errorf("connection closed after %d bytes", pw.done)
			}
		}
		var we *writeError
		if errors.As(err, &we) {
			return fmt.Errorf("downloading %s: %w", redactURL(rawURL), we.err)
		}
		return netErr(0, true, unwrapURLError(err))
	}
	if total > 0 && pw.done != total {
		return netErr(0, true, fmt.Errorf("received %d of %d bytes", pw.done, total))
	}
	return nil
}

func copyLocalFile(ctx context.Context, u *url.URL, w io.Writer, o *FetchOptions) error {
	p := u.Path
	if u.Opaque != "" { // file:relative/path is relative to the project root
		p = filepath.Join(o.ProjectRoot, filepath.FromSlash(u.Opaque))
	}
	f, err := os.Open(p)
	if err != nil {
		return &NetworkError{URL: u.String(), Op: "reading", Err: err}
	}
	defer f.Close()
	limit, err := o.maxDownload()
	if err != nil {
		return err
	}
	var total int64
	if info, err := f.Stat(); err == nil {
		total = info.Size()
	}
	pw := &progressWriter{w: w, total: total, limit: limit, progress: o.Progress}
	if _, err := io.Copy(pw, ctxReader{ctx, f}); err != nil {
		return fmt.Errorf("copying %s: %w", u.String(), err)
	}
	return nil
}

// progressWriter passes bytes to w and counts them, refusing to pass limit.
type progressWriter struct {
	w        io.Writer
	done     int64
	total    int64
	limit    int64 // 0: none
	progress func(done, total int64)
	onData   func()
}

// writeError marks a failure of the local side of a copy (disk full), which is not a
// network error.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

func (p *progressWriter) Write(b []byte) (int, error) {
	if p.onData != nil && len(b) > 0 {
		p.onData()
	}
	if p.limit > 0 && p.done+int64(len(b)) > p.limit {
		return 0, &LimitError{Limit: p.limit}
	}
	n, err := p.w.Write(b)
	p.done += int64(n)
	if p.progress != nil {
		p.progress(p.done, p.total)
	}
	if err != nil {
		return n, &writeError{err}
	}
	return n, nil
}

// ctxReader stops a long local copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(b)
}

func isCertificateError(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownAuthority) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verification)
}

// unwrapURLError drops the "Get \"url\":" prefix of *url.Error: NetworkError names the URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func sizeString(n int64) string {
	if n <= 0 {
		return "size unknown"
	}
	return units.Bytes(n)
}
