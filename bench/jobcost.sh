#!/usr/bin/env bash
# Per-job cost, side by side: full builds of one no-op graph by gantry (and optionally
# a second gantry, e.g. main before a change), ninja and make, ROUNDS times in turn,
# with wall and CPU (user + sys, children included) per run and min / median.
#
#   bench/jobcost.sh [N]    N no-op elements (default 2000)
#
# Environment: ROUNDS (default 3), JOBS (2), GANTRY (default: build ./cmd/gantry),
# BEFORE=/path/to/other/gantry adds it as "before", KEEP=1 keeps the directory.
# DEFER_RM=1 moves the last run's cache or outputs aside instead of removing them
# before a run, and removes them all at the end: on ext4 without a journal the inode
# allocator skips, one by one, every inode freed in the last minute or so, so a run
# that follows the removal of the last one's 60,000 inodes pays for them (every tool
# alike, in proportion to the files it makes).
set -euo pipefail

N=${1:-2000}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-2}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-jobcost.XXXXXX")
trap '[[ ${KEEP:-0} == 1 ]] && echo "kept $TMP" >&2 || rm -rf "$TMP"' EXIT

(cd "$ROOT" && go build -o "$TMP/gen" ./bench/gen)
if [[ -z ${GANTRY:-} ]]; then
	GANTRY=$TMP/gantry
	(cd "$ROOT" && go build -o "$GANTRY" ./cmd/gantry)
fi
"$TMP/gen" -out "$TMP/p" -n "$N" >/dev/null

# discard PATH: removes PATH, or with DEFER_RM=1 moves it aside (removed at the end).
discard() {
	[[ -e $1 ]] || return 0
	if [[ ${DEFER_RM:-0} == 1 ]]; then
		mkdir -p "$TMP/trash" && mv "$1" "$(mktemp -u "$TMP/trash/x.XXXXXX")"
	else
		rm -rf "$1"
	fi
}

# run NAME CMD...: one timed run; prints "NAME wall cpu".
run() {
	local name=$1
	shift
	/usr/bin/time -f "%e %U %S" -o "$TMP/time" "$@" >/dev/null 2>"$TMP/err" ||
		{ echo "$name failed:" >&2; tail -n 5 "$TMP/err" >&2; exit 1; }
	awk -v n="$name" '{ printf "%s %.2f %.2f\n", n, $1, $2 + $3 }' "$TMP/time"
}

for r in $(seq "$ROUNDS"); do
	for g in after before; do
		bin=$GANTRY
		[[ $g == before ]] && { [[ -n ${BEFORE:-} ]] || continue; bin=$BEFORE; }
		discard "$TMP/cache"
		run "gantry-$g" "$bin" -C "$TMP/p" build --builders "$JOBS" --ui plain --cache-dir "$TMP/cache"
	done
	discard "$TMP/p/out"
	rm -rf "$TMP/p/.ninja_log" "$TMP/p/.ninja_deps"
	run "ninja-j$JOBS" ninja -C "$TMP/p" -j"$JOBS"
	discard "$TMP/p/out"
	run "make-j$JOBS" make -C "$TMP/p" -j"$JOBS"
done | tee "$TMP/runs" >&2

echo "# n=$N rounds=$ROUNDS jobs=$JOBS host=$(uname -srm) cpus=$(nproc)"
echo "# tool            wall min / median (s)   cpu min / median (s)"
# stats COLUMN TOOL: "min / median" of a column of TOOL's runs.
stats() {
	awk -v t="$2" -v c="$1" '$1 == t { print $c }' "$TMP/runs" | sort -n |
		awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%6.2f / %6.2f", v[1], m }'
}
for t in $(cut -d' ' -f1 "$TMP/runs" | awk '!seen[$0]++'); do
	printf "%-16s  %s            %s\n" "$t" "$(stats 2 "$t")" "$(stats 3 "$t")"
done
