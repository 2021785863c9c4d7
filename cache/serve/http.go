package serve

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
)

// The HTTP cache protocol as bazel-remote answers it:
//
//	GET|HEAD [/PREFIX]/cas/<sha256>   200 with the blob, 404 when missing
//	PUT      [/PREFIX]/cas/<sha256>   stored when the body hashes to <sha256>: 200; else 400
//	GET|HEAD [/PREFIX]/ac/<sha256>    200 with a serialized ActionResult, 404 when missing
//	                                  or when a blob it references is missing
//	PUT      [/PREFIX]/ac/<sha256>    body must parse as an ActionResult (400 otherwise);
//	                                  X-Gantry-Fencing-Token is checked against leases (409)
//
// and gantry's own endpoints: GET /status (JSON), GET /metrics (Prometheus
// text), POST and DELETE [/PREFIX]/lease/<sha256> (build-once leases, JSON; over gRPC,
// gantry.lease.v1.Leases). Writes need
// credentials (401 without, 403 when refused); reads too, unless
// --allow-anonymous-read.

func (s *Server) httpHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var certs []*x509.Certificate
		if r.TLS != nil {
			certs = r.TLS.PeerCertificates
		}
		id := s.auth.identify(r.Header.Get("Authorization"), r.RemoteAddr, certs)
		httpCall(w).setClient(id.name)
		write := r.Method != http.MethodGet && r.Method != http.MethodHead
		if d := s.authorize(id, write); d != nil {
			switch d.http {
			case http.StatusUnauthorized:
				w.Header().Set("WWW-Authenticate", `Bearer realm="gantry"`)
			case http.StatusTooManyRequests:
				w.Header().Set("Retry-After", strconv.Itoa(int(max(1, s.opts.AuthRetryInterval.Round(time.Second)/time.Second))))
			}
			http.Error(w, d.msg, d.http)
			return
		}
		client := id.name
		if r.Body != nil && s.opts.IdleTimeout > 0 {
			r.Body = stallReader{r.Body, http.NewResponseController(w), s.opts.IdleTimeout}
		}
		path := strings.Trim(r.URL.Path, "/")
		switch path {
		case "status":
			s.serveStatus(w)
			return
		case "metrics":
			s.metrics.handler().ServeHTTP(w, r)
			return
		}
		rest, hash, ok := cutLast(path)
		if !ok {
			http.Error(w, "not found: paths are [/PREFIX]/cas/<sha256> and [/PREFIX]/ac/<sha256>", http.StatusNotFound)
			return
		}
		_, kind, _ := cutLast(rest)
		if err := (cache.Digest{Hash: hash}).Validate(); err != nil {
			http.Error(w, fmt.Sprintf("bad digest in %s: %v", r.URL.Path, err), http.StatusBadRequest)
			return
		}
		switch {
		case kind == "lease":
			s.serveLease(w, r, client, hash)
		case kind == "cas":
			s.serveCAS(w, r, client, hash)
		case kind == "ac":
			s.serveAC(w, r, client, hash)
		default:
			http.Error(w, "not found: paths are [/PREFIX]/cas/<sha256> and [/PREFIX]/ac/<sha256>", http.StatusNotFound)
		}
	})
}

// cutLast cuts path at its last slash: what is before it and the last
// element; ok is false when path has no slash.
func cutLast(path string) (before, last string, ok bool) {
	i := strings.LastIndexByte(path, '/')
	if i < 0 {
		return "", path, false
	}
	return path[:i], path[i+1:], true
}

// httpFail answers an error: a body over --max-blob-size is 413, integrity and
// format problems are the client's (400), anything else the server's (500).
func (s *Server) httpFail(w http.ResponseWriter, r *http.Request, err error) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.metrics.rejected.Inc()
		http.Error(w, "blob is over the server's limit of "+limitText(tooBig.Limit), http.StatusRequestEntityTooLarge)
	case errors.Is(err, cache.ErrDigestMismatch) || errors.Is(err, cache.ErrCorrupt):
		s.metrics.rejected.Inc()
		s.httpError(w, r, http.StatusBadRequest, err)
	default:
		s.httpError(w, r, http.StatusInternalServerError, err)
	}
}

// httpError answers err, an error of the store, with code: the one place such
// an answer is written. A server fault (500) is logged in full; no answer
// names the store's path (redact).
func (s *Server) httpError(w http.ResponseWriter, r *http.Request, code int, err error) {
	if code == http.StatusInternalServerError {
		s.log.Error("request failed: a fault of the server", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	http.Error(w, s.redact(err.Error()), code)
}

// httpChunk is how much of a blob a GET writes at a time: each write must go
// out within the idle timeout (stallWriter).
const httpChunk = 256 << 10

func (s *Server) serveCAS(w http.ResponseWriter, r *http.Request, client, hash string) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		f, err := s.blobs.open(hash)
		if err != nil {
			s.metrics.lookup(false)
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		st, err := f.stat()
		if err != nil {
			s.httpFail(w, r, err)
			return
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFREG { // damage (a directory in the blob's place): a miss, which an upload replaces
			s.metrics.lookup(false)
			http.NotFound(w, r)
			return
		}
		s.metrics.lookup(true)
		size := st.Size
		s.touchBlob(cache.Digest{Hash: hash}, time.Unix(st.Mtim.Unix()))
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.Method == http.MethodHead {
			return
		}
		release, err := s.admit.acquire(r.Context(), client, size)
		if err != nil {
			return
		}
		d := cache.Digest{Hash: hash, Size: size}
		n, err := sendBlob(f, d, 0, d.Size, httpChunk, newWriteSink(httpChunk, s.stallWriter(w)))
		if stalled(err) {
			s.log.Warn(fmt.Sprintf("GET %s: the client read nothing for %v: connection closed after %d of %d bytes", r.URL.Path, s.opts.IdleTimeout, n, d.Size))
		}
		release(n)
		if servedCorrupt(err) {
			if of, ferr := f.osFile(); ferr == nil {
				s.quarantine(of, d, err)
				of.Close()
			} else {
				s.log.Error(fmt.Sprintf("blob %s is damaged, and could not be quarantined (%v): run `gantry cache verify --dir %s --repair`", d, ferr, s.c.Root), "digest", d.String(), "error", err)
			}
			abortHTTP(w)
		}
	case http.MethodPut:
		size := r.ContentLength
		if s.opts.MaxBlobSize > 0 && size > s.opts.MaxBlobSize {
			s.metrics.rejected.Inc()
			http.Error(w, fmt.Sprintf("blob of %s is over the server's limit of %s", limitText(size), limitText(s.opts.MaxBlobSize)), http.StatusRequestEntityTooLarge)
			return
		}
		body := io.Reader(r.Body)
		if s.opts.MaxBlobSize > 0 {
			body = http.MaxBytesReader(w, r.Body, s.opts.MaxBlobSize)
		}
		release, err := s.admit.acquire(r.Context(), client, size)
		if err != nil {
			return
		}
		n, err := s.c.ImportBlob(cache.Digest{Hash: hash, Size: size}, body)
		release(n)
		if err != nil {
			s.httpFail(w, r, err)
			return
		}
		s.evictor.wrote(n)
		w.WriteHeader(http.StatusOK)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (s *Server) serveAC(w http.ResponseWriter, r *http.Request, client, hash string) {
	key := cache.Digest{Hash: hash}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		_, data, err := s.lookupAC(key)
		s.metrics.lookup(err == nil)
		if errors.Is(err, cache.ErrNotFound) {
			http.NotFound(w, r)
			return
		}
		if err != nil {
			s.httpFail(w, r, err)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.Method == http.MethodGet {
			w.Write(data)
		}
	case http.MethodPut:
		var token uint64
		if h := r.Header.Get(remote.FencingHeader); h != "" {
			var err error
			if token, err = strconv.ParseUint(h, 10, 64); err != nil {
				http.Error(w, "bad "+remote.FencingHeader+": "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		data, err := io.ReadAll(io.LimitReader(r.Body, maxACSize+1))
		if err != nil {
			s.httpFail(w, r, err)
			return
		}
		if len(data) > maxACSize {
			http.Error(w, "action cache entry over 4 MiB", http.StatusRequestEntityTooLarge)
			return
		}
		if status, err := s.updateAC(key, data, token); err != nil {
			s.metrics.rejected.Inc()
			s.httpError(w, r, status, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

const maxACSize = 4 << 20

// errFenced refuses an AC update whose fencing token is older than the lease's.
var errFenced = errors.New("fencing token is older than the current lease's: another client holds the lease now")

// updateAC stores an AC entry, after the fencing check; the status is the HTTP
// answer to an error.
func (s *Server) updateAC(key cache.Digest, data []byte, token uint64) (int, error) {
	if s.leases.fenced(key.Hash, token) {
		return http.StatusConflict, fmt.Errorf("action cache entry %s: %w", key.Hash, errFenced)
	}
	if err := s.c.WriteActionResult(key, data); err != nil {
		if errors.Is(err, cache.ErrCorrupt) {
			return http.StatusBadRequest, err
		}
		return http.StatusInternalServerError, err
	}
	if token != 0 {
		s.leases.release(key.Hash, token)
	}
	s.evictor.wrote(int64(len(data)))
	return 0, nil
}

// Status is GET /status.
type Status struct {
	SizeBytes  int64   `json:"size_bytes"`
	QuotaBytes int64   `json:"quota_bytes"`
	Blobs      int     `json:"blobs"`
	ACEntries  int     `json:"ac_entries"`
	UptimeSec  float64 `json:"uptime_seconds"`
}

func (s *Server) serveStatus(w http.ResponseWriter) {
	st := Status{QuotaBytes: s.opts.Quota, UptimeSec: time.Since(s.started).Seconds()}
	count := func(dir string, n *int) {
		_ = fs.WalkDir(os.DirFS(s.c.Root), dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				*n++
				if fi, err := d.Info(); err == nil {
					st.SizeBytes += fi.Size()
				}
			}
			return nil
		})
	}
	count(cache.CASDir, &st.Blobs)
	count(cache.ACDir, &st.ACEntries)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

// serveLease: POST /lease/<key>[?token=N] asks for (or renews) the lease on key;
// DELETE /lease/<key>?token=N gives it up.
func (s *Server) serveLease(w http.ResponseWriter, r *http.Request, client, hash string) {
	var token uint64
	if t := r.URL.Query().Get("token"); t != "" {
		var err error
		if token, err = strconv.ParseUint(t, 10, 64); err != nil {
			http.Error(w, "bad token: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	switch r.Method {
	case http.MethodPost:
		reply := s.askLease(hash, client, token)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(reply)
	case http.MethodDelete:
		s.leases.release(hash, token)
		w.WriteHeader(http.StatusOK)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}
