#!/usr/bin/env bash
# Makespan on sleep DAGs: gantry against its lower bound, its own simulation, ninja and
# make, side by side. See bench/README.md ("Makespan").
#
#   bench/makespan.sh [N...]   random DAGs of N elements (default: 200 1000), then the
#                              adversarial shapes (chain-last, hops) of 200 elements
#
# Environment: SEEDS ("1 2 3"; "" for no random DAG), RUNS (1: repeats of each
# measured build), JOBS (2), SLEEP_MS (per N: 300 up to 500 elements, else 100),
# SHAPE_N (200) and SHAPE_MS (100) for the adversarial shapes, SHAPES ("chain-last
# hops"; "" for none), FLOOR_K (200: commands run to measure the spawn floor; 0 for
# none), GANTRY=/path/to/gantry instead of building ./cmd/gantry, KEEP=1 keeps the
# temporary directory.
set -euo pipefail

usage() {
	sed -n '4,13s/^# \{0,1\}//p' "$0" >&2
	exit 2
}
case "${1:-}" in -h | --help) usage ;; esac
for n in "$@"; do [[ $n =~ ^[1-9][0-9]*$ ]] || usage; done
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(200 1000)
SEEDS=${SEEDS-1 2 3}
RUNS=${RUNS:-1}
JOBS=${JOBS:-2}
SHAPES=${SHAPES-chain-last hops}
SHAPE_N=${SHAPE_N:-200}
SHAPE_MS=${SHAPE_MS:-100}
FLOOR_K=${FLOOR_K:-200}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-makespan.XXXXXX")
cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "kept $TMP" >&2
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
log() { echo "== $*" >&2; }

log "building gen, makespan and gantry"
(cd "$ROOT" && go build -o "$TMP/gen" ./bench/gen && go build -o "$TMP/makespan" ./bench/makespan)
if [[ -z ${GANTRY:-} ]]; then
	GANTRY=$TMP/gantry
	(cd "$ROOT" && go build -o "$GANTRY" ./cmd/gantry)
fi
have() { command -v "$1" >/dev/null 2>&1; }
have ninja || echo "   ninja not found (apt-get install ninja-build): its columns show -" >&2
have make || echo "   make not found (apt-get install make): its column shows -" >&2

# timed CMD...: run CMD (output to $TMP/last.log) and print its wall time in ms, or
# FAIL when it fails.
timed() {
	local t0 t1
	t0=$(date +%s%N)
	if ! "$@" >"$TMP/last.log" 2>&1; then
		echo "   failed: $*" >&2
		tail -n 5 "$TMP/last.log" | sed 's/^/   | /' >&2
		echo FAIL
		return
	fi
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000000))
}

# ratio MS: MS over the current lower bound (FAIL stays FAIL).
ratio() {
	[[ $1 =~ ^[0-9]+$ ]] || {
		echo "$1"
		return
	}
	awk -v m="$1" -v lb="$LB" 'BEGIN { printf "%.3f", m / lb }'
}

# fit RUN MS: the per-job overhead (ms) with which gantry's policy in simulation takes
# MS, RUN being "first" or "second".
fit() {
	[[ $2 =~ ^[0-9]+$ ]] || {
		echo -
		return
	}
	"$TMP/makespan" "${GRAPH[@]}" -builders "$JOBS" -fit "$2" | sed -n "s/^$1 .*overhead_fit_ms=//p"
}

# minmed VALUES...: "min/median" (a single value alone).
minmed() {
	if [[ $# -eq 1 ]]; then
		echo "$1"
		return
	fi
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { printf "%s/%s", v[1], v[int((NR + 1) / 2)] }'
}

FMT='%-10s %5s %4s %6s | %5s %5s | %-11s %-11s %-11s | %-9s %-9s | %-11s %-11s | %-11s | %-5s %-5s\n'
rows=()
row() {
	# shellcheck disable=SC2059
	rows+=("$(printf "$FMT" "$@")")
	# shellcheck disable=SC2059
	printf "$FMT" "$@" >&2
}
header=$(printf "$FMT" shape n seed "lb(s)" sim1 sim2 gantry1 gantry2 "sim(learnt)" "ovh1(ms)" "ovh2(ms)" ninja1 ninja2 make floor "spawn")

# measure SHAPE N SEED SLEEP_MS: one row.
measure() {
	local shape=$1 n=$2 seed=$3 ms=$4 dir=$TMP/project
	GRAPH=(-shape "$shape" -n "$n" -seed "$seed" -sleep-ms "$ms")
	log "$shape n=$n seed=$seed sleep-ms=$ms"
	"$TMP/gen" -out "$dir" -force "${GRAPH[@]}" >&2
	local sim
	sim=$("$TMP/makespan" "${GRAPH[@]}" -builders "$JOBS" -floor "$FLOOR_K")
	LB=$(sed -n '1s/.*lower_bound_ms=\([0-9]*\).*/\1/p' <<<"$sim")
	local sim1 sim2 floor=- spawn=-
	sim1=$(sed -n 's/^first .*ratio=//p' <<<"$sim")
	sim2=$(sed -n 's/^second .*ratio=//p' <<<"$sim")
	if [[ $FLOOR_K -gt 0 ]]; then
		floor=$(sed -n 's/^floor .*ratio=\([0-9.]*\).*/\1/p' <<<"$sim")
		spawn=$(sed -n 's/^floor .*spawn_ms=//p' <<<"$sim")
	fi
	local g1=() g2=() learnt=() o1=() o2=() n1=() n2=() mk=() r t
	for ((r = 1; r <= RUNS; r++)); do
		# First run: a fresh cache, nothing learned. Second run: a fresh cache again
		# (everything is rebuilt) holding only the durations the first run learned.
		local c1=$TMP/cache-1 c2=$TMP/cache-2
		rm -rf "$c1" "$c2"
		t=$(timed "$GANTRY" -C "$dir" build --builders "$JOBS" --ui plain --cache-dir "$c1")
		g1+=("$(ratio "$t")") o1+=("$(fit first "$t")")
		mkdir -p "$c2"
		cp "$c1/stats" "$c2/stats" 2>/dev/null || echo "   the first run learned nothing ($c1/stats)" >&2
		t=$(timed "$GANTRY" -C "$dir" build --builders "$JOBS" --ui plain --cache-dir "$c2")
		g2+=("$(ratio "$t")") o2+=("$(fit second "$t")")
		learnt+=("$("$TMP/makespan" "${GRAPH[@]}" -builders "$JOBS" -cache "$c1" | sed -n 's/^learned .*ratio=//p')")
		rm -rf "$c1" "$c2"
		if have ninja; then
			# ninja keeps its .ninja_log between the two runs, as gantry keeps its stats.
			rm -rf "$dir/out" "$dir/.ninja_log" "$dir/.ninja_deps"
			n1+=("$(ratio "$(timed ninja -C "$dir" -j"$JOBS")")")
			rm -rf "$dir/out"
			n2+=("$(ratio "$(timed ninja -C "$dir" -j"$JOBS")")")
		else
			n1+=(-) n2+=(-)
		fi
		if have make; then
			rm -rf "$dir/out"
			mk+=("$(ratio "$(timed make -C "$dir" -j"$JOBS")")")
		else
			mk+=(-)
		fi
	done
	row "$shape" "$n" "$seed" "$(awk -v lb="$LB" 'BEGIN { printf "%.2f", lb / 1000 }')" "$sim1" "$sim2" \
		"$(minmed "${g1[@]}")" "$(minmed "${g2[@]}")" "$(minmed "${learnt[@]}")" \
		"$(minmed "${o1[@]}")" "$(minmed "${o2[@]}")" \
		"$(minmed "${n1[@]}")" "$(minmed "${n2[@]}")" "$(minmed "${mk[@]}")" "$floor" "$spawn"
}

echo "$header" >&2
for n in "${SIZES[@]}"; do
	ms=${SLEEP_MS:-$((n <= 500 ? 300 : 100))}
	for seed in $SEEDS; do
		measure random "$n" "$seed" "$ms"
	done
done
for shape in $SHAPES; do
	measure "$shape" "$SHAPE_N" 1 "$SHAPE_MS"
done

echo "# makespan / lower bound; lb = max(critical path, total work / $JOBS builders)"
echo "# sim1, sim2: gantry's policy in simulated time, no overhead, first run (no durations) and"
echo "# second (exact durations); sim(learnt): with the durations the real first run learned;"
echo "# gantry1/2, ninja1/2: first run / second run into a fresh cache or out/ (durations and"
echo "# .ninja_log kept); ovh1/2: the per-job overhead with which sim1/sim2 take as long as"
echo "# gantry1/2 did; floor: sim2 with a per-job overhead of spawn, what each of the graph's"
echo "# first FLOOR_K=$FLOOR_K commands cost beyond its sleep, run as processes back to back"
echo "# on the builders by a loop that does nothing else; min/median of RUNS=$RUNS"
echo "# jobs=$JOBS host=$(uname -srm) cpus=$(nproc 2>/dev/null || echo '?') load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$header"
printf '%s\n' "${rows[@]}"
