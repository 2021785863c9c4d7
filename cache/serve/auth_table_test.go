package serve

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTokenFile: each token file is read or refused with its FILE:LINE, and
// a bearer token names the client and its access as its line says.
func TestTokenFile(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		header     string // an Authorization header to identify
		wantErr    string // the refusal of the file, if it is refused
		want       identity
	}{
		{"token alone", "s3cret\n", "Bearer s3cret", "", identity{clientCredential{name: "token-1"}, authOK}},
		{"named", "# ci\n\nt1 ci\n", "Bearer t1", "", identity{clientCredential{name: "ci"}, authOK}},
		{"read-only", "t1 ci\nt2 reader read\n", "Bearer t2", "", identity{clientCredential{name: "reader", readOnly: true}, authOK}},
		{"explicit write", "t1 ci write\n", "Bearer t1", "", identity{clientCredential{name: "ci"}, authOK}},
		{"wrong token", "t1 ci\n", "Bearer t2", "", refusedIdentity},
		{"unknown scheme", "t1 ci\n", "Token t1", "", refusedIdentity},
		{"no header", "t1 ci\n", "", "", identity{clientCredential{name: "anonymous"}, authNone}},
		{"bad access", "t1 ci\nt2 x admin\n", "", "tokens:2: \"admin\" is not an access", identity{}},
		{"too many fields", "t1 ci read more\n", "", "tokens:1: more than TOKEN NAME ACCESS", identity{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			a, err := newAuthenticator(p, "", "", time.Second)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("reading %q: %v, want an error with %q", tc.file, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.identify(tc.header, "192.0.2.1:1234", nil); got != tc.want {
				t.Errorf("identify(%q) = %+v, want %+v", tc.header, got, tc.want)
			}
		})
	}
}

// TestAuthorize: what a client may do, by how identify found it, whether the
// request writes, and whether anonymous reads are allowed.
func TestAuthorize(t *testing.T) {
	ok := identity{clientCredential{name: "ci"}, authOK}
	reader := identity{clientCredential{name: "reader", readOnly: true}, authOK}
	anonymous := identity{clientCredential{name: "anonymous"}, authNone}
	for _, tc := range []struct {
		name      string
		id        identity
		write     bool
		anonRead  bool
		want      int // 0: allowed; else the HTTP status of the refusal
		refusedBy string
	}{
		{"writer writes", ok, true, false, 0, ""},
		{"writer reads", ok, false, false, 0, ""},
		{"reader reads", reader, false, false, 0, ""},
		{"reader writes", reader, true, false, http.StatusForbidden, "may only read"},
		{"anonymous reads, allowed", anonymous, false, true, 0, ""},
		{"anonymous reads", anonymous, false, false, http.StatusUnauthorized, "credentials required"},
		{"anonymous writes, reads allowed", anonymous, true, true, http.StatusUnauthorized, "credentials required"},
		{"wrong credentials", refusedIdentity, false, false, http.StatusForbidden, "credentials refused"},
		{"wrong credentials, anonymous reads allowed", refusedIdentity, false, true, 0, ""},
		{"limited", identity{clientCredential{name: "anonymous"}, authLimited}, false, false, http.StatusTooManyRequests, "too many password checks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{opts: Options{AllowAnonymousRead: tc.anonRead, AuthRetryInterval: time.Second}, metrics: newMetrics()}
			d := s.authorize(tc.id, tc.write)
			switch {
			case tc.want == 0 && d != nil:
				t.Fatalf("refused: %+v", d)
			case tc.want != 0 && d == nil:
				t.Fatalf("allowed, want %d", tc.want)
			case d != nil && (d.http != tc.want || !strings.Contains(d.msg, tc.refusedBy)):
				t.Fatalf("refusal %+v, want %d %q", d, tc.want, tc.refusedBy)
			}
		})
	}
}
