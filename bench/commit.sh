#!/usr/bin/env bash
# Committing an install root to the cache, beside `cp -a && sync` of the same tree:
# "store" copies the tree into the cache (StoreTree), "take" commits it as a build job
# does its install root (TakeTree: copied into the cache's tmp/ first, not timed and not
# synced, then its files moved in; the commit's syncfs flushes their data). See
# bench/README.md.
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
	if ! grep -q 'func (c \*Cache) TakeTree' "$TMP/src/cache/"*.go; then
		sed -i 's/store = c.TakeTree/fmt.Fprintln(os.Stderr, "commit: -take: this cache package has no TakeTree"); os.Exit(2)/' "$TMP/src/bench/commit/main.go"
		NO_TAKE=1
	fi
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
	store_s=$("$TMP/commit" -dir "$tree" -cache "$TMP/cache")
	take_s="n/a (no TakeTree)"
	if [[ -z ${NO_TAKE:-} ]]; then
		rm -rf "$TMP/cache"
		sync
		take_s="$("$TMP/commit" -take -dir "$tree" -cache "$TMP/cache") s"
	fi
	printf 'run %d  cp -a && sync: %.2f s  gantry store: %s s  gantry take: %s\n' "$run" "$cp_s" "$store_s" "$take_s"
done
