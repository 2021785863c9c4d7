package cache

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// serverAuth decides who a request comes from. Credentials: bearer tokens from
// a token file ("TOKEN [NAME]" per line, # comments), basic auth checked
// against an htpasswd file of bcrypt entries, or a client certificate verified
// against --client-ca (the client is its subject). A client is only ever named
// by its token's name, user name or certificate subject: a credential never
// leaves this file.
type serverAuth struct {
	tokenFile, htpasswdFile string

	mu     sync.RWMutex
	tokens map[[32]byte]string // sha256(token) → client name
	users  map[string][]byte   // user → bcrypt hash
	good   map[[32]byte]string // sha256("user:password") of basic auth already checked → user
}

func newServerAuth(tokenFile, htpasswdFile string) (*serverAuth, error) {
	a := &serverAuth{tokenFile: tokenFile, htpasswdFile: htpasswdFile}
	if err := a.reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// configured reports whether any password-like credential is accepted.
func (a *serverAuth) configured() bool { return a.tokenFile != "" || a.htpasswdFile != "" }

// reload reads the token and htpasswd files again (SIGHUP). On error the
// previous credentials stay in force.
func (a *serverAuth) reload() error {
	tokens := map[[32]byte]string{}
	if a.tokenFile != "" {
		n := 0
		err := readLines(a.tokenFile, func(line string, lineNo int) error {
			tok, name, _ := strings.Cut(line, " ")
			name = strings.TrimSpace(name)
			n++
			if name == "" {
				name = fmt.Sprintf("token-%d", n)
			}
			tokens[sha256.Sum256([]byte(tok))] = name
			return nil
		})
		if err != nil {
			return err
		}
	}
	users := map[string][]byte{}
	if a.htpasswdFile != "" {
		err := readLines(a.htpasswdFile, func(line string, lineNo int) error {
			user, h, ok := strings.Cut(line, ":")
			if !ok || !strings.HasPrefix(h, "$2") {
				return fmt.Errorf("%s:%d: not a bcrypt htpasswd entry (USER:$2y$…): create entries with `htpasswd -B`", a.htpasswdFile, lineNo)
			}
			users[user] = []byte(h)
			return nil
		})
		if err != nil {
			return err
		}
	}
	a.mu.Lock()
	a.tokens, a.users, a.good = tokens, users, map[[32]byte]string{}
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
// verified client certificate, and whether it authenticated. A header that is
// present but wrong never falls back to the certificate.
func (a *serverAuth) identify(authorization string, certs []*x509.Certificate) (string, bool) {
	if authorization != "" {
		return a.checkHeader(authorization)
	}
	if len(certs) > 0 {
		return "cert:" + certs[0].Subject.String(), true
	}
	return "anonymous", false
}

func (a *serverAuth) checkHeader(h string) (string, bool) {
	scheme, cred, _ := strings.Cut(h, " ")
	cred = strings.TrimSpace(cred)
	a.mu.RLock()
	defer a.mu.RUnlock()
	switch strings.ToLower(scheme) {
	case "bearer":
		sum := sha256.Sum256([]byte(cred))
		for k, name := range a.tokens { // constant time per entry
			if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
				return name, true
			}
		}
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return "anonymous", false
		}
		user, pw, ok := strings.Cut(string(raw), ":")
		if !ok {
			return "anonymous", false
		}
		sum := sha256.Sum256(raw)
		if name, ok := a.good[sum]; ok {
			return name, true
		}
		h, ok := a.users[user]
		if !ok || bcrypt.CompareHashAndPassword(h, []byte(pw)) != nil {
			return "anonymous", false
		}
		a.mu.RUnlock()
		a.mu.Lock()
		a.good[sum] = user // bcrypt is slow on purpose: check each password once
		a.mu.Unlock()
		a.mu.RLock()
		return user, true
	}
	return "anonymous", false
}
