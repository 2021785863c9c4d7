#!/usr/bin/env bash
# Remote artifact cache figures, side by side in one run (see bench/README.md):
#   - the N-element synthetic project (default 2000): full local build, null build
#     without and with a remote configured, push of everything to a local nginx (WebDAV),
#     then `build` into an empty cache that pulls everything (wall time, jobs spawned);
#   - a 1 GiB artifact (4 files of 256 MiB): pull throughput with digest verification,
#     next to `sha256sum` of the same files and `curl -o` of the same blobs from the
#     same server.
#
#   bench/remote.sh [N]
#
# Environment: JOBS (default 2), BIG_MIB (1024), GANTRY=/path/to/gantry, KEEP=1.
set -euo pipefail

N=${1:-2000}
JOBS=${JOBS:-2}
BIG_MIB=${BIG_MIB:-1024}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-remote-bench.XXXXXX")
NGINX_PID=
cleanup() {
	[[ -n $NGINX_PID ]] && kill "$NGINX_PID" 2>/dev/null || true
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
log() { echo "== $*" >&2; }
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || { echo "remote.sh: apt-get install nginx" >&2; exit 1; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

if [[ -z ${GANTRY:-} ]]; then
	log "building gantry"
	(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry && go build -o "$TMP/gen" ./bench/gen)
	GANTRY=$TMP/gantry
else
	(cd "$ROOT" && go build -o "$TMP/gen" ./bench/gen)
fi

# nginx with WebDAV PUT on a free port, everything under $TMP/nginx.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
NG=$TMP/nginx
mkdir -p "$NG/root" "$NG/logs" "$NG/tmp"
user=""
[[ $(id -u) == 0 ]] && user="user root;"
cat >"$NG/nginx.conf" <<EOF
daemon off;
$user
pid $NG/nginx.pid;
error_log $NG/logs/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $NG/tmp/body;
  proxy_temp_path $NG/tmp/proxy; fastcgi_temp_path $NG/tmp/fcgi; uwsgi_temp_path $NG/tmp/uwsgi; scgi_temp_path $NG/tmp/scgi;
  server {
    listen 127.0.0.1:$port;
    client_max_body_size 0;
    location / { root $NG/root; dav_methods PUT DELETE; create_full_put_path on; }
  }
}
EOF
"$NGINX" -c "$NG/nginx.conf" -p "$NG" -e "$NG/logs/error.log" &
NGINX_PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
URL=http://127.0.0.1:$port/cache

FMT='%-44s %9s %s\n'
rows=()
row() {
	# shellcheck disable=SC2059
	rows+=("$(printf "$FMT" "$@")")
	printf "$FMT" "$@" >&2
}
# timed CMD...: runs CMD, sets $secs to its wall time.
timed() {
	local t0 t1
	t0=$(date +%s.%N)
	"$@"
	t1=$(date +%s.%N)
	secs=$(echo "$t1 - $t0" | bc -l | xargs printf '%.2f')
}
# jobs FILE: job-start events by action in a --ui json log.
jobs_of() {
	grep -o '"event":"job-start","action":"[a-z]*"' "$1" | sed 's/.*"action":"//; s/"//' | sort | uniq -c | awk '{printf "%s %s=%s", sep, $2, $1; sep=","} END {if (NR==0) printf "none"}'
}

P=$TMP/project
"$TMP/gen" -out "$P" -n "$N" >&2
EMPTY_CONFIG=$TMP/empty.toml
: >"$EMPTY_CONFIG"
REMOTE_CONFIG=$TMP/remote.toml
printf '[[remote]]\nurl = "%s"\npush = true\n' "$URL" >"$REMOTE_CONFIG"
g() { "$GANTRY" -C "$P" --ui json "$@"; }

log "full local build of $N elements"
export GANTRY_CACHE_DIR=$TMP/cacheA
timed g --config "$EMPTY_CONFIG" build --builders "$JOBS" 2>"$TMP/full.json"
row "build, local, empty cache ($N elements)" "$secs" "jobs: $(jobs_of "$TMP/full.json")"
for i in 1 2 3; do
	timed g --config "$EMPTY_CONFIG" build 2>"$TMP/null.json"
	row "null build, no remote (run $i)" "$secs" "jobs: $(jobs_of "$TMP/null.json")"
	timed g --config "$REMOTE_CONFIG" build 2>"$TMP/nullr.json"
	row "null build, remote configured (run $i)" "$secs" "jobs: $(jobs_of "$TMP/nullr.json")"
done
log "push everything to nginx"
timed g --config "$REMOTE_CONFIG" push --deps all --pushers 8 2>"$TMP/push.json"
row "push --deps all to nginx" "$secs" "jobs: $(jobs_of "$TMP/push.json")"
log "build into an empty cache, pulling everything"
export GANTRY_CACHE_DIR=$TMP/cacheB
timed g --config "$REMOTE_CONFIG" build --fetchers 8 2>"$TMP/pull.json"
row "build, empty cache, remote has everything" "$secs" "jobs: $(jobs_of "$TMP/pull.json")"
rm -rf "$TMP/cacheA" "$TMP/cacheB"

log "a ${BIG_MIB} MiB artifact: 4 files"
B=$TMP/big
mkdir -p "$B/elements" "$B/files"
printf 'name = "big"\ndefault-targets = ["big.toml"]\n' >"$B/project.toml"
printf 'kind = "import"\n[[sources]]\nkind = "local"\npath = "files"\n' >"$B/elements/big.toml"
for i in 1 2 3 4; do head -c $((BIG_MIB / 4))M /dev/urandom >"$B/files/part$i"; done
export GANTRY_CACHE_DIR=$TMP/bigA
"$GANTRY" -C "$B" --config "$REMOTE_CONFIG" --ui plain build 2>/dev/null
export GANTRY_CACHE_DIR=$TMP/bigB
sync
timed "$GANTRY" -C "$B" --config "$REMOTE_CONFIG" --ui json pull big.toml 2>"$TMP/bigpull.json"
mb=$(echo "$BIG_MIB * 1.048576 / $secs" | bc -l | xargs printf '%.0f')
row "pull ${BIG_MIB} MiB artifact (verified)" "$secs" "$mb MB/s"
timed sha256sum "$B"/files/part* >/dev/null
mb=$(echo "$BIG_MIB * 1.048576 / $secs" | bc -l | xargs printf '%.0f')
row "sha256sum of the same files" "$secs" "$mb MB/s"
mkdir -p "$TMP/curl"
hashes=$(for f in "$B"/files/part*; do sha256sum "$f" | cut -d' ' -f1; done)
fetch_all() {
	local pids=()
	for h in $hashes; do
		curl -s -o "$TMP/curl/$h" "$URL/cas/$h" &
		pids+=($!)
	done
	wait "${pids[@]}"
}
rm -rf "$TMP/curl"/*
timed fetch_all
mb=$(echo "$BIG_MIB * 1.048576 / $secs" | bc -l | xargs printf '%.0f')
row "curl -o of the same blobs (4 in parallel)" "$secs" "$mb MB/s"

echo "# n=$N $(grep -o '"edges": *[0-9]*' "$P/graph.json" | tr -d '" ') jobs=$JOBS host=$(uname -sr) cpus=$(nproc)"
printf "$FMT" "step" "wall (s)" "notes"
printf '%s\n' "${rows[@]}"
