#!/usr/bin/env bash
# `gantry cache serve` throughput (see bench/README.md): 8 local clients reading small
# blobs (req/s) and large blobs (MB/s) over HTTP and gRPC, writing small and large blobs,
# next to nginx serving the same files; the server's CPU time (nginx's workers too) per
# request and per MB; and the latency of a small client while another pushes 1 GiB
# blobs (fair admission).
#
#   bench/serve.sh
#
# Environment: SMALL_N (2000 blobs of 4 KiB), LARGE_N (8 blobs), LARGE_MIB (64),
# TIME (10s per run), CLIENTS (8), BIG_MIB (1024: the blob the background pusher uploads), KEEP=1,
# READS=1 (the read lines only), GANTRY (a gantry binary to serve with; default: built here).
set -euo pipefail

SMALL_N=${SMALL_N:-2000}
LARGE_N=${LARGE_N:-8}
LARGE_MIB=${LARGE_MIB:-64}
TIME=${TIME:-10s}
CLIENTS=${CLIENTS:-8}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gantry-serve-bench.XXXXXX")
SERVE_PID= NGINX_PID=
cleanup() {
	[[ -n $SERVE_PID ]] && kill "$SERVE_PID" 2>/dev/null || true
	[[ -n $NGINX_PID ]] && kill "$NGINX_PID" 2>/dev/null || true
	if [[ ${KEEP:-0} == 1 ]]; then echo "kept $TMP" >&2; else chmod -R u+w "$TMP"; rm -rf "$TMP"; fi
}
trap cleanup EXIT
log() { echo "== $*" >&2; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[[ -x $NGINX ]] || { echo "serve.sh: apt-get install nginx" >&2; exit 1; }

(cd "$ROOT" && go build -o "$TMP/gantry" ./cmd/gantry && go build -o "$TMP/serveload" ./bench/serveload)
[[ -n ${GANTRY:-} ]] && cp "$GANTRY" "$TMP/gantry"
STORE=$TMP/store
chmod 755 "$TMP" # nginx workers run as another user
log "writing $SMALL_N blobs of 4 KiB and $LARGE_N of $LARGE_MIB MiB into $STORE"
python3 - "$STORE" "$SMALL_N" "$LARGE_N" "$LARGE_MIB" "$TMP" <<'PY'
import hashlib, os, sys
store, small, large, mib, tmp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def put(data, out):
    h = hashlib.sha256(data).hexdigest()
    d = os.path.join(store, "cas", h[:2]); os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, h), "wb") as f: f.write(data)
    out.write(f"{h} {len(data)}\n")
with open(os.path.join(tmp, "small.txt"), "w") as out:
    for _ in range(small): put(os.urandom(4096), out)
with open(os.path.join(tmp, "large.txt"), "w") as out:
    for _ in range(large): put(os.urandom(mib << 20), out)
PY
echo "bench-token bench" > "$TMP/tokens"
echo "bench-token" > "$TMP/client-token"

"$TMP/gantry" cache serve --dir "$STORE" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --token-file "$TMP/tokens" \
	--max-streams "$CLIENTS" >"$TMP/addrs" 2>"$TMP/serve.log" &
SERVE_PID=$!
for _ in $(seq 100); do [[ $(wc -l <"$TMP/addrs") -ge 2 ]] && break; sleep 0.1; done
HTTP=$(awk '$1=="http"{print $2}' "$TMP/addrs")
GRPC=$(awk '$1=="grpc"{print $2}' "$TMP/addrs")

NPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$TMP/nginx"
cat >"$TMP/nginx/nginx.conf" <<CONF
worker_processes 2;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
daemon off;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $TMP/nginx/body;
  proxy_temp_path $TMP/nginx/proxy; fastcgi_temp_path $TMP/nginx/fcgi;
  uwsgi_temp_path $TMP/nginx/uwsgi; scgi_temp_path $TMP/nginx/scgi;
  sendfile on;
  server {
    listen 127.0.0.1:$NPORT;
    location ~ ^/cas/(..)(.*)\$ { alias $STORE/cas/\$1/\$1\$2; }
  }
}
CONF
"$NGINX" -c "$TMP/nginx/nginx.conf" &
NGINX_PID=$!
sleep 0.5

# cpu PID: the CPU ticks of a server, its worker processes included (nginx's).
cpu() {
	local t=0 p
	for p in "$1" $(pgrep -P "$1" || true); do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
	echo "$t"
}
HZ=$(getconf CLK_TCK)
measure() { # label, serveload args... ; prints the result and the server's CPU per request and per MB
	local label=$1; shift
	local pid=$SERVE_PID c0 out c1 bytes reqs
	[[ $label == nginx* ]] && pid=$NGINX_PID
	c0=$(cpu "$pid")
	out=$("$TMP/serveload" -clients "$CLIENTS" -time "$TIME" -token-file "$TMP/client-token" "$@")
	c1=$(cpu "$pid")
	bytes=${out##*bytes=}
	reqs=$(sed -n 's/.* \([0-9]*\) requests in .*/\1/p' <<<"$out")
	printf '%-28s %s' "$label" "${out% bytes=*}"
	awk -v t=$((c1 - c0)) -v hz="$HZ" -v b="$bytes" -v r="${reqs:-0}" \
		'BEGIN { printf "  [server CPU %.2f s, %.1f µs/request, %.1f ms/MB]", t/hz, (r>0 ? 1e6*t/hz/r : 0), (b>0 ? 1000*t/hz/(b/1e6) : 0) }'
	echo
}
measure "gantry http small read" -url "http://$HTTP" -op read -blobs "$TMP/small.txt"
measure "gantry grpc small read" -url "grpc://$GRPC" -op read -blobs "$TMP/small.txt"
measure "nginx small read" -url "http://127.0.0.1:$NPORT" -op read -blobs "$TMP/small.txt"
measure "gantry http large read" -url "http://$HTTP" -op read -blobs "$TMP/large.txt"
measure "gantry grpc large read" -url "grpc://$GRPC" -op read -blobs "$TMP/large.txt"
measure "nginx large read" -url "http://127.0.0.1:$NPORT" -op read -blobs "$TMP/large.txt"
[[ ${READS:-0} == 1 ]] && exit 0
measure "gantry http small write" -url "http://$HTTP" -op write -size 4096
measure "gantry grpc small write" -url "grpc://$GRPC" -op write -size 4096
measure "gantry http large write" -url "http://$HTTP" -op write -size $((LARGE_MIB << 20))
measure "gantry grpc large write" -url "grpc://$GRPC" -op write -size $((LARGE_MIB << 20))
# Fairness: small reads and writes while one more client pushes BIG_MIB blobs.
BIG=$(( ${BIG_MIB:-1024} << 20 ))
measure "gantry http small write" -url "http://$HTTP" -op write -size 4096 -clients 1
measure "  + 1 client pushing big" -url "http://$HTTP" -op write -size 4096 -clients 1 -bg-write "$BIG"
measure "gantry grpc small write" -url "grpc://$GRPC" -op write -size 4096 -clients 1
measure "  + 1 client pushing big" -url "grpc://$GRPC" -op write -size 4096 -clients 1 -bg-write "$BIG"
