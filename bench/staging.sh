#!/usr/bin/env bash
# Time staging a big dependency: see bench/README.md.
#
#   bench/staging.sh [RUNS]   build app.toml RUNS times (default 5) against a cached
#                             dependency of FILES small files and BIG big ones
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

printf '%-40s %s\n' binary "wall (s) per build of app.toml"
for bin in $GANTRY; do
	cache=$TMP/cache-$(basename "$bin")
	g() { "$bin" -C "$P" --cache-dir "$cache" "$@"; }
	g build --ui plain --sandbox "$SANDBOX" dep.toml >/dev/null 2>&1
	times=()
	for ((r = 0; r < RUNS; r++)); do
		g artifact delete app.toml >/dev/null 2>&1 || true
		start=$(date +%s.%N)
		g build --ui plain --sandbox "$SANDBOX" app.toml >/dev/null 2>&1
		end=$(date +%s.%N)
		times+=("$(echo "$end - $start" | bc)")
	done
	printf '%-40s %s\n' "$bin" "${times[*]}"
done
