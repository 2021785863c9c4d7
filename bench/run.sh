#!/usr/bin/env bash
# Compare gantry with ninja and make on a synthetic graph. See bench/README.md.
#
#   bench/run.sh [all] [N]   full comparison on N no-op elements (default 2000)
#   bench/run.sh show [N]    time only `gantry show --deps all` for N elements
#
# Environment: JOBS (default 2), FANIN (3), SEED (1), SLEEP_MS (0), SHAPE (random,
# chain-last or hops: see bench/README.md),
# GANTRY=/path/to/gantry uses that binary instead of building ./cmd/gantry,
# KEEP=1 keeps the temporary directory.
set -euo pipefail

usage() {
	sed -n '4,9s/^# \{0,1\}//p' "$0" >&2
	exit 2
}

mode=all
case "${1:-}" in
all | show)
	mode=$1
	shift
	;;
-h | --help) usage ;;
esac
N=${1:-2000}
[[ $# -le 1 && $N =~ ^[1-9][0-9]*$ ]] || usage
JOBS=${JOBS:-2}
FANIN=${FANIN:-3}
SEED=${SEED:-1}
SLEEP_MS=${SLEEP_MS:-0}

TIME=/usr/bin/time
if ! "$TIME" -v true >/dev/null 2>&1; then
	echo "run.sh: need GNU time at $TIME (apt-get install time)" >&2
	exit 1
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-bench.XXXXXX")
cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "kept $TMP" >&2
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
DIR=$TMP/project
LOGS=$TMP/logs
mkdir -p "$LOGS"

log() { echo "== $*" >&2; }

# Results table, printed at the end (and each row as soon as it is known).
FMT='%-24s %-10s %10s %12s\n'
rows=()
add_row() {
	# shellcheck disable=SC2059
	rows+=("$(printf "$FMT" "$@")")
	# shellcheck disable=SC2059
	printf "$FMT" "$@" >&2
}

# step NAME STDOUT CMD...: run CMD under /usr/bin/time -v with stdout going
# to STDOUT (a file or /dev/null) and stderr to the step's log. A failing
# step is reported in the table and does not stop the script.
nstep=0
step() {
	local name=$1 out=$2
	shift 2
	nstep=$((nstep + 1))
	local slug
	slug=$(printf '%02d-%s' "$nstep" "${name//[^A-Za-z0-9]/_}")
	local tfile=$LOGS/$slug.time elog=$LOGS/$slug.log
	[[ $out == LOG ]] && out=$LOGS/$slug.out
	log "$name: $*"
	local status=ok rc=0
	"$TIME" -v -o "$tfile" "$@" >"$out" 2>"$elog" || rc=$?
	if [[ $rc -ne 0 ]]; then
		status="FAIL($rc)"
		echo "   $name failed with status $rc; last lines of output:" >&2
		{ [[ -f $LOGS/$slug.out ]] && tail -n 5 "$LOGS/$slug.out"; tail -n 10 "$elog"; } 2>/dev/null | sed 's/^/   | /' >&2 || true
	fi
	local wall rss
	wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$tfile" 2>/dev/null |
		awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.2f", s }')
	rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tfile" 2>/dev/null |
		awk '{ printf "%.1f", $1 / 1024 }')
	add_row "$name" "$status" "${wall:--}" "${rss:--}"
}

skip() { add_row "$1" "skipped" - -; }

# --- build the tools -------------------------------------------------------

log "building gen"
(cd "$ROOT" && go build -o "$TMP/gen" ./bench/gen)

have_gantry=1
if [[ -n ${GANTRY:-} ]]; then
	log "using prebuilt gantry $GANTRY"
	if [[ ! -x $GANTRY ]]; then
		echo "   $GANTRY is not executable; gantry steps will be skipped" >&2
		have_gantry=0
	fi
else
	GANTRY=$TMP/gantry
	log "building gantry"
fi
if [[ $GANTRY == "$TMP/gantry" ]] &&
	! (cd "$ROOT" && go build -o "$GANTRY" ./cmd/gantry) >"$LOGS/gantry-build.log" 2>&1; then
	have_gantry=0
	echo "   go build ./cmd/gantry failed; gantry steps will be skipped:" >&2
	tail -n 10 "$LOGS/gantry-build.log" | sed 's/^/   | /' >&2
fi

log "generating project"
"$TMP/gen" -out "$DIR" -n "$N" -fanin "$FANIN" -seed "$SEED" -sleep-ms "$SLEEP_MS" -shape "${SHAPE:-random}" >"$LOGS/gen.out"
summary=$(cat "$LOGS/gen.out")
echo "   $summary" >&2

# --- benchmarks --------------------------------------------------------------

# shellcheck disable=SC2059
header=$(printf "$FMT" step status "wall (s)" "maxRSS (MiB)")
echo >&2
echo "$header" >&2

gantry_step() {
	local name=$1
	shift
	if [[ $have_gantry == 1 ]]; then
		step "$name" "$@"
	else
		skip "$name"
	fi
}

gantry_step "gantry show --deps all" /dev/null "$GANTRY" -C "$DIR" show --deps all

if [[ $mode == all ]]; then
	CACHE=$TMP/gantry-cache
	build=("$GANTRY" -C "$DIR" build --builders "$JOBS" --ui plain --cache-dir "$CACHE")
	gantry_step "gantry build (full)" LOG "${build[@]}"
	gantry_step "gantry build (null)" LOG "${build[@]}"

	if command -v ninja >/dev/null 2>&1; then
		rm -rf "$DIR/out" "$DIR/.ninja_log" "$DIR/.ninja_deps"
		step "ninja -j$JOBS (full)" LOG ninja -C "$DIR" -j"$JOBS"
		step "ninja -j$JOBS (null)" LOG ninja -C "$DIR" -j"$JOBS"
	else
		echo "   ninja not found; skipping ninja steps" >&2
		skip "ninja -j$JOBS (full)"
		skip "ninja -j$JOBS (null)"
	fi

	if command -v make >/dev/null 2>&1; then
		rm -rf "$DIR/out"
		step "make -j$JOBS (full)" LOG make -C "$DIR" -j"$JOBS"
		step "make -j$JOBS (null)" LOG make -C "$DIR" -j"$JOBS"
	else
		echo "   make not found; skipping make steps" >&2
		skip "make -j$JOBS (full)"
		skip "make -j$JOBS (null)"
	fi
fi

# --- report ------------------------------------------------------------------

echo
echo "# $summary"
echo "# jobs=$JOBS host=$(uname -srm) cpus=$(nproc 2>/dev/null || echo '?')"
echo "$header"
failed=$((1 - have_gantry))
for r in "${rows[@]}"; do
	echo "$r"
	if [[ $r == *FAIL* ]]; then
		failed=1
	fi
done
# Non-zero if gantry did not build or any step failed.
exit "$failed"
