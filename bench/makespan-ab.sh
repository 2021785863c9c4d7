#!/usr/bin/env bash
# Makespan of two gantry binaries on one sleep DAG, run 2 only, in alternating rounds,
# beside ninja's second run and make in the same round: for a before/after on a
# machine too noisy for two separate bench/makespan.sh runs. See bench/README.md.
#
#   bench/makespan-ab.sh SHAPE N SEED SLEEP_MS BEFORE AFTER
#
# Both binaries get the durations one first run of BEFORE learned (a fresh cache
# holding its stats file, as bench/makespan.sh's run 2). Environment: ROUNDS (2),
# JOBS (2), KEEP=1 keeps the temporary directory.
set -euo pipefail

usage() {
	sed -n '6,10s/^# \{0,1\}//p' "$0" >&2
	exit 2
}
[[ $# -eq 6 ]] || usage
shape=$1 n=$2 seed=$3 ms=$4 before=$5 after=$6
ROUNDS=${ROUNDS:-2}
JOBS=${JOBS:-2}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-makespan-ab.XXXXXX")
trap '[[ ${KEEP:-0} == 1 ]] && echo "kept $TMP" >&2 || rm -rf "$TMP"' EXIT

(cd "$ROOT" && go build -o "$TMP/gen" ./bench/gen && go build -o "$TMP/makespan" ./bench/makespan)
graph=(-shape "$shape" -n "$n" -seed "$seed" -sleep-ms "$ms")
"$TMP/gen" -out "$TMP/p" -force "${graph[@]}" >/dev/null
lb=$("$TMP/makespan" "${graph[@]}" -builders "$JOBS" | sed -n '1s/.*lower_bound_ms=\([0-9]*\).*/\1/p')

# ratio CMD...: run CMD quietly and print its wall time over the lower bound.
ratio() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null 2>&1 || {
		echo FAIL
		return
	}
	t1=$(date +%s%N)
	awk -v m=$(((t1 - t0) / 1000000)) -v lb="$lb" 'BEGIN { printf "%.3f", m / lb }'
}

"$before" -C "$TMP/p" build --builders "$JOBS" --ui plain --cache-dir "$TMP/learn" >/dev/null 2>&1
echo "# $shape n=$n seed=$seed sleep-ms=$ms lb=${lb}ms jobs=$JOBS; run 2 ÷ lower bound"
echo "round before after make ninja2 load"
for ((r = 1; r <= ROUNDS; r++)); do
	line="$r"
	for g in "$before" "$after"; do
		rm -rf "$TMP/c"
		mkdir -p "$TMP/c"
		cp "$TMP/learn/stats" "$TMP/c/stats"
		line+=" $(ratio "$g" -C "$TMP/p" build --builders "$JOBS" --ui plain --cache-dir "$TMP/c")"
	done
	rm -rf "$TMP/p/out"
	line+=" $(ratio make -C "$TMP/p" -j"$JOBS")"
	rm -rf "$TMP/p/out" "$TMP/p/.ninja_log"
	ninja -C "$TMP/p" -j"$JOBS" >/dev/null 2>&1 # run 1: .ninja_log learns
	rm -rf "$TMP/p/out"
	line+=" $(ratio ninja -C "$TMP/p" -j"$JOBS")"
	echo "$line $(cut -d' ' -f1 /proc/loadavg)"
done
