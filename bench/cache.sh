#!/usr/bin/env bash
# Cache maintenance on a large cache. See bench/README.md.
#
#   bench/cache.sh [ARTIFACTS]   a cache of ARTIFACTS artifacts (default 20000), 10 blobs each
#
# Measures (GNU time: wall, peak RSS): `cache usage`; `cache gc` down to half the cache;
# a build of a synthetic project whose quota makes a cleanup run mid-session (how long
# builds were held back); the same build beside a `cache gc` in another process (how
# long its jobs waited for the cross-process cache lock).
# Environment: N (synthetic elements, default 200), JOBS (2), GANTRY=/path/to/gantry,
# KEEP=1 keeps the temporary directory.
set -euo pipefail
ARTIFACTS=${1:-20000}
N=${N:-200}
JOBS=${JOBS:-2}
TIME=/usr/bin/time
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-cache-bench.XXXXXX")
trap '[[ ${KEEP:-0} == 1 ]] && echo "kept $TMP" >&2 || rm -rf "$TMP"' EXIT
log() { echo "== $*" >&2; }

log "building the tools"
(cd "$ROOT" && go build -o "$TMP/cachegen" ./bench/cachegen && go build -o "$TMP/cachewait" ./bench/cachewait &&
	go build -o "$TMP/gen" ./bench/gen)
GANTRY=${GANTRY:-}
if [[ -z $GANTRY ]]; then
	GANTRY=$TMP/gantry
	(cd "$ROOT" && go build -o "$GANTRY" ./cmd/gantry)
fi

log "generating a cache of $ARTIFACTS artifacts"
"$TMP/cachegen" -out "$TMP/orig" -artifacts "$ARTIFACTS"
fresh() { rm -rf "$TMP/c" && cp -a "$TMP/orig" "$TMP/c"; }
timed() { # timed NAME CMD...: run, print wall time and peak RSS
	local name=$1
	shift
	"$TIME" -f "%e %M" -o "$TMP/time" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
	read -r wall rss <"$TMP/time"
	printf '%-28s wall %7ss  peak RSS %7s KiB\n' "$name" "$wall" "$rss"
}

fresh
timed "cache usage" "$GANTRY" --cache-dir "$TMP/c" cache usage
total=$("$GANTRY" --cache-dir "$TMP/c" cache usage --format json | jq .total)
blobs=$("$GANTRY" --cache-dir "$TMP/c" cache usage --format json | jq .blobs)
echo "   $ARTIFACTS artifacts, $blobs blobs, $total bytes on disk"
timed "cache gc to half" "$GANTRY" --cache-dir "$TMP/c" cache gc --quota $((total / 2))
tail -n 1 "$TMP/cache gc to half.out"

log "a build of $N elements whose quota triggers a cleanup mid-session"
"$TMP/gen" -out "$TMP/project" -n "$N" -sleep-ms 20 >/dev/null
fresh
# Each build adds its log, a few hundred bytes: the quota is passed after a few builds.
# (A copy's directories may take other space than the original's: measure this one.)
quota=$(($("$GANTRY" --cache-dir "$TMP/c" cache usage --format json | jq .total) + 2000))
timed "build with a cleanup" "$GANTRY" -C "$TMP/project" --cache-dir "$TMP/c" build --builders "$JOBS" --ui json --cache-quota "$quota"
"$TMP/cachewait" <"$TMP/build with a cleanup.err"

log "the same build beside a cache gc in another process"
fresh
"$GANTRY" --cache-dir "$TMP/c" cache gc --quota $((total / 2)) >/dev/null &
gc=$!
until ! flock -n "$TMP/c/lock" true 2>/dev/null; do :; done # gc holds the lock
timed "build beside gc" "$GANTRY" -C "$TMP/project" --cache-dir "$TMP/c" build --builders "$JOBS" --ui json
wait $gc
"$TMP/cachewait" <"$TMP/build beside gc.err"
