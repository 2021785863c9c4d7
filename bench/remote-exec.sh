#!/usr/bin/env bash
# Remote execution against local builds, in interleaved rounds (see bench/README.md):
#   - N elements (default 200) of SLOW (default 0.5) s builds: remote with remote-jobs =
#     JOBS (default 8), against the same built locally under bubblewrap with --builders
#     LOCAL (default 2; 4 with SERVER=buildgrid);
#   - the same N elements of ~1 ms builds (`true`): the wall time per element, remote
#     and local, and where a remote build's time goes (its log's timestamps).
# SERVER=bazel (default): Bazel's remote worker with --jobs=JOBS; the builds use
# wrap = "bwrap". SERVER=buildgrid: BuildGrid 0.9.1 (started by internal/testreapi's
# helper through bench/bgserve's TestServe) with WORKERS (default 2) `gantry worker`s
# of SLOTS (default 2) slots each, --sandbox bwrap (the input root is /: no wrap).
# Each element depends on a sysroot of two busybox copies, sh and sleep (Bazel's worker
# drops symlinks of an input root). Every run starts from an empty local cache and
# builds actions the server has never seen (a per-run salt in the command).
#
#   bench/remote-exec.sh [N]
#   SERVER=buildgrid bench/remote-exec.sh [N]
#
# Environment: ROUNDS (default 3), JOBS (8), LOCAL (2, buildgrid 4), SLOW (0.5),
# WORKERS (2), SLOTS (2), POLL (BuildGrid's poll, bot-poll and job-assignment intervals,
# a Go duration; default BuildGrid's 1 s), GANTRY=/path/to/gantry, WORKER=dir of Bazel's worker's
# compiled classes (default the newest $XDG_CACHE_HOME/gantry-tests/bazel-worker-*:
# `go test -run TestBazelWorker ./internal/testreapi` compiles it), KEEP=1 keeps the
# directory.
# Needs bubblewrap and a static busybox; Bazel's worker java and
# /usr/share/bazel/A-server.jar; BuildGrid its venv and PostgreSQL (.ci/run).
set -euo pipefail

N=${1:-200}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-8}
SERVER=${SERVER:-bazel}
case $SERVER in
bazel) LOCAL=${LOCAL:-2} ;;
buildgrid) LOCAL=${LOCAL:-4} ;;
*) echo "remote-exec.sh: SERVER=$SERVER: bazel or buildgrid" >&2; exit 2 ;;
esac
WORKERS=${WORKERS:-2}
SLOTS=${SLOTS:-2}
SLOW=${SLOW:-0.5}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-remote-exec.XXXXXX")
WORKER_PID=
SERVER_PID=
BOT_PIDS=()
cleanup() {
	[[ -n $WORKER_PID ]] && kill -- -"$WORKER_PID" 2>/dev/null || true
	for p in "${BOT_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${BOT_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	# TestServe stops BuildGrid and its PostgreSQL when it ends.
	[[ -n $SERVER_PID ]] && { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true; }
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
log() { echo "== $*" >&2; }

JAR=/usr/share/bazel/A-server.jar
if [[ $SERVER == bazel ]]; then
	WORKER=${WORKER:-$(ls -dt "${XDG_CACHE_HOME:-$HOME/.cache}"/gantry-tests/bazel-worker-* 2>/dev/null | head -n 1)}
	[[ -n $WORKER && -f $JAR ]] || { echo "remote-exec.sh: no compiled worker: run go test -run TestBazelWorker ./internal/testreapi" >&2; exit 1; }
fi
BUSYBOX=$(command -v busybox) || { echo "remote-exec.sh: apt-get install busybox-static" >&2; exit 1; }
command -v bwrap >/dev/null || { echo "remote-exec.sh: apt-get install bubblewrap" >&2; exit 1; }

if [[ -z ${GANTRY:-} ]]; then
	log "building gantry"
	(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry)
	GANTRY=$TMP/gantry
fi

# project DIR CMD: N elements running CMD (and a comment naming the run's salt and
# the element, so that no two actions are alike), each on the busybox sysroot.
project() {
	local p=$1 cmd=$2
	mkdir -p "$p/elements" "$p/sysroot/bin" "$p/sysroot/dev" "$p/sysroot/proc" "$p/sysroot/tmp"
	for a in sh sleep; do cp "$BUSYBOX" "$p/sysroot/bin/$a"; done
	printf 'name = "rexec"\nelement-path = "elements"\ndefault-targets = ["all.toml"]\n\n[variables]\nsalt = "0"\n\n[remote-execution]\nremote-jobs = %d\n' "$JOBS" >"$p/project.toml"
	# Bazel's worker runs commands in a plain directory.
	case $SERVER in
	bazel) echo 'wrap = "bwrap"' >>"$p/project.toml" ;;
	esac
	printf 'kind = "import"\n[[sources]]\nkind = "local"\npath = "sysroot"\n' >"$p/elements/sysroot.toml"
	local all=()
	for i in $(seq -w 1 "$N"); do
		printf 'kind = "manual"\nbuild-depends = ["sysroot.toml"]\n\n[config]\nbuild-commands = ["%s # %%{salt} e%s"]\n' "$cmd" "$i" >"$p/elements/e$i.toml"
		all+=("\"e$i.toml\"")
	done
	printf 'kind = "stack"\ndepends = [%s]\n' "$(IFS=,; echo "${all[*]}")" >"$p/elements/all.toml"
}
project "$TMP/slow" "sleep $SLOW"
project "$TMP/fast" "true"

if [[ $SERVER == bazel ]]; then
	# The worker listens on every interface; gantry connects to 127.0.0.1 only.
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	mkdir -p "$TMP/worker/work" "$TMP/worker/cas"
	setsid java -cp "$WORKER:$JAR" com.google.devtools.build.remote.worker.RemoteWorker \
		--work_path="$TMP/worker/work" --cas_path="$TMP/worker/cas" --listen_port="$port" --jobs="$JOBS" \
		>"$TMP/worker/log" 2>&1 &
	WORKER_PID=$!
	for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
	URL=grpc://127.0.0.1:$port
else
	log "starting BuildGrid"
	mkdir -p "$TMP/bgd"
	(cd "$ROOT" && go test -c -o "$TMP/bgserve" ./bench/bgserve)
	GANTRY_BENCH_BUILDGRID_DIR=$TMP/bgd GANTRY_BENCH_BUILDGRID_POLL=${POLL:-} "$TMP/bgserve" -test.run '^TestServe$' -test.timeout 0 >"$TMP/bgd/log" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 1200); do [[ -f $TMP/bgd/url ]] && break; kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
	[[ -f $TMP/bgd/url ]] || { echo "remote-exec.sh: BuildGrid did not start:" >&2; tail -n 20 "$TMP/bgd/log" >&2; exit 1; }
	URL=$(cat "$TMP/bgd/url")
	for i in $(seq "$WORKERS"); do
		"$GANTRY" worker --bots "$URL" --bot-id "bench-$i" --slots "$SLOTS" --sandbox bwrap \
			--work-dir "$TMP/bot$i" >"$TMP/bot$i.log" 2>&1 &
		BOT_PIDS+=($!)
	done
	for i in $(seq "$WORKERS"); do
		for _ in $(seq 600); do grep -q "bot session " "$TMP/bot$i.log" 2>/dev/null && break; sleep 0.1; done
		grep -q "bot session " "$TMP/bot$i.log" || { echo "remote-exec.sh: gantry worker $i has no bot session:" >&2; cat "$TMP/bot$i.log" >&2; exit 1; }
	done
fi

# run NAME PROJECT ARGS...: one timed build of PROJECT from an empty cache with a new
# salt; prints "NAME wall cpu" (cpu: gantry and its children, not the worker's).
run() {
	local name=$1 p=$2 salt
	shift 2
	salt=$name-$RANDOM$RANDOM
	sed -i "s/^salt = .*/salt = \"$salt\"/" "$p/project.toml"
	/usr/bin/time -f "%e %U %S" -o "$TMP/time" "$GANTRY" -C "$p" --cache-dir "$TMP/cache-$salt" --ui json build "$@" \
		>/dev/null 2>"$TMP/$name.json" || { echo "$name failed:" >&2; tail -n 5 "$TMP/$name.json" >&2; exit 1; }
	awk -v n="$name" '{ printf "%s %.2f %.2f\n", n, $1, $2 + $3 }' "$TMP/time"
	LASTCACHE=$TMP/cache-$salt
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
	rm -rf "$TMP"/cache-*
	run "local-slow" "$TMP/slow" --builders "$LOCAL" --sandbox bwrap
	run "remote-slow" "$TMP/slow" --remote-executor "$URL"
	run "local-fast" "$TMP/fast" --builders "$LOCAL" --sandbox bwrap
	run "remote-fast" "$TMP/fast" --remote-executor "$URL"
done | tee "$TMP/runs" >&2

case $SERVER in
bazel) where="Bazel's worker --jobs=$JOBS" ;;
buildgrid) where="BuildGrid + $WORKERS gantry workers x $SLOTS slots" ;;
esac
echo "# n=$N rounds=$ROUNDS remote: $where, remote-jobs=$JOBS; local: builders=$LOCAL; slow=${SLOW}s host=$(uname -srm) cpus=$(nproc)"
echo "# load average (1, 5, 15 min) before: $load0, after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# run            wall min / median (s)   cpu min / median (s)   wall per element min / median (ms)"
# stats COLUMN NAME [SCALE]: "min / median" of a column of NAME's runs, times SCALE.
stats() {
	awk -v t="$2" -v c="$1" '$1 == t { print $c }' "$TMP/runs" | sort -n |
		awk -v s="${3:-1}" -v f="${4:-%6.2f}" '{ v[NR] = $1 * s } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf f " / " f, v[1], m }'
}
for t in local-slow remote-slow local-fast remote-fast; do
	printf "%-14s  %s            %s            %s\n" "$t" "$(stats 2 "$t")" "$(stats 3 "$t")" "$(stats 2 "$t" "$(awk -v n="$N" 'BEGIN { print 1000 / n }')" "%6.1f")"
done

# Where a remote build's time goes: the timestamps of its job logs (the last round's
# fast remote run), from the remote slot's gate opening to the job's end; median and
# total over the N element builds.
python3 - "$TMP"/cache-remote-fast-*/logs/rexec/e*-build.log <<'PY'
import re, statistics, sys
marks = [("[gate] opened", "dial the services, store the sources"),
         ("building remotely on", "merge the input root, action cache lookup"),
         ("[status] uploading inputs", "upload, Execute until the result"),
         ("[status] fetching outputs", "fetch the outputs"),
         ("[status] caching artifact", "cache the artifact"), ("[success]", None)]
d = {m: [] for m, _ in marks}
for f in sys.argv[1:]:
    t = {}
    for line in open(f):
        m = re.match(r"\[(\d+):(\d+):(\d+\.\d+)\] (.*)", line)
        if m:
            s = 3600 * int(m[1]) + 60 * int(m[2]) + float(m[3])
            for mark, _ in marks:
                if m[4].startswith(mark):
                    t.setdefault(mark, s)
    for (a, _), (b, _) in zip(marks, marks[1:]):
        if a in t and b in t:
            d[a].append(t[b] - t[a])
print("# remote, ~1 ms builds: a build job after its slot   median (ms)   sum over jobs (s)")
for mark, what in marks[:-1]:
    if d[mark]:
        print("%-50s %10.1f %15.2f" % (what, 1000 * statistics.median(d[mark]), sum(d[mark])))
PY
