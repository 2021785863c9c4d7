#!/usr/bin/env bash
# Fetch benchmark: N tarballs of 1 MiB served from 127.0.0.1, fetched with --fetchers 10
# and --fetchers 1, each into a fresh cache. Usage: bench/fetch.sh [N]
# GANTRY=/path/to/gantry uses that binary instead of building ./cmd/gantry.
set -euo pipefail
N=${1:-100}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/gantry-fetchbench.XXXXXX)
trap 'kill $server 2>/dev/null || true; rm -rf "$tmp"' EXIT
gantry=${GANTRY:-}
if [[ -z $gantry ]]; then
  (cd "$root" && go build -o "$tmp/gantry" ./cmd/gantry)
  gantry=$tmp/gantry
fi
mkdir -p "$tmp/www" "$tmp/project/elements"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo 'name = "fetchbench"' > "$tmp/project/project.toml"
for i in $(seq -w 1 "$N"); do
  mkdir -p "$tmp/src/$i"
  head -c 1048576 /dev/urandom > "$tmp/src/$i/blob"
  tar -cf "$tmp/www/t$i.tar" -C "$tmp/src/$i" blob
  sum=$(sha256sum "$tmp/www/t$i.tar" | cut -d' ' -f1)
  printf 'kind = "import"\n[[sources]]\nkind = "tar"\nurl = "http://127.0.0.1:%s/t%s.tar"\nref = "%s"\nbase-dir = ""\n' "$port" "$i" "$sum" > "$tmp/project/elements/e$i.toml"
done
printf 'kind = "stack"\ndepends = [%s]\n' "$(cd "$tmp/project/elements" && ls e*.toml | sed 's/.*/"&"/' | paste -sd,)" > "$tmp/project/elements/all.toml"
python3 -m http.server --bind 127.0.0.1 "$port" --directory "$tmp/www" >/dev/null 2>&1 &
server=$!
for _ in $(seq 100); do curl -s "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.05; done
printf '%-22s %10s\n' step "wall (s)"
for f in 10 1; do
  start=$(date +%s.%N)
  "$gantry" -C "$tmp/project" --cache-dir "$tmp/cache-$f" fetch --deps all --fetchers "$f" --ui plain all.toml 2>"$tmp/fetch-$f.log" || { echo "fetch --fetchers $f failed:"; tail -5 "$tmp/fetch-$f.log"; exit 1; }
  end=$(date +%s.%N)
  printf '%-22s %10.2f\n' "fetch --fetchers $f" "$(echo "$end - $start" | bc)"
done
