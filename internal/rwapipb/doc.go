// Package rwapipb holds the Go code of the Remote Workers API
// (google.devtools.remoteworkers.v1test2: the Bots service, BotSession, Lease,
// Worker), generated from bots.proto and worker.proto: neither the remote-apis
// module nor genproto carries it.
package rwapipb

//go:generate ./generate.sh
