// Package bstpb holds the Go code of BuildStream 1.x's ReferenceStorage
// service (buildstream.v2), generated from buildstream.proto.
package bstpb

//go:generate ./generate.sh
