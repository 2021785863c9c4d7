package remote

import (
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// DialGRPC returns a gRPC connection to the grpc:// or grpcs:// server of spec, with
// the same security and credentials as a remote's (server-ca, client-cert,
// client-key, token-file, user:password), for services other than the CAS (such as
// the Remote Workers API's Bots). It does not connect yet: the first call does.
func DialGRPC(spec Spec) (*grpc.ClientConn, error) {
	name := spec.Display()
	u, err := url.Parse(spec.URL)
	if err != nil {
		return nil, fmt.Errorf("remote %s: invalid url: %w", name, err)
	}
	if u.Scheme != "grpc" && u.Scheme != "grpcs" {
		return nil, fmt.Errorf("remote %s: not a grpc:// or grpcs:// url", name)
	}
	if u.Port() == "" {
		return nil, fmt.Errorf("remote %s: no port: write %s://HOST:PORT", name, u.Scheme)
	}
	if strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return nil, fmt.Errorf("remote %s: a %s:// url is HOST:PORT only; set the REAPI instance name apart", name, u.Scheme)
	}
	opts, err := (&grpcStore{name: name}).dialOptions(spec, u)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(u.Host, opts...)
	if err != nil {
		return nil, fmt.Errorf("remote %s: %w", name, err)
	}
	return conn, nil
}

// dialOptions are the options of a connection to the remote of spec: its security,
// its credentials, gantry's user agent and keepalive.
func (s *grpcStore) dialOptions(spec Spec, u *url.URL) ([]grpc.DialOption, error) {
	creds, err := s.transport(spec, u)
	if err != nil {
		return nil, err
	}
	auth, err := grpcAuthorization(spec, u)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds), grpc.WithUserAgent("gantry"),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepalivePing, Timeout: keepaliveAck}),
	}
	if auth != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth))
	}
	return opts, nil
}
