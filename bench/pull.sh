#!/usr/bin/env bash
# Pull of one artifact of N files (default 2,000 × 256 KiB, a tar source) from a local nginx
# (WebDAV), verified and durable, against curl ×8 downloading the same blobs from
# the same server (8 processes, each reusing its connection for its share):
# interleaved rounds, min / median wall (see bench/README.md).
#
#   bench/pull.sh [N]
#
# Environment: SIZE_KIB (256), ROUNDS (5), GANTRY=/path/to/gantry (default: built
# from this tree), BEFORE="/path/to/gantry …" (other binaries timed in the same
# rounds), KEEP=1.
set -euo pipefail

N=${1:-2000}
SIZE_KIB=${SIZE_KIB:-256}
ROUNDS=${ROUNDS:-5}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-pull-bench.XXXXXX")
NGINX_PID=
cleanup() {
	[[ -n $NGINX_PID ]] && kill "$NGINX_PID" 2>/dev/null || true
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
log() { echo "== $*" >&2; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[[ -x $NGINX ]] || { echo "pull.sh: apt-get install nginx" >&2; exit 1; }
if [[ -z ${GANTRY:-} ]]; then
	(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry)
	GANTRY=$TMP/gantry
fi

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
  sendfile on;
  client_body_temp_path $NG/tmp/body;
  proxy_temp_path $NG/tmp/proxy; fastcgi_temp_path $NG/tmp/fcgi; uwsgi_temp_path $NG/tmp/uwsgi; scgi_temp_path $NG/tmp/scgi;
  server {
    listen 127.0.0.1:$port;
    client_max_body_size 0;
    keepalive_requests 100000;
    location / { root $NG/root; dav_methods PUT DELETE; create_full_put_path on; }
  }
}
EOF
"$NGINX" -c "$NG/nginx.conf" -p "$NG" -e "$NG/logs/error.log" &
NGINX_PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
URL=http://127.0.0.1:$port/cache
printf '[[remote]]\nurl = "%s"\npush = true\n' "$URL" >"$TMP/remote.toml"

log "an import element of $N files of $SIZE_KIB KiB (a tar on the same nginx), pushed to nginx"
# The element's source is a tar whose ref is its hash: its key is computed without
# reading the files (a local source's key hashes every file in the session first,
# which is loading, not pulling).
P=$TMP/project
mkdir -p "$P/elements" "$NG/root/src"
printf 'name = "pullbench"\ndefault-targets = ["big.toml"]\n' >"$P/project.toml"
python3 - "$NG/root/src/files.tar" "$TMP/urls.sha" "$N" "$SIZE_KIB" <<'PY'
import hashlib, io, os, sys, tarfile
out, shas, n, kib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as t, open(shas, "w") as s:
    for i in range(n):
        data = os.urandom(kib * 1024)
        info = tarfile.TarInfo("f%05d" % i)
        info.size, info.mode = len(data), 0o644
        t.addfile(info, io.BytesIO(data))
        s.write(hashlib.sha256(data).hexdigest() + "\n")
PY
ref=$(sha256sum "$NG/root/src/files.tar" | cut -d' ' -f1)
printf 'kind = "import"\n[[sources]]\nkind = "tar"\nurl = "http://127.0.0.1:%s/src/files.tar"\nref = "%s"\n' "$port" "$ref" >"$P/elements/big.toml"
GANTRY_CACHE_DIR=$TMP/cacheA "$GANTRY" -C "$P" --config "$TMP/remote.toml" --ui plain build >"$TMP/build.log" 2>&1 ||
	{ cat "$TMP/build.log" >&2; exit 1; }
rm "$NG/root/src/files.tar"
awk -v u="$URL" '{print u "/cas/" $1}' "$TMP/urls.sha" >"$TMP/urls"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$(head -1 "$TMP/urls")") == 200 ]] || { echo "pull.sh: the push left no blobs on nginx" >&2; exit 1; }
rm -rf "$TMP/cacheA"

# timed VAR CMD...: runs CMD, appends its wall time (s) to the array VAR.
timed() {
	local var=$1 t0 t1
	shift
	t0=$(date +%s.%N)
	"$@"
	t1=$(date +%s.%N)
	eval "$var+=(\$(echo \"\$t1 - \$t0\" | bc -l))"
}
pull_with() { # BINARY: also logs its CPU time (user + system, jobs included)
	rm -rf "$TMP/cacheB"
	GANTRY_CACHE_DIR=$TMP/cacheB /usr/bin/time -f "cpu %U+%S s" -o "$TMP/cpu" "$1" -C "$P" --config "$TMP/remote.toml" --ui plain pull big.toml >/dev/null 2>"$TMP/pull.err" ||
		{ cat "$TMP/pull.err" >&2; exit 1; }
	log "$1: $(cat "$TMP/cpu")"
}
curl8() {
	rm -rf "$TMP/curl"
	mkdir -p "$TMP/curl"
	xargs -P 8 -n $(((N + 7) / 8)) curl -s --fail --remote-name-all --output-dir "$TMP/curl" <"$TMP/urls"
}
curl8sync() { curl8 && sync -f "$TMP/curl"; }
stats() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {printf "%.3f / %.3f s", a[1], a[int((NR+1)/2)]}'; }

new=() curl=() curls=()
read -ra others <<<"${BEFORE:-}"
for i in "${!others[@]}"; do eval "other$i=()"; done
for r in $(seq "$ROUNDS"); do
	log "round $r (load $(cut -d' ' -f1-3 /proc/loadavg))"
	timed curl curl8
	log "curl ×8 ${curl[-1]} s"
	timed new pull_with "$GANTRY"
	log "gantry pull ${new[-1]} s"
	for i in "${!others[@]}"; do
		timed "other$i" pull_with "${others[$i]}"
		eval "log \"${others[$i]} \${other$i[-1]} s\""
	done
	timed curls curl8sync
done
mib=$((N * SIZE_KIB / 1024))
echo "# pull of one artifact of $N × $SIZE_KIB KiB ($mib MiB) from nginx, $ROUNDS rounds, min / median; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "curl ×8:                $(stats "${curl[@]}")"
echo "curl ×8 + sync:         $(stats "${curls[@]}")"
echo "gantry pull:            $(stats "${new[@]}")"
for i in "${!others[@]}"; do
	eval "times=(\"\${other$i[@]}\")"
	echo "gantry pull (${others[$i]}): $(stats "${times[@]}")"
done
true
