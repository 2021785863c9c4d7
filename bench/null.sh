#!/usr/bin/env bash
# Null build and `show --deps all` at scale, gantry beside ninja in the same run.
#
#   bench/null.sh [N...]      (default: 2000 10000)
#
# For each N: generate the graph (bench/gen), build it once with ninja -j2 and fill
# a gantry cache with bench/fillcache (every element cached, as after a full build
# of the no-op graph), then RUNS times, interleaved: ninja's null build, gantry's null
# build (its parse cache and outcome memo warm), and `gantry show --deps all` on a
# fresh checkout's cache (no artifacts) cold (an empty cache, made by `cache gc`: show
# writes nothing into a cache not made yet) and warm (the parse cache the cold run left). Prints min and median wall time, CPU time (user + system)
# and max RSS of each row.
#
# Environment: RUNS (default 5), JOBS (2), GANTRY=/path (default: go build
# ./cmd/gantry), BEFORE=/path/to/another/gantry (measured beside it, e.g. a build of
# main), KEEP=1 keeps the temporary directory.
set -euo pipefail

RUNS=${RUNS:-5}
JOBS=${JOBS:-2}
NS=("$@")
[[ ${#NS[@]} -gt 0 ]] || NS=(2000 10000)
for n in "${NS[@]}"; do
	[[ $n =~ ^[1-9][0-9]*$ ]] || {
		sed -n '2,14s/^# \{0,1\}//p' "$0" >&2
		exit 2
	}
done
command -v ninja >/dev/null || {
	echo "null.sh: ninja is needed (apt-get install ninja-build)" >&2
	exit 1
}
[[ -x /usr/bin/time ]] || {
	echo "null.sh: GNU time is needed at /usr/bin/time (apt-get install time)" >&2
	exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-null.XXXXXX")
cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

(cd "$ROOT" && go build -o "$TMP/gen" ./bench/gen && go build -o "$TMP/fillcache" ./bench/fillcache)
if [[ -z ${GANTRY:-} ]]; then
	GANTRY=$TMP/gantry
	(cd "$ROOT" && go build -o "$GANTRY" ./cmd/gantry)
fi
tools=(after "$GANTRY")
[[ -n ${BEFORE:-} ]] && tools+=(before "$BEFORE")

# timed LABEL CMD...: run CMD (stdout and stderr to $TMP/out), append "wall rss" to
# $TMP/t.LABEL; a failure stops the script (a null build must not fail).
timed() {
	local label=$1
	shift
	local t0 t1
	t0=$(date +%s%N)
	if ! /usr/bin/time -f '%e %M %U %S' -o "$TMP/time" "$@" >"$TMP/out" 2>&1; then
		echo "null.sh: $label failed: $*" >&2
		tail -n 20 "$TMP/out" >&2
		exit 1
	fi
	t1=$(date +%s%N)
	# GNU time's wall clock has 10 ms steps, too coarse for a null build: the wall
	# time is taken around it in ns (time's own start-up, about 1 ms, included).
	awk -v w="$(((t1 - t0) / 1000))" '{ $1 = w / 1e6; print }' "$TMP/time" >>"$TMP/t.$label"
}

# stats LABEL: "wall min / median s, CPU min / median s, max RSS MiB" of the runs
# recorded for LABEL.
stats() {
	local wall cpu
	wall=$(awk '{ print $1 }' "$TMP/t.$1" | sort -n | median)
	cpu=$(awk '{ print $3 + $4 }' "$TMP/t.$1" | sort -n | median)
	awk -v w="$wall" -v c="$cpu" '{ if ($2 > r) r = $2 } END { printf "wall %s s, cpu %s s, %.0f MiB", w, c, r / 1024 }' "$TMP/t.$1"
}

# median: "min / median" of sorted numbers on stdin.
median() {
	awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%.3f / %.3f", v[1], m }'
}

echo "# jobs=$JOBS runs=$RUNS host=$(uname -srm) cpus=$(nproc)"
for n in "${NS[@]}"; do
	dir=$TMP/p$n cache=$TMP/c$n
	"$TMP/gen" -out "$dir" -n "$n" >/dev/null
	echo "== N=$n: ninja full build, filling the gantry cache" >&2
	ninja -C "$dir" -j"$JOBS" >/dev/null
	"$TMP/fillcache" -C "$dir" -cache "$cache" >&2
	rm -f "$TMP"/t.*
	# Each gantry gets its own copy of the cache: the parse cache and the outcome memo
	# are one file per checkout and project, and a file another build wrote is ignored
	# (and overwritten), so sharing them would make every interleaved run cold.
	for ((i = 0; i < ${#tools[@]}; i += 2)); do # a first run each: the parse cache, the page cache
		cp -a "$cache" "$cache.${tools[i]}"
		"${tools[i + 1]}" -C "$dir" build --builders "$JOBS" --ui plain --cache-dir "$cache.${tools[i]}" >/dev/null 2>&1
	done
	for ((r = 0; r < RUNS; r++)); do
		timed ninja ninja -C "$dir" -j"$JOBS"
		grep -q 'no work to do' "$TMP/out" || { echo "null.sh: ninja had work to do" >&2; exit 1; }
		for ((i = 0; i < ${#tools[@]}; i += 2)); do
			label=${tools[i]} bin=${tools[i + 1]}
			timed "$label-null" "$bin" -C "$dir" build --builders "$JOBS" --ui plain --cache-dir "$cache.$label"
			grep -q 'build: processed 0,' "$TMP/out" || { echo "null.sh: $label built something" >&2; exit 1; }
			rm -rf "$TMP/fresh"
			"$bin" -C "$dir" --cache-dir "$TMP/fresh" cache gc >/dev/null 2>&1
			timed "$label-show-cold" "$bin" -C "$dir" --cache-dir "$TMP/fresh" show --deps all
			timed "$label-show-warm" "$bin" -C "$dir" --cache-dir "$TMP/fresh" show --deps all
		done
	done
	printf '%-8s %-24s %s\n' "N=$n" "ninja -j$JOBS null" "$(stats ninja)"
	for ((i = 0; i < ${#tools[@]}; i += 2)); do
		label=${tools[i]}
		printf '%-8s %-24s %s\n' "" "gantry $label null" "$(stats "$label-null")"
		printf '%-8s %-24s %s\n' "" "gantry $label show cold" "$(stats "$label-show-cold")"
		printf '%-8s %-24s %s\n' "" "gantry $label show warm" "$(stats "$label-show-warm")"
	done
done
