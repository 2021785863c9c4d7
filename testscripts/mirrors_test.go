package testscripts

import (
	"net"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdDeadPort sets VAR to the base URL of a port on 127.0.0.1 where nothing listens
// (one the kernel gave a listener that is closed again): `deadport DEAD`, then
// http://… at $DEAD gets "connection refused". `deadport VAR SCHEME` gives a
// SCHEME:// URL (grpc).
func cmdDeadPort(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: deadport VAR [SCHEME]")
	}
	scheme := "http"
	if len(args) == 2 {
		scheme = args[1]
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	addr := l.Addr().String()
	ts.Check(l.Close())
	ts.Setenv(args[0], scheme+"://"+addr)
}
