#!/usr/bin/env bash
# Build-once leases sharing work (see bench/README.md): N independent elements of SLOW
# seconds each (default 12 × 2 s) and a target needing them all, `--builders JOBS`
# (default 2), empty local caches:
#   - one session alone, no remote;
#   - three sessions at once sharing one `gantry cache serve` as push remote, over
#     HTTP and over gRPC: wall time until all three are done, build jobs per session.
# ROUNDS rounds (default 3), the three set-ups interleaved; min and median printed.
#
#   bench/lease-share.sh [N]
#
# Environment: JOBS (2), SLOW (2), ROUNDS (3), KEEP=1.
set -euo pipefail

N=${1:-12}
JOBS=${JOBS:-2}
SLOW=${SLOW:-2}
ROUNDS=${ROUNDS:-3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-lease-share.XXXXXX")
SERVE_PID=
cleanup() {
	[[ -n $SERVE_PID ]] && kill "$SERVE_PID" 2>/dev/null || true
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
log() { echo "== $*" >&2; }

(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry)
echo "bench-token bench" >"$TMP/tokens"
echo "bench-token" >"$TMP/token"

# serve: a fresh server (a fresh store: nothing is cached from an earlier round).
serve() {
	[[ -n $SERVE_PID ]] && { kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true; }
	rm -rf "$TMP/store"
	"$TMP/gantry" cache serve --dir "$TMP/store" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --token-file "$TMP/tokens" >"$TMP/serve.out" 2>"$TMP/serve.err" &
	SERVE_PID=$!
	for _ in $(seq 100); do grep -q '^grpc ' "$TMP/serve.out" && grep -q '^http ' "$TMP/serve.out" && break; sleep 0.1; done
	HTTP=$(awk '$1 == "http" {print $2}' "$TMP/serve.out")
	GRPC=$(awk '$1 == "grpc" {print $2}' "$TMP/serve.out")
	[[ -n $HTTP && -n $GRPC ]] || { cat "$TMP/serve.err" >&2; exit 1; }
}

# project DIR SALT [REMOTE-URL]
project() {
	local p=$1 salt=$2 url=${3:-}
	rm -rf "$p"
	mkdir -p "$p/elements"
	printf 'name = "share"\nelement-path = "elements"\ndefault-targets = ["app.toml"]\n' >"$p/project.toml"
	[[ -n $url ]] && printf '\n[[remote]]\nurl = "%s"\npush = true\ntoken-file = "%s"\n' "$url" "$TMP/token" >>"$p/project.toml"
	local deps=()
	for i in $(seq -w 1 "$N"); do
		printf 'kind = "manual"\n[config]\nbuild-commands = ["sleep %s # %s e%s"]\n' "$SLOW" "$salt" "$i" >"$p/elements/e$i.toml"
		deps+=("\"e$i.toml\"")
	done
	printf 'kind = "manual"\nbuild-depends = [%s]\n[config]\nbuild-commands = ["true # %s"]\n' "$(IFS=,; echo "${deps[*]}")" "$salt" >"$p/elements/app.toml"
}

# run NAME SALT SESSIONS [URL]: SESSIONS sessions at once; prints the wall time.
run() {
	local name=$1 salt=$2 n=$3 url=${4:-} pids=() start end
	for i in $(seq "$n"); do project "$TMP/$name$i" "$salt" "$url"; rm -rf "$TMP/$name-cache$i"; done
	start=$(date +%s.%N)
	for i in $(seq "$n"); do
		"$TMP/gantry" -C "$TMP/$name$i" --cache-dir "$TMP/$name-cache$i" build --ui json --sandbox host --builders "$JOBS" 2>"$TMP/$name$i.json" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || { echo "a session failed: see $TMP/$name*.json (KEEP=1)" >&2; exit 1; }; done
	end=$(date +%s.%N)
	local per=()
	for i in $(seq "$n"); do per+=("$(grep -c '"event":"job-start","action":"build"' "$TMP/$name$i.json" || true)"); done
	echo "$name $(echo "$end - $start" | bc) builds ${per[*]}" >>"$TMP/results"
}

for r in $(seq "$ROUNDS"); do
	log "round $r"
	run alone "r$r-alone" 1
	serve
	run http "r$r-http" 3 "http://$HTTP"
	serve
	run grpc "r$r-grpc" 3 "grpc://$GRPC"
done
cat "$TMP/results"
for name in alone http grpc; do
	awk -v n="$name" '$1 == n {print $2}' "$TMP/results" | sort -n | awk -v n="$name" -v e="$N" -v s="$SLOW" -v j="$JOBS" '
		{ v[NR] = $1 } END { printf "%-6s %d × %s s, --builders %d: min %.2f s, median %.2f s\n", n, e, s, j, v[1], v[int((NR+1)/2)] }'
done
