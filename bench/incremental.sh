#!/usr/bin/env bash
# Time a workspace's first build against a rebuild after editing one file: see
# bench/README.md.
#
#   bench/incremental.sh      a generated C project of FILES files (default 200), built
#                             from a workspace; then one file edited and built again
#
# Environment: FILES (200), JOBS (make -j, default: the number of CPUs), SANDBOX (host),
# GANTRY (default: build ./cmd/gantry), KEEP=1 keeps the temporary directory.
set -euo pipefail

FILES=${FILES:-200}
JOBS=${JOBS:-$(nproc)}
SANDBOX=${SANDBOX:-host}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-incremental.XXXXXX")
cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

if [[ -z ${GANTRY:-} ]]; then
	(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry)
	GANTRY=$TMP/gantry
fi

P=$TMP/project
mkdir -p "$P/elements" "$P/files/c/src"
printf 'name = "incr"\ndefault-targets = ["prog.toml"]\n' >"$P/project.toml"
cat >"$P/elements/prog.toml" <<'EOF'
kind = "manual"
[[sources]]
kind = "local"
path = "files/c"
[config]
build-commands = ["make -j%{max-jobs}"]
install-commands = ["mkdir -p %{install-root}/bin", "cp prog %{install-root}/bin/"]
EOF
cat >"$P/files/c/Makefile" <<'EOF'
SRCS := $(sort $(wildcard src/*.c))
OBJS := $(SRCS:.c=.o)
CFLAGS ?= -O2
prog: $(OBJS)
	@echo "LINK $@"
	@$(CC) -o $@ $(OBJS)
%.o: %.c
	@echo "CC $<"
	@$(CC) $(CFLAGS) -c -o $@ $<
EOF
# Each file: a few functions with loops, so that compiling it takes a little time.
for i in $(seq -w 1 "$FILES"); do
	{
		for j in 1 2 3 4 5 6 7 8; do
			echo "static int g${j}(int n) { int s = 0; for (int i = 0; i < n; i++) s += (i * $j) ^ (s >> 3); return s; }"
		done
		echo "int f$i(int n) { return g1(n) + g2(n) + g3(n) + g4(n) + g5(n) + g6(n) + g7(n) + g8(n); }"
	} >"$P/files/c/src/f$i.c"
done
echo 'int main(void) { return 0; }' >"$P/files/c/src/main.c"

g() { "$GANTRY" -C "$P" --cache-dir "$TMP/cache" "$@"; }
now() { date +%s.%N; }
count() { g artifact log prog.toml | grep -c '^CC ' || true; }

g workspace open prog.toml 2>/dev/null
t0=$(now)
g build --ui plain --sandbox "$SANDBOX" --max-jobs "$JOBS" 2>/dev/null
t1=$(now)
first=$(count)
echo "/* edited */" >>"$P/workspaces/prog/src/f001.c"
t2=$(now)
g build --ui plain --sandbox "$SANDBOX" --max-jobs "$JOBS" 2>/dev/null
t3=$(now)
second=$(count)
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v n="$FILES" -v f="$first" -v s="$second" 'BEGIN {
	printf "files %d\nfirst build   %.2fs (%d compiler invocations)\nrebuild       %.2fs (%d compiler invocations) after editing one file\nratio         %.1f%%\n",
		n, b - a, f, d - c, s, 100 * (d - c) / (b - a)
}'
