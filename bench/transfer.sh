#!/usr/bin/env bash
# Push and pull of one artifact of N files (default 2,000 × 256 KiB) through
# `gantry cache serve` over HTTP and over gRPC (see bench/README.md): in each
# round a fresh server (empty store) per protocol, a push from a cache holding
# the artifact, then a pull into an empty cache. Interleaved rounds; min / median
# wall, median client CPU, and gRPC / HTTP per round.
#
#   bench/transfer.sh [N]
#
# Environment: SIZE_KIB (256), ROUNDS (3), GANTRY=/path/to/gantry (default: built
# from this tree; it also serves), BEFORE="/path/to/gantry …" (other clients timed
# in the same rounds), KEEP=1.
set -euo pipefail

N=${1:-2000}
SIZE_KIB=${SIZE_KIB:-256}
ROUNDS=${ROUNDS:-3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-transfer-bench.XXXXXX")
SERVE_PID= WWW_PID=
stop_serve() {
	[[ -n $SERVE_PID ]] || return 0
	kill "$SERVE_PID" 2>/dev/null || true
	wait "$SERVE_PID" 2>/dev/null || true
	SERVE_PID=
}
cleanup() {
	stop_serve
	[[ -n $WWW_PID ]] && kill "$WWW_PID" 2>/dev/null || true
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
log() { echo "== $*" >&2; }
if [[ -z ${GANTRY:-} ]]; then
	(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry)
	GANTRY=$TMP/gantry
fi
echo "bench-token bench" >"$TMP/tokens"
echo "bench-token" >"$TMP/token"

log "an import element of $N files of $SIZE_KIB KiB (a tar source), built once"
P=$TMP/project
mkdir -p "$P/elements" "$TMP/www"
printf 'name = "transferbench"\ndefault-targets = ["big.toml"]\n' >"$P/project.toml"
python3 - "$TMP/www/files.tar" "$N" "$SIZE_KIB" <<'PY'
import io, os, sys, tarfile
out, n, kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as t:
    for i in range(n):
        data = os.urandom(kib * 1024)
        info = tarfile.TarInfo("f%05d" % i)
        info.size, info.mode = len(data), 0o644
        t.addfile(info, io.BytesIO(data))
PY
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server -b 127.0.0.1 -d "$TMP/www" "$port" >/dev/null 2>&1 &
WWW_PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
ref=$(sha256sum "$TMP/www/files.tar" | cut -d' ' -f1)
printf 'kind = "import"\n[[sources]]\nkind = "tar"\nurl = "http://127.0.0.1:%s/files.tar"\nref = "%s"\n' "$port" "$ref" >"$P/elements/big.toml"
: >"$TMP/none.toml"
"$GANTRY" -C "$P" --cache-dir "$TMP/cacheA" --config "$TMP/none.toml" --ui plain build >"$TMP/build.log" 2>&1 ||
	{ cat "$TMP/build.log" >&2; exit 1; }
kill "$WWW_PID"
WWW_PID=
rm -rf "$TMP/www"

# serve: a fresh server with an empty store; sets HTTP and GRPC.
serve() {
	stop_serve
	rm -rf "$TMP/store"
	"$GANTRY" cache serve --dir "$TMP/store" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --token-file "$TMP/tokens" >"$TMP/serve.out" 2>/dev/null &
	SERVE_PID=$!
	for _ in $(seq 100); do grep -q '^grpc ' "$TMP/serve.out" && grep -q '^http ' "$TMP/serve.out" && break; sleep 0.1; done
	HTTP=$(awk '$1 == "http" {print $2}' "$TMP/serve.out")
	GRPC=$(awk '$1 == "grpc" {print $2}' "$TMP/serve.out")
	[[ -n $HTTP && -n $GRPC ]] || { echo "transfer.sh: cache serve did not start" >&2; exit 1; }
}

# transfer BINARY PROTO OP CACHE: one push or pull; appends "BINARY PROTO OP wall cpu"
# to the results.
transfer() {
	local bin=$1 proto=$2 op=$3 cache=$4 url t0 t1
	if [[ $proto == http ]]; then url="http://$HTTP"; else url="grpc://$GRPC"; fi
	printf '[[remote]]\nurl = "%s"\npush = true\ntoken-file = "%s"\n' "$url" "$TMP/token" >"$TMP/remote.toml"
	t0=$(date +%s.%N)
	/usr/bin/time -f "%U %S" -o "$TMP/cpu" "$bin" -C "$P" --cache-dir "$cache" --config "$TMP/remote.toml" --ui plain "$op" big.toml >/dev/null 2>"$TMP/op.err" ||
		{ cat "$TMP/op.err" >&2; exit 1; }
	t1=$(date +%s.%N)
	local wall cpu
	wall=$(echo "$t1 - $t0" | bc -l)
	cpu=$(awk '{print $1 + $2}' "$TMP/cpu")
	log "$bin $proto $op: $wall s, cpu $cpu s"
	echo "$bin $proto $op $wall $cpu" >>"$TMP/results"
}

read -ra bins <<<"$GANTRY ${BEFORE:-}"
for r in $(seq "$ROUNDS"); do
	log "round $r (load $(cut -d' ' -f1-3 /proc/loadavg))"
	for bin in "${bins[@]}"; do
		for proto in http grpc; do
			serve
			transfer "$bin" "$proto" push "$TMP/cacheA"
			rm -rf "$TMP/cacheB"
			transfer "$bin" "$proto" pull "$TMP/cacheB"
		done
	done
done
stop_serve
mib=$((N * SIZE_KIB / 1024))
echo "# push and pull of one artifact of $N × $SIZE_KIB KiB ($mib MiB) through gantry cache serve, $ROUNDS rounds; wall min / median, client CPU median; load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$TMP/results" "${bins[@]}" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
for b in sys.argv[2:]:
    for op in ("push", "pull"):
        walls = {}
        for proto in ("http", "grpc"):
            rs = [r for r in rows if r[0] == b and r[1] == proto and r[2] == op]
            walls[proto] = [float(r[3]) for r in rs]
            w, c = sorted(walls[proto]), sorted(float(r[4]) for r in rs)
            print("%-40s %.3f / %.3f s, cpu %.2f s" % (f"{b} {op} {proto}", w[0], w[(len(w) - 1) // 2], c[(len(c) - 1) // 2]))
        print(f"{b} {op} grpc/http per round:", " ".join("%.2f" % (g / h) for g, h in zip(walls["grpc"], walls["http"])))
PY
