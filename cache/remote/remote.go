// Package remote is gantry's remote artifact caches (DESIGN.md §7), the
// clients of package cache's store. A remote is reached through a Store, one
// implementation per protocol:
//   - http(s)://  the HTTP cache protocol of Bazel and bazel-remote (http.go)
//   - grpc(s)://  REAPI v2, and BuildStream 1.x's ReferenceStorage where the server
//     has no ActionCache (grpc.go)
//
// The artifact-level logic (which blobs an artifact needs, verification, the
// order of writes) is protocol-independent (PullArtifact, PushArtifact,
// RepairArtifact in artifact.go), built on Store. Every name on the wire that
// gantry's clients and `gantry cache serve` share is here (wire.go).
package remote

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gantry-build/gantry/cache"
	"google.golang.org/grpc"
)

// Spec is one configured remote, from [[remote]] in the user config or
// project.toml, or from --remote.
type Spec struct {
	URL        string `toml:"url" json:"url"`                 // may carry basic-auth userinfo: never print it, use Display
	Push       bool   `toml:"push" json:"push"`               // push-enabled
	Instance   string `toml:"instance" json:"instance"`       // REAPI instance name
	ServerCA   string `toml:"server-ca" json:"server-ca"`     // PEM file of the CA that signs the server's certificate
	ClientCert string `toml:"client-cert" json:"client-cert"` // PEM file: client certificate for mutual TLS
	ClientKey  string `toml:"client-key" json:"client-key"`   // PEM file: its key
	TokenFile  string `toml:"token-file" json:"token-file"`   // file holding a bearer token (sent as Authorization: Bearer …)
	// TokenEnv names the environment variable that holds the bearer token
	// (GANTRY_REMOTE_TOKEN for a --remote): the token itself is in no spec, payload
	// or file, and a job reads it from the environment it inherited. Not a file
	// setting.
	TokenEnv string `toml:"-" json:"token-env,omitempty"`

	// Sources: the remote keeps sources too, through the Remote Asset API (asset.go).
	Sources bool `toml:"sources" json:"sources,omitempty"`

	// IdleTimeout is how long an exchange may receive nothing (response headers,
	// body bytes, a stream message) before it fails as unavailable (a stall); 0 means
	// defaultIdle. Not a file setting: gantry sets it from GANTRY_NET_IDLE_TIMEOUT.
	IdleTimeout time.Duration `toml:"-" json:"idle-timeout,omitempty"`

	// DialOptions are added to a grpc(s):// remote's connection (interceptors:
	// remote execution attaches its RequestMetadata to every call). Not a
	// file setting.
	DialOptions []grpc.DialOption `toml:"-" json:"-"`
}

// defaultIdle is the idle timeout of exchanges with remotes.
const defaultIdle = time.Minute

func (r Spec) idleTimeout() time.Duration {
	if r.IdleTimeout > 0 {
		return r.IdleTimeout
	}
	return defaultIdle
}

// Display returns the URL without userinfo, safe for messages, logs and events.
func (r Spec) Display() string { return RedactURL(r.URL) }

// RedactURL removes the userinfo (basic-auth credentials) from a URL.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if err != nil {
			return "(unparsable remote URL)"
		}
		return raw
	}
	u.User = nil
	return u.String()
}

// Key is the action-cache key under which the artifact of a full cache
// key is stored on a remote: sha256("gantry-artifact-v1:" + key), as a digest
// whose size is the length of that string (REAPI requires a size; HTTP caches
// use the hash only).
func Key(key string) cache.Digest {
	s := "gantry-artifact-v1:" + key
	sum := sha256.Sum256([]byte(s))
	return cache.Digest{Hash: hex.EncodeToString(sum[:]), Size: int64(len(s))}
}

// Entry is what a remote holds for one artifact besides blobs: the
// digests that reach every blob of it.
type Entry struct {
	Files  cache.Digest // root Directory of the artifact's files tree
	Tree   cache.Digest // REAPI Tree blob of the files tree (action caches need it; zero where unused)
	Record cache.Digest // the artifact record (JSON, as stored locally)
	Log    cache.Digest // the build log; zero when there is none
}

// Store is the protocol side of one remote: a CAS and an artifact index.
// Implementations are safe for concurrent use. Every method's error for a
// failed exchange is a *Error.
type Store interface {
	// Name is the remote's URL without userinfo, for messages.
	Name() string
	// FindMissing returns those of ds that the remote does not hold.
	FindMissing(ctx context.Context, ds []cache.Digest) ([]cache.Digest, error)
	// ReadBlob writes the content of blob d to w. A blob the remote lacks gives an
	// error wrapping ErrNotFound. The caller verifies what it receives.
	ReadBlob(ctx context.Context, d cache.Digest, w io.Writer) error
	// WriteBlob uploads blob d; open returns its content and may be called again to
	// retry.
	WriteBlob(ctx context.Context, d cache.Digest, open func() (io.ReadCloser, error)) error
	// GetEntry reads the artifact entry of a full cache key. A miss gives an error
	// wrapping ErrNotFound.
	GetEntry(ctx context.Context, key string) (*Entry, error)
	// UpdateEntry writes the artifact entry of a full cache key. Every blob the
	// entry reaches must already be on the remote.
	UpdateEntry(ctx context.Context, key string, e *Entry) error
	// Close releases connections.
	Close() error
}

// ErrorKind classifies a failed exchange with a remote.
type ErrorKind int

const (
	// Unavailable: the remote could not be reached or failed on its side
	// (connection refused or reset, timeout, stall, HTTP 5xx, gRPC UNAVAILABLE…).
	// Temporary: retried with backoff, then the remote is marked down for the session.
	Unavailable ErrorKind = iota
	// Auth: credentials were refused or are missing (HTTP 401/403,
	// UNAUTHENTICATED/PERMISSION_DENIED).
	Auth
	// Refused: the remote understood and refused the request (another 4xx,
	// INVALID_ARGUMENT…). Not retried.
	Refused
	// Corrupt: the remote sent bytes that do not match their digest, or an
	// entry that cannot be decoded. Treated as a miss, with a warning.
	Corrupt
)

func (k ErrorKind) String() string {
	switch k {
	case Unavailable:
		return "unavailable"
	case Auth:
		return "credentials refused"
	case Refused:
		return "refused"
	case Corrupt:
		return "corrupt"
	}
	return "unknown"
}

// Error is a failed exchange with a remote. Its message names the remote
// (without userinfo), what was being done and, for Auth, which setting to
// check.
type Error struct {
	Remote string // URL without userinfo
	Op     string // what was being done: "reading blob 1a2b…/12", "updating the entry of app.toml"
	Kind   ErrorKind
	Err    error
	// Blob is, for Corrupt, the blob whose bytes did not match its digest;
	// zero when what was wrong is an entry (see WrongBytes).
	Blob cache.Digest
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("remote %s: %s: %v", e.Remote, e.Op, e.Err)
	if e.Kind == Auth {
		msg += " (credentials refused: check the remote's token-file, client-cert/client-key or the user:password in its url)"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Temporary reports whether retrying may help.
func (e *Error) Temporary() bool { return e.Kind == Unavailable }

// WrongBytes reports the remote and blob of err when it says a remote served
// bytes that do not match their digest.
func WrongBytes(err error) (remote string, blob cache.Digest, ok bool) {
	var re *Error
	if errors.As(err, &re) && re.Kind == Corrupt && !re.Blob.IsZero() {
		return re.Remote, re.Blob, true
	}
	return "", cache.Digest{}, false
}

// IsKind reports whether err is a *Error of kind k.
func IsKind(err error, k ErrorKind) bool {
	var re *Error
	return errors.As(err, &re) && re.Kind == k
}

// Open connects to the remote of spec, choosing the protocol by the URL's
// scheme. It does not contact the remote yet (gRPC's Capabilities are asked on
// first use).
func Open(spec Spec) (Store, error) {
	u, err := url.Parse(spec.URL)
	if err != nil {
		return nil, fmt.Errorf("remote %s: invalid url: %w", RedactURL(spec.URL), err)
	}
	switch u.Scheme {
	case "http", "https":
		return newHTTPStore(spec, u)
	case "grpc", "grpcs":
		return newGRPCStore(spec, u)
	}
	return nil, fmt.Errorf("remote %s: unsupported scheme %q: use http://, https://, grpc:// or grpcs://", spec.Display(), u.Scheme)
}

// tlsConfig returns the TLS configuration of spec: its server CA and client
// certificate, if set (nil when neither is).
func tlsConfig(spec Spec) (*tls.Config, error) {
	if spec.ServerCA == "" && spec.ClientCert == "" && spec.ClientKey == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if spec.ServerCA != "" {
		pem, err := os.ReadFile(spec.ServerCA)
		if err != nil {
			return nil, fmt.Errorf("remote %s: reading server-ca: %w", spec.Display(), err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("remote %s: server-ca %s holds no PEM certificate", spec.Display(), spec.ServerCA)
		}
		cfg.RootCAs = pool
	}
	if (spec.ClientCert == "") != (spec.ClientKey == "") {
		return nil, fmt.Errorf("remote %s: client-cert and client-key must be given together", spec.Display())
	}
	if spec.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(spec.ClientCert, spec.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("remote %s: loading client-cert %s and client-key %s: %w", spec.Display(), spec.ClientCert, spec.ClientKey, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// readToken reads the bearer token of spec's token variable or token-file ("" when
// neither is set).
func readToken(spec Spec) (string, error) {
	if spec.TokenEnv != "" {
		tok := strings.TrimSpace(os.Getenv(spec.TokenEnv))
		if tok == "" || strings.ContainsAny(tok, "\r\n") {
			return "", fmt.Errorf("remote %s: %s must hold one token on one line", spec.Display(), spec.TokenEnv)
		}
		return tok, nil
	}
	if spec.TokenFile == "" {
		return "", nil
	}
	data, err := os.ReadFile(spec.TokenFile)
	if err != nil {
		return "", fmt.Errorf("remote %s: reading token-file: %w", spec.Display(), err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("remote %s: token-file %s must hold one token on one line", spec.Display(), spec.TokenFile)
	}
	return tok, nil
}
