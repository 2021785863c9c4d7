#!/usr/bin/env bash
# Throughput of the grpc(s):// remote store on loopback (see bench/README.md):
# a 64 MiB blob over ByteStream (MB/s) and 2,000 small blobs in batches
# (blobs/s, 16 concurrent callers), against bst-artifact-server (Debian's
# buildstream package) and the tests' in-process Go REAPI server.
#
#   bench/grpc.sh [BENCHTIME]    BENCHTIME as for go test -benchtime (default 5x)
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench 'GRPC' -benchtime "${1:-5x}" ./cache
