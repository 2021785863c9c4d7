#!/usr/bin/env bash
# Time staging a big dependency: see bench/README.md.
#
#   bench/staging.sh [RUNS]   build app.toml RUNS times (default 5) against a cached
#                             dependency of FILES small files and BIG big ones, and
#                             `cp -a` the dependency's tree as many times, interleaved
#
# Environment: FILES (2000 files of 4 KiB), BIG (4 files of 32 MiB), EXECS (0 executables
# of 64 KiB in bin/), SANDBOX (host; bwrap also puts a static busybox and a bin/sh link to
# it in the dependency, a busybox-like base),
# GANTRY="/path/a /path/b" times each of these binaries (default: build ./cmd/gantry),
# KEEP=1 keeps the temporary directory.
set -euo pipefail

RUNS=${1:-5}
FILES=${FILES:-2000}
BIG=${BIG:-4}
EXECS=${EXECS:-0}
SANDBOX=${SANDBOX:-host}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-staging.XXXXXX")
cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

if [[ -z ${GANTRY:-} ]]; then
	(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry)
	GANTRY=$TMP/gantry
fi

P=$TMP/project
mkdir -p "$P/elements" "$P/files/dep/lib" "$P/files/dep/big" "$P/files/dep/bin"
cat >"$P/project.toml" <<'EOF'
name = "staging"
default-targets = ["app.toml"]
EOF
cat >"$P/elements/dep.toml" <<'EOF'
kind = "import"
[[sources]]
kind = "local"
path = "files/dep"
EOF
cat >"$P/elements/app.toml" <<'EOF'
kind = "manual"
depends = ["dep.toml"]
[config]
build-commands = ["true"]
EOF
for ((i = 0; i < FILES; i++)); do
	head -c 4096 /dev/urandom >"$P/files/dep/lib/f$i"
done
for ((i = 0; i < BIG; i++)); do
	head -c $((32 << 20)) /dev/urandom >"$P/files/dep/big/b$i"
done
for ((i = 0; i < EXECS; i++)); do
	head -c 65536 /dev/urandom >"$P/files/dep/bin/x$i"
	chmod 755 "$P/files/dep/bin/x$i"
done
if [[ $SANDBOX == bwrap ]]; then
	bb=$(command -v busybox) || {
		echo "staging.sh: SANDBOX=bwrap needs busybox (apt-get install busybox-static)" >&2
		exit 2
	}
	cp "$bb" "$P/files/dep/bin/busybox"
	ln -s busybox "$P/files/dep/bin/sh"
	ln -s busybox "$P/files/dep/bin/true"
fi
echo "# dependency: $FILES x 4 KiB + $BIG x 32 MiB + $EXECS executables of 64 KiB; sandbox $SANDBOX; $RUNS builds of app.toml each" >&2

# ms of the build's staging, from its log: from "staging N dependencies" to the
# sandbox line, which comes once the sysroot is staged (and, under auto, restaged).
staged_ms() {
	"$1" -C "$P" --cache-dir "$2" artifact log app.toml | awk '
		function ms(t) { split(substr(t, 2, 12), a, ":"); return (a[1] * 3600 + a[2] * 60 + a[3]) * 1000 }
		/\[status\] staging [0-9]+ dependenc/ && !start { start = ms($1) }
		/ sandbox: / && start { printf "%.0f\n", ms($1) - start; exit }'
}
stats() { # min / median of the arguments
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%s / %s", v[1], v[int((NR + 1) / 2)] }'
}

bins=($GANTRY)
for bin in "${bins[@]}"; do
	"$bin" -C "$P" --cache-dir "$TMP/cache-$(basename "$bin")" build --ui plain --sandbox "$SANDBOX" dep.toml >/dev/null 2>&1
done
declare -A wall stage
cps=()
for ((r = 0; r < RUNS; r++)); do
	for bin in "${bins[@]}"; do
		cache=$TMP/cache-$(basename "$bin")
		"$bin" -C "$P" --cache-dir "$cache" artifact delete app.toml >/dev/null 2>&1 || true
		start=$(date +%s.%N)
		"$bin" -C "$P" --cache-dir "$cache" build --ui plain --sandbox "$SANDBOX" app.toml >/dev/null 2>&1
		end=$(date +%s.%N)
		wall[$bin]+="$(printf '%.3f' "$(echo "$end - $start" | bc)") "
		stage[$bin]+="$(staged_ms "$bin" "$cache") "
	done
	# cp -a of the same tree, on the same filesystem, after removing the last copy
	# (a build removes its sysroot when it ends).
	rm -rf "$TMP/cp-a"
	start=$(date +%s.%N)
	cp -a "$P/files/dep" "$TMP/cp-a"
	end=$(date +%s.%N)
	cps+=("$(echo "($end - $start) * 1000 / 1" | bc)")
done
printf '%-32s %-24s %-24s %s\n' binary "build wall (s)" "staging (ms)" "staging / cp -a (medians)"
cpmed=$(printf '%s\n' "${cps[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
for bin in "${bins[@]}"; do
	read -ra ss <<<"${stage[$bin]}"
	smed=$(printf '%s\n' "${ss[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	# shellcheck disable=SC2086
	printf '%-32s %-24s %-24s %s\n' "$bin" "$(stats ${wall[$bin]})" "$(stats "${ss[@]}")" "$(printf "%.2f" "$(echo "scale=3; $smed / $cpmed" | bc)")"
done
printf '%-32s %-24s %-24s\n' "cp -a" "" "$(stats "${cps[@]}")"
printf '# runs: build wall %s\n' "$(for bin in "${bins[@]}"; do printf '[%s] ' "${wall[$bin]% }"; done)" >&2
printf '# runs: staging ms %s; cp -a ms %s\n' "$(for bin in "${bins[@]}"; do printf '[%s] ' "${stage[$bin]% }"; done)" "${cps[*]}" >&2
