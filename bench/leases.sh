#!/usr/bin/env bash
# Build-once leases (see bench/README.md): three `gantry build` sessions of the same
# N-element synthetic project (default 60, each element sleeping up to SLEEP_MS),
# started at once with empty local caches:
#   - sharing one `gantry cache serve` as push remote (leases): build jobs across the
#     three, wall time until all three are done;
#   - with no remote (what three CI runners do without a shared cache, or with one
#     that offers no leases while all three miss): the same figures.
#
#   bench/leases.sh [N]
#
# Environment: JOBS (default 2), SLEEP_MS (200), KEEP=1.
set -euo pipefail

N=${1:-60}
JOBS=${JOBS:-2}
SLEEP_MS=${SLEEP_MS:-200}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-leases-bench.XXXXXX")
SERVE_PID=
cleanup() {
	[[ -n $SERVE_PID ]] && kill "$SERVE_PID" 2>/dev/null || true
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
log() { echo "== $*" >&2; }

(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry && go build -o "$TMP/gen" ./bench/gen)
"$TMP/gen" -out "$TMP/project" -n "$N" -sleep-ms "$SLEEP_MS" >/dev/null

echo "bench-token bench" >"$TMP/tokens"
echo "bench-token" >"$TMP/token"
"$TMP/gantry" cache serve --dir "$TMP/store" --http 127.0.0.1:0 --token-file "$TMP/tokens" >"$TMP/serve.out" 2>"$TMP/serve.err" &
SERVE_PID=$!
for _ in $(seq 100); do grep -q '^http ' "$TMP/serve.out" && break; sleep 0.1; done
addr=$(awk '$1 == "http" {print $2}' "$TMP/serve.out")
[[ -n $addr ]] || { cat "$TMP/serve.err" >&2; exit 1; }

# three sessions at once; $1 names them, $2 is extra project.toml text (the remote) or ""
sessions() {
	local name=$1 remote=$2
	for i in 1 2 3; do
		rm -rf "$TMP/$name$i"
		cp -r "$TMP/project" "$TMP/$name$i"
		printf '%s' "$remote" >>"$TMP/$name$i/project.toml"
	done
	local start end
	start=$(date +%s.%N)
	local pids=()
	for i in 1 2 3; do
		"$TMP/gantry" -C "$TMP/$name$i" --cache-dir "$TMP/$name-cache$i" build --ui json --sandbox host --builders "$JOBS" 2>"$TMP/$name$i.json" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || { echo "a session failed: see $TMP/$name*.json (KEEP=1)" >&2; exit 1; }; done
	end=$(date +%s.%N)
	local builds waits
	builds=$(cat "$TMP/$name"[123].json | grep -c '"event":"job-start","action":"build"' || true)
	waits=$(cat "$TMP/$name"[123].json | grep -c '"result":"waiting"' || true)
	printf '%-10s %d elements, 3 sessions: %3d build jobs, %3d lease waits, %.1f s wall\n' "$name" "$N" "$builds" "$waits" "$(echo "$end - $start" | bc)"
}

log "three sessions, no remote"
sessions alone ""
log "three sessions, one gantry cache serve (leases)"
sessions leases "$(printf '\n[[remote]]\nurl = "http://%s"\npush = true\ntoken-file = "%s"\n' "$addr" "$TMP/token")"
