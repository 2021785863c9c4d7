#!/usr/bin/env bash
# Committing an install root to the cache, beside `cp -a && sync` of the same tree.
# See bench/README.md.
#
#   bench/commit.sh [small|large]   small: 50,000 files of 100 bytes in 500 directories
#                                   large: 5 files of 100 MB
#
# Environment: RUNS (default 3), GANTRY_SRC=/path/to/a/gantry/checkout builds the
# commit tool against that checkout's cache package (to compare before and after),
# KEEP=1 keeps the temporary directory.
set -euo pipefail
shape=${1:-small}
RUNS=${RUNS:-3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/var/tmp}/gantry-commit-bench.XXXXXX")
trap '[[ ${KEEP:-0} == 1 ]] && echo "kept $TMP" >&2 || rm -rf "$TMP"' EXIT

SRC=${GANTRY_SRC:-$ROOT}
if [[ $SRC != "$ROOT" ]]; then
	mkdir -p "$TMP/src"
	git -C "$SRC" archive HEAD | tar -x -C "$TMP/src"
	mkdir -p "$TMP/src/bench/commit"
	cp "$ROOT/bench/commit/main.go" "$TMP/src/bench/commit/"
	SRC=$TMP/src
fi
(cd "$SRC" && go build -o "$TMP/commit" ./bench/commit)

tree=$TMP/tree
case $shape in
small | large) "$TMP/commit" -generate "$shape" -dir "$tree" ;;
*)
	sed -n '4,6s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
sync

for run in $(seq "$RUNS"); do
	rm -rf "$TMP/cp" "$TMP/cache"
	sync
	start=$(date +%s.%N)
	cp -a "$tree" "$TMP/cp" && sync
	cp_s=$(echo "$(date +%s.%N) - $start" | bc)
	commit_s=$("$TMP/commit" -dir "$tree" -cache "$TMP/cache")
	printf 'run %d  cp -a && sync: %.2f s  gantry commit: %.2f s\n' "$run" "$cp_s" "$commit_s"
done
