package testreapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// serverConfig is the server and authorization sections of bgd's configuration:
// the channel (TLS with the PKI's server certificate, client certificates checked
// against its CA), and JWT authorization (HS256, the secret in a file under dir)
// when the options ask; it writes b.TokenFile then.
func (b *BuildGrid) serverConfig(t testing.TB, dir string) string {
	t.Helper()
	channel := fmt.Sprintf("server:\n  - !channel\n    address: %q\n    insecure-mode: true\n", b.Addr)
	if p := b.opts.TLS; p != nil {
		channel = fmt.Sprintf("server:\n  - !channel\n    address: %q\n    insecure-mode: false\n    credentials:\n"+
			"      tls-server-key: %q\n      tls-server-cert: %q\n      tls-client-certs: %q\n", b.Addr, p.ServerKey, p.ServerCert, p.CA)
	}
	if b.opts.JWTSecret == "" {
		return channel + "authorization:\n  method: none"
	}
	secret := filepath.Join(dir, "jwt.secret")
	b.TokenFile = filepath.Join(dir, "token")
	for path, data := range map[string]string{secret: b.opts.JWTSecret, b.TokenFile: hs256JWT(b.opts.JWTSecret, time.Now().Add(time.Hour))} {
		if err := os.WriteFile(path, []byte(data+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return channel + fmt.Sprintf("authorization:\n  method: jwt\n  secret: %q\n  algorithm: hs256", secret)
}

// hs256JWT is a JWT for subject gantry-test signed with secret, expiring at exp.
func hs256JWT(secret string, exp time.Time) string {
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]string{"alg": "HS256", "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{"sub": "gantry-test", "exp": exp.Unix()})
	signed := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(signed))
	return signed + "." + enc.EncodeToString(mac.Sum(nil))
}

// credentials are the dial options a client of the server needs: TLS with the
// PKI's CA and client certificate, the token with every call.
func (b *BuildGrid) credentials(t testing.TB) []grpc.DialOption {
	t.Helper()
	var opts []grpc.DialOption
	if b.opts.JWTSecret != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(hs256JWT(b.opts.JWTSecret, time.Now().Add(time.Hour)))))
	}
	p := b.opts.TLS
	if p == nil {
		return append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	ca, err := os.ReadFile(p.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return append(opts, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}})))
}

// bearer sends a token with every call.
type bearer string

func (tok bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(tok)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }
