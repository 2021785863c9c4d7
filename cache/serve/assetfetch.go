package serve

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	"github.com/gantry-build/gantry/cache"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Fetching http(s) URIs from origin (--asset-fetch): a FetchBlob that no
// record answers downloads the first URI that works into the CAS, checks the
// checksum.sri qualifier, and records the blob for every URI of the request,
// so that the next Fetch never reaches the origin.

// The qualifiers a fetch from origin understands; any other is refused
// (INVALID_ARGUMENT), as the API asks, since the server could not honour it.
const (
	qualifierSRI         = "checksum.sri"
	qualifierCanonicalID = "bazel.canonical_id" // only part of the key
	qualifierAuthHeaders = "bazel.auth_headers" // JSON {URI: {HEADER: VALUE}}, sent to that URI
)

// sriHash is one hash of a checksum.sri qualifier.
type sriHash struct {
	algo string // sha256, sha384, sha512
	sum  []byte
}

func (h sriHash) String() string { return h.algo + "-" + base64.StdEncoding.EncodeToString(h.sum) }

var sriAlgos = map[string]func() hash.Hash{"sha256": sha256.New, "sha384": sha512.New384, "sha512": sha512.New}

// parseSRI parses a Subresource Integrity value: whitespace-separated
// ALGO-BASE64[?OPTIONS]. Hashes of other algorithms are ignored (SRI's rule);
// a value with none of sha256, sha384 or sha512 is an error.
func parseSRI(v string) ([]sriHash, error) {
	var out []sriHash
	for _, f := range strings.Fields(v) {
		f, _, _ = strings.Cut(f, "?")
		algo, b64, ok := strings.Cut(f, "-")
		newHash := sriAlgos[algo]
		if !ok || newHash == nil {
			continue
		}
		sum, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sum) != newHash().Size() {
			return nil, fmt.Errorf("%s %q: %q is not a base64 %s hash", qualifierSRI, v, b64, algo)
		}
		out = append(out, sriHash{algo, sum})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s %q: no sha256, sha384 or sha512 hash in it", qualifierSRI, v)
	}
	return out, nil
}

// originRequest is what a fetch from origin needs of a FetchBlobRequest.
type originRequest struct {
	sri     []sriHash
	headers []http.Header // per URI
}

// parseOriginQualifiers refuses the qualifiers a fetch from origin cannot
// honour and gathers the checksums and the headers for each URI.
func parseOriginQualifiers(uris []string, qs []*rapb.Qualifier) (*originRequest, error) {
	o := &originRequest{headers: make([]http.Header, len(uris))}
	for i := range o.headers {
		o.headers[i] = http.Header{}
	}
	bad := func(format string, a ...any) error {
		return status.Errorf(codes.InvalidArgument, format, a...)
	}
	for _, q := range qs {
		switch name := q.Name; {
		case name == qualifierSRI:
			sri, err := parseSRI(q.Value)
			if err != nil {
				return nil, bad("%v", err)
			}
			o.sri = sri
		case name == qualifierCanonicalID:
		case name == qualifierAuthHeaders:
			var byURI map[string]map[string]string
			if err := json.Unmarshal([]byte(q.Value), &byURI); err != nil {
				return nil, bad("qualifier %s: not a JSON object of URIs to headers: %v", name, err)
			}
			for i, u := range uris {
				for k, v := range byURI[u] {
					o.headers[i].Set(k, v)
				}
			}
		case strings.HasPrefix(name, "http_header:"):
			for _, h := range o.headers {
				if h.Get(name[len("http_header:"):]) == "" {
					h.Set(name[len("http_header:"):], q.Value)
				}
			}
		case strings.HasPrefix(name, "http_header_url:"):
			idx, header, ok := strings.Cut(name[len("http_header_url:"):], ":")
			i, err := strconv.Atoi(idx)
			if !ok || err != nil || i < 0 || i >= len(uris) {
				return nil, bad("qualifier %s: want http_header_url:INDEX:HEADER with INDEX one of the request's URIs", name)
			}
			o.headers[i].Set(header, q.Value) // over http_header:, which is set only where unset
		default:
			return nil, bad("qualifier %q is not supported when fetching from origin (supported: %s, %s, %s, http_header:NAME, http_header_url:INDEX:NAME)",
				name, qualifierSRI, qualifierCanonicalID, qualifierAuthHeaders)
		}
	}
	return o, nil
}

// originError is a fetch from origin that failed for uri.
type originError struct {
	uri string
	st  *status.Status
}

func (e *originError) Error() string              { return e.st.Message() }
func (e *originError) GRPCStatus() *status.Status { return e.st }

// fetchOrigin downloads the first http(s) URI of req that yields content
// matching its checksum.sri qualifier, stores it, and records it under every
// URI of req. It needs a client that may write; a request without an
// http(s) URI is NOT_FOUND for any client, whatever its qualifiers.
func (s *Server) fetchOrigin(ctx context.Context, req *rapb.FetchBlobRequest, qs []qualifier) (*assetRecord, error) {
	var fetchable []int // the http(s) URIs: others are not the server's to fetch
	for i, uri := range req.Uris {
		if u, err := url.Parse(uri); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
			fetchable = append(fetchable, i)
		}
	}
	if len(fetchable) == 0 {
		return nil, &originError{req.Uris[0], notFound(assetBlob, req.Uris)}
	}
	if _, err := s.grpcAuthorize(ctx, pushBlobMethod); err != nil {
		st, _ := status.FromError(err)
		return nil, status.Errorf(st.Code(), "fetching from origin (--asset-fetch) needs a client that may write: %s", st.Message())
	}
	o, err := parseOriginQualifiers(req.Uris, req.Qualifiers)
	if err != nil {
		return nil, err
	}
	if t := req.Timeout.AsDuration(); req.Timeout != nil && t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	started := time.Now()
	var last error
	for _, i := range fetchable {
		uri := req.Uris[i]
		d, err := s.download(ctx, uri, o.headers[i], o.sri)
		if err != nil {
			var oe *originError
			if !errors.As(err, &oe) {
				return nil, err // the store's fault
			}
			s.log.Warn(fmt.Sprintf("fetching %s from its origin: %v", uri, err), "uri", uri, "error", err)
			last = err
			continue
		}
		r := assetRecord{Kind: assetBlob, Qualifiers: qs, Digest: d, Stored: started}
		if err := s.storeAsset(req.Uris, r); err != nil {
			return nil, grpcError(err)
		}
		r.URI = uri
		return &r, nil
	}
	return nil, last
}

// assetHTTP is the client of fetches from origin: the default transport (proxy
// from the environment), redirects followed.
var assetHTTP = &http.Client{}

// download fetches uri into the CAS, checking its content against sri (if
// any): a mismatch stores nothing.
func (s *Server) download(ctx context.Context, uri string, header http.Header, sri []sriHash) (cache.Digest, error) {
	fail := func(code codes.Code, format string, a ...any) (cache.Digest, error) {
		return cache.Digest{}, &originError{uri, status.Newf(code, "%s: "+format, append([]any{uri}, a...)...)}
	}
	release, err := s.admit.acquire(ctx, grpcClient(ctx), -1)
	if err != nil {
		return fail(status.FromContextError(err).Code(), "%v", err)
	}
	var n int64
	defer func() { release(n) }()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return fail(codes.InvalidArgument, "%v", err)
	}
	hreq.Header = header.Clone()
	hreq.Header.Set("User-Agent", "gantry cache serve")
	resp, err := assetHTTP.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return fail(status.FromContextError(ctx.Err()).Code(), "%v", err)
		}
		return fail(codes.Unavailable, "%v", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return fail(codes.NotFound, "the origin answered %s", resp.Status)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fail(codes.PermissionDenied, "the origin answered %s", resp.Status)
	default:
		return fail(codes.Unavailable, "the origin answered %s", resp.Status)
	}
	limit := s.opts.MaxBlobSize
	if limit > 0 && resp.ContentLength > limit {
		return fail(codes.ResourceExhausted, "%s is over the server's limit of %s", limitText(resp.ContentLength), limitText(limit))
	}
	tmp := s.c.TempName("asset-fetch")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return cache.Digest{}, err
	}
	defer os.Remove(tmp)
	defer f.Close()
	h256 := sha256.New()
	sums := map[string]hash.Hash{"sha256": h256}
	ws := []io.Writer{f, h256}
	for _, h := range sri {
		if sums[h.algo] == nil {
			sums[h.algo] = sriAlgos[h.algo]()
			ws = append(ws, sums[h.algo])
		}
	}
	body := io.Reader(resp.Body)
	if limit > 0 {
		body = io.LimitReader(body, limit+1)
	}
	n, err = io.Copy(io.MultiWriter(ws...), body)
	if err != nil {
		if ctx.Err() != nil {
			return fail(status.FromContextError(ctx.Err()).Code(), "%v", err)
		}
		return fail(codes.Unavailable, "reading the body: %v", err)
	}
	if limit > 0 && n > limit {
		return fail(codes.ResourceExhausted, "over the server's limit of %s", limitText(limit))
	}
	if len(sri) > 0 {
		matched := false
		for _, h := range sri {
			if string(sums[h.algo].Sum(nil)) == string(h.sum) {
				matched = true
				break
			}
		}
		if !matched {
			got := sriHash{sri[0].algo, sums[sri[0].algo].Sum(nil)}
			return fail(codes.Aborted, "checksum mismatch: %s wants %s, the content is %s: nothing stored", qualifierSRI, sri[0], got)
		}
	}
	d := cache.Digest{Hash: hex.EncodeToString(h256.Sum(nil)), Size: n}
	if s.c.HasBlob(d) {
		return d, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return cache.Digest{}, err
	}
	if _, err := s.c.ImportBlob(d, f); err != nil {
		return cache.Digest{}, err
	}
	s.evictor.wrote(n)
	return d, nil
}
