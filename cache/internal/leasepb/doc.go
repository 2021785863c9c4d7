// Package leasepb holds the Go code of gantry's build-once lease service
// (gantry.lease.v1), generated from lease.proto.
package leasepb

//go:generate ./generate.sh
