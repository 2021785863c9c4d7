#!/usr/bin/env bash
# Regenerates lease.pb.go and lease_grpc.pb.go from lease.proto.
# Needs protoc (Debian's protobuf-compiler); installs the Go plugins (pinned) into a
# temporary GOBIN.
#   go generate ./cache/internal/leasepb
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOBIN=$tmp go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$tmp go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
PATH=$tmp:$PATH protoc -I . \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  lease.proto
