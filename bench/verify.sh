#!/usr/bin/env bash
# `gantry cache verify` against coreutils sha256sum over the same blobs (see
# bench/README.md): a cache holding one artifact of FILES files of SIZE KiB of random
# bytes (default 4,000 × 512 KiB = 2 GiB), page cache warm. Prints the commands
# for farm-bench; with RUN=1 times them itself (ROUNDS, default 5, interleaved).
#
#   bench/verify.sh
#
# Environment: FILES (4000), SIZE (512), ROUNDS (5), GANTRY=/path/to/gantry, KEEP=1.
set -euo pipefail

FILES=${FILES:-4000}
SIZE=${SIZE:-512}
ROUNDS=${ROUNDS:-5}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-verify.XXXXXX")
cleanup() { if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi; }
trap cleanup EXIT
log() { echo "== $*" >&2; }

if [[ -z ${GANTRY:-} ]]; then
	(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry)
	GANTRY=$TMP/gantry
fi
log "making $FILES files of $SIZE KiB"
mkdir -p "$TMP/p/elements" "$TMP/p/data"
head -c $((FILES * SIZE * 1024)) /dev/urandom | split -a 5 -d -b $((SIZE * 1024)) - "$TMP/p/data/f"
printf 'name = "verify"\nelement-path = "elements"\n' >"$TMP/p/project.toml"
printf 'kind = "import"\n[[sources]]\nkind = "local"\npath = "data"\n' >"$TMP/p/elements/data.toml"
"$GANTRY" -C "$TMP/p" --cache-dir "$TMP/cache" build --ui plain data.toml >/dev/null 2>&1
bytes=$(du -sb "$TMP/cache/cas" | cut -f1)
verify="$GANTRY --cache-dir $TMP/cache cache verify"
one="find $TMP/cache/cas -type f -print0 | xargs -0 sha256sum >/dev/null"
two="find $TMP/cache/cas -type f -print0 | xargs -0 -P2 -n 256 sha256sum >/dev/null"
cat "$TMP/cache/cas"/*/* >/dev/null # warm
echo "cas: $bytes bytes"
if [[ ${RUN:-0} != 1 ]]; then
	printf 'gantry:       %s\nsha256sum:    %s\nsha256sum ×2: %s\n' "$verify" "$one" "$two"
	KEEP=1
	exit 0
fi
for r in $(seq "$ROUNDS"); do
	for name in verify one two; do
		cmd=${!name}
		s=$(date +%s.%N); bash -c "$cmd" >/dev/null; e=$(date +%s.%N)
		echo "$name $(echo "$e - $s" | bc)" >>"$TMP/times"
	done
done
for name in verify one two; do
	awk -v n="$name" '$1 == n {print $2}' "$TMP/times" | sort -n | awk -v n="$name" -v b="$bytes" '
		{ v[NR] = $1 } END { m = v[int((NR+1)/2)]; printf "%-7s min %.3f s, median %.3f s, %.2f GB/s at the median\n", n, v[1], m, b / m / 1e9 }'
done
