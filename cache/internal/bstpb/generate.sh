#!/usr/bin/env bash
# Regenerates buildstream.pb.go and buildstream_grpc.pb.go from buildstream.proto.
# Needs protoc; installs the Go plugins (pinned) into a temporary GOBIN.
#   go generate ./cache/internal/bstpb
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOBIN=$tmp go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$tmp go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
go run descset.go "$tmp/deps.pb"
PATH=$tmp:$PATH protoc -I . --descriptor_set_in="$tmp/deps.pb" \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  buildstream.proto
