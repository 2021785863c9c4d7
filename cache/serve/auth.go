package serve

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/codes"
)

// authenticator decides who a request comes from and what it may do. Credentials:
// bearer tokens from a token file ("TOKEN [NAME [read|write]]" per line, #
// comments), basic auth checked against htpasswd files of bcrypt entries (the
// users of --htpasswd-read may only read), or a client certificate verified
// against --client-ca (the client is its subject; it may write). A client is
// only ever named by its token's name, user name or certificate subject: a
// credential never leaves this file.
//
// A password costs bcrypt on purpose, so checking one is what a stranger can
// make the server pay for: an unknown user costs one bcrypt of the same cost as
// a known one (so user names cannot be probed by timing), password checks are
// limited per client address and per user name (limiter: past the limit the
// request is refused before any bcrypt), concurrent checks of one credential
// share one bcrypt, and a password that passed is remembered for passwordTTL.
type authenticator struct {
	tokenFile, htpasswdFile, htpasswdReadFile string

	// compare is bcrypt.CompareHashAndPassword (a seam for tests that count bcrypt runs).
	compare func(hash, password []byte) error
	// checks counts password checks run (bcrypt), for /metrics.
	checks  func()
	limiter *keyedLimiter
	secret  [32]byte // keys remembered passwords: HMAC, never a plain hash of a password

	mu       sync.RWMutex
	tokens   map[[32]byte]clientCredential // sha256(token) → client
	users    map[string]htpasswdUser
	dummy    []byte // a bcrypt hash of no password, as costly as the users': unknown users are checked against it
	good     map[[32]byte]goodPassword
	inflight map[[32]byte]*passwordCheck
	reloads  int // a check that began before a reload is not remembered
}

// clientCredential is whom a token or user names, and whether it may only read.
type clientCredential struct {
	name     string
	readOnly bool
}

type htpasswdUser struct {
	hash     []byte
	readOnly bool
}

type goodPassword struct {
	clientCredential
	until time.Time
}

// passwordCheck is a bcrypt run in progress; requests with the same credential wait for it.
type passwordCheck struct {
	done chan struct{}
	cred clientCredential
	ok   bool
}

const (
	// passwordTTL is how long a password that passed is taken without bcrypt.
	passwordTTL = time.Minute
	// maxGoodPasswords bounds the passwords remembered.
	maxGoodPasswords = 4096
	// PasswordBurst is how many password checks a client address or a user name
	// may run at once before it is held to one per --auth-retry-interval.
	PasswordBurst = 5
	// maxLimiterKeys bounds the limiter's memory: a stranger can vary its address and
	// the user names it tries.
	maxLimiterKeys = 10000
)

// authResult is the outcome of identify.
type authResult int

const (
	authNone    authResult = iota // no credentials given
	authOK                        // credentials accepted
	authRefused                   // wrong credentials
	authLimited                   // too many password checks from this client or for this user: try later
)

// identity is who identify found, and what became of the credentials.
type identity struct {
	clientCredential
	result authResult
}

func newAuthenticator(tokenFile, htpasswdFile, htpasswdReadFile string, retry time.Duration) (*authenticator, error) {
	a := &authenticator{tokenFile: tokenFile, htpasswdFile: htpasswdFile, htpasswdReadFile: htpasswdReadFile,
		compare: bcrypt.CompareHashAndPassword, checks: func() {},
		limiter:  newKeyedLimiter(retry, PasswordBurst, maxLimiterKeys),
		inflight: map[[32]byte]*passwordCheck{}}
	if _, err := rand.Read(a.secret[:]); err != nil {
		return nil, fmt.Errorf("reading credentials: %w", err)
	}
	if err := a.reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// configured reports whether any password-like credential is accepted.
func (a *authenticator) configured() bool {
	return a.tokenFile != "" || a.htpasswdFile != "" || a.htpasswdReadFile != ""
}

// reload reads the token and htpasswd files again (SIGHUP). On error the
// previous credentials stay in force.
func (a *authenticator) reload() error {
	tokens := map[[32]byte]clientCredential{}
	if a.tokenFile != "" {
		n := 0
		err := readLines(a.tokenFile, func(line string, lineNo int) error {
			f := strings.Fields(line)
			n++
			c := clientCredential{name: fmt.Sprintf("token-%d", n)}
			if len(f) > 1 {
				c.name = f[1]
			}
			if len(f) > 2 {
				switch f[2] {
				case "read":
					c.readOnly = true
				case "write":
				default:
					return fmt.Errorf("%s:%d: %q is not an access: lines are TOKEN [NAME [read|write]] (a name has no spaces)", a.tokenFile, lineNo, f[2])
				}
			}
			if len(f) > 3 {
				return fmt.Errorf("%s:%d: more than TOKEN NAME ACCESS: lines are TOKEN [NAME [read|write]] (a name has no spaces)", a.tokenFile, lineNo)
			}
			tokens[sha256.Sum256([]byte(f[0]))] = c
			return nil
		})
		if err != nil {
			return err
		}
	}
	users := map[string]htpasswdUser{}
	cost := bcrypt.DefaultCost
	for _, file := range []struct {
		path     string
		readOnly bool
	}{{a.htpasswdFile, false}, {a.htpasswdReadFile, true}} {
		if file.path == "" {
			continue
		}
		err := readLines(file.path, func(line string, lineNo int) error {
			user, h, ok := strings.Cut(line, ":")
			c, err := bcrypt.Cost([]byte(h))
			if !ok || err != nil {
				return fmt.Errorf("%s:%d: not a bcrypt htpasswd entry (USER:$2y$…): create entries with `htpasswd -B`", file.path, lineNo)
			}
			if prev, dup := users[user]; dup && prev.readOnly != file.readOnly {
				return fmt.Errorf("%s:%d: user %s is also in --htpasswd %s: a user may write or only read, keep one entry", file.path, lineNo, user, a.htpasswdFile)
			}
			if len(users) == 0 || c > cost {
				cost = c
			}
			users[user] = htpasswdUser{hash: []byte(h), readOnly: file.readOnly}
			return nil
		})
		if err != nil {
			return err
		}
	}
	var dummy []byte
	if len(users) > 0 {
		var pw [16]byte
		rand.Read(pw[:])
		var err error
		if dummy, err = bcrypt.GenerateFromPassword(pw[:], cost); err != nil {
			return fmt.Errorf("reading credentials: %w", err)
		}
	}
	a.mu.Lock()
	a.tokens, a.users, a.dummy, a.good = tokens, users, dummy, map[[32]byte]goodPassword{}
	a.reloads++
	a.mu.Unlock()
	return nil
}

// readLines calls f with each non-empty, non-comment line of path.
func readLines(path string, f func(line string, lineNo int) error) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading credentials: %w", err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for no := 1; sc.Scan(); no++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := f(line, no); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading credentials from %s: %w", path, err)
	}
	return nil
}

// identify returns the client named by an Authorization header value, or by a
// verified client certificate. addr is the client's network address, which
// password checks are limited by. A header that is present but wrong never
// falls back to the certificate.
func (a *authenticator) identify(authorization, addr string, certs []*x509.Certificate) identity {
	if authorization != "" {
		return a.checkHeader(authorization, addr)
	}
	if len(certs) > 0 {
		return identity{clientCredential{name: "cert:" + certs[0].Subject.String()}, authOK}
	}
	return identity{clientCredential{name: "anonymous"}, authNone}
}

var refusedIdentity = identity{clientCredential{name: "anonymous"}, authRefused}

func (a *authenticator) checkHeader(h, addr string) identity {
	scheme, cred, _ := strings.Cut(h, " ")
	cred = strings.TrimSpace(cred)
	switch strings.ToLower(scheme) {
	case "bearer":
		sum := sha256.Sum256([]byte(cred))
		a.mu.RLock()
		defer a.mu.RUnlock()
		for k, c := range a.tokens { // constant time per entry
			if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
				return identity{c, authOK}
			}
		}
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return refusedIdentity
		}
		user, pw, ok := strings.Cut(string(raw), ":")
		if !ok {
			return refusedIdentity
		}
		return a.checkPassword(user, pw, addr)
	}
	return refusedIdentity
}

// checkPassword checks user's password: remembered, or checked by the bcrypt run in
// progress for the same credential, or by a bcrypt run of its own if the limiter lets
// this client and user run one.
func (a *authenticator) checkPassword(user, pw, addr string) identity {
	mac := hmac.New(sha256.New, a.secret[:])
	mac.Write([]byte(user + ":" + pw))
	var key [32]byte
	mac.Sum(key[:0])

	a.mu.Lock()
	if g, ok := a.good[key]; ok && time.Now().Before(g.until) {
		a.mu.Unlock()
		return identity{g.clientCredential, authOK}
	}
	if c := a.inflight[key]; c != nil {
		a.mu.Unlock()
		<-c.done
		if c.ok {
			return identity{c.cred, authOK}
		}
		return refusedIdentity
	}
	// A user name is kept by its hash: a stranger's made-up names, as long as
	// a header allows, cost the limiter no more memory than short ones.
	keys := []string{"addr " + clientHost(addr), fmt.Sprintf("user %x", sha256.Sum256([]byte(user)))}
	if !a.limiter.take(keys...) {
		a.mu.Unlock()
		return identity{clientCredential{name: "anonymous"}, authLimited}
	}
	u, known := a.users[user]
	hash := u.hash
	if !known {
		hash = a.dummy
	}
	c := &passwordCheck{done: make(chan struct{}), cred: clientCredential{name: user, readOnly: u.readOnly}}
	a.inflight[key] = c
	reloads := a.reloads
	a.mu.Unlock()

	if hash != nil {
		a.checks()
		c.ok = a.compare(hash, []byte(pw)) == nil && known
	}

	a.mu.Lock()
	delete(a.inflight, key)
	if c.ok {
		a.limiter.refund(keys...)
		if a.reloads == reloads {
			a.remember(key, c.cred)
		}
	}
	a.mu.Unlock()
	close(c.done)
	if c.ok {
		return identity{c.cred, authOK}
	}
	return refusedIdentity
}

// remember keeps a password that passed for passwordTTL, within maxGoodPasswords.
// Called with a.mu held.
func (a *authenticator) remember(key [32]byte, c clientCredential) {
	now := time.Now()
	if len(a.good) >= maxGoodPasswords {
		for k, g := range a.good {
			if !now.Before(g.until) {
				delete(a.good, k)
			}
		}
	}
	if len(a.good) >= maxGoodPasswords {
		for k := range a.good { // full of live entries: forget any one
			delete(a.good, k)
			break
		}
	}
	a.good[key] = goodPassword{c, now.Add(passwordTTL)}
}

// denial is how a request is refused, over HTTP and over gRPC.
type denial struct {
	http int
	grpc codes.Code
	msg  string
}

// authorize decides whether id may make a request (write: one that changes the
// store or takes a lease); nil lets it go ahead as id.name. Refusals are counted.
func (s *Server) authorize(id identity, write bool) *denial {
	var d *denial
	switch {
	case id.result == authOK && write && id.readOnly:
		d = &denial{http.StatusForbidden, codes.PermissionDenied, fmt.Sprintf("client %s may only read", id.name)}
	case id.result == authOK, !write && s.opts.AllowAnonymousRead:
		return nil
	case id.result == authLimited:
		s.metrics.limited.Inc()
		s.metrics.rejected.Inc()
		return &denial{http.StatusTooManyRequests, codes.ResourceExhausted,
			fmt.Sprintf("too many password checks from this address or for this user: try again in %s", s.opts.AuthRetryInterval)}
	case id.result == authRefused:
		d = &denial{http.StatusForbidden, codes.PermissionDenied, "credentials refused"}
	default:
		d = &denial{http.StatusUnauthorized, codes.Unauthenticated, "credentials required"}
	}
	s.metrics.authRefused.Inc()
	s.metrics.rejected.Inc()
	return d
}
