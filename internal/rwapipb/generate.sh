#!/usr/bin/env bash
# Regenerates bots.pb.go, bots_grpc.pb.go and worker.pb.go from bots.proto and
# worker.proto, compiled under their googleapis path
# (google/devtools/remoteworkers/v1test2/), which BuildGrid's protos import them by.
# Needs protoc (Debian's protobuf-compiler); installs the Go plugins (pinned) into a
# temporary GOBIN.
#   go generate ./internal/rwapipb
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOBIN=$tmp go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$tmp go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
go run ../../cache/internal/bstpb/descset.go "$tmp/deps.pb"
src=$tmp/src/google/devtools/remoteworkers/v1test2
mkdir -p "$src" "$tmp/out"
cp bots.proto worker.proto "$src/"
PATH=$tmp:$PATH protoc -I "$tmp/src" --descriptor_set_in="$tmp/deps.pb" \
  --go_out="$tmp/out" --go_opt=paths=source_relative \
  --go-grpc_out="$tmp/out" --go-grpc_opt=paths=source_relative \
  google/devtools/remoteworkers/v1test2/bots.proto google/devtools/remoteworkers/v1test2/worker.proto
cp "$tmp"/out/google/devtools/remoteworkers/v1test2/*.go .
