#!/usr/bin/env bash
# Load test: wrk against cache hits on a real `kforge serve` (GET /kernels/{key}/artifact,
# each request verified against the manifest's sha256 as it is served), next to nginx
# serving the same artifact file statically, in the same run.
# Usage: bench/load.sh [SECONDS=30] [CONNECTIONS=64] [KFORGE=build/bin/kforge]
# Prints a markdown table (requests/s, p50, p99, errors) for docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-30}
CONNS=${2:-64}
KFORGE=${3:-build/bin/kforge}
THREADS=$(nproc)
for tool in wrk nginx curl; do
  command -v $tool >/dev/null || { echo "load: $tool is missing (scripts/setup.sh, or apt-get install wrk nginx-light)"; exit 2; }
done
WORK=$(mktemp -d)
cleanup() {
  [ -n "${KF_PID:-}" ] && kill "$KF_PID" 2>/dev/null || true
  [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$KFORGE" serve --port 0 --cache-dir "$WORK/cache" >"$WORK/kforge.out" 2>"$WORK/kforge.log" &
KF_PID=$!
for _ in $(seq 300); do grep -q '^listening on' "$WORK/kforge.out" 2>/dev/null && break; sleep 0.1; done
grep -q '^listening on' "$WORK/kforge.out" || { echo "load: kforge did not start"; cat "$WORK/kforge.log"; exit 1; }
URL=$(head -1 "$WORK/kforge.out" | cut -d' ' -f3)
SRC='#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\nextern \"C\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, void* stream) { if (workspace_size) { *workspace_size = 0; return 0; } for (int64_t i = 0; i < n; ++i) y[i] = 2 * x[i]; return 0; }'
KEY=$(curl -sf "$URL/kernels" -H 'Content-Type: application/json' -d "{\"backend\":\"cpu\",\"arch\":\"native\",\"source\":\"$SRC\"}" |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
ARTIFACT="$URL/kernels/$KEY/artifact"
mkdir -p "$WORK/www"
curl -sf "$ARTIFACT" -o "$WORK/www/kernel.so"
chmod a+rx "$WORK" "$WORK/www" && chmod a+r "$WORK/www/kernel.so"  # nginx's workers run as nobody
BYTES=$(stat -c %s "$WORK/www/kernel.so")

NGINX_PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/nginx.conf" <<CONF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/ngx_body;
  proxy_temp_path $WORK/ngx_proxy;
  fastcgi_temp_path $WORK/ngx_fcgi;
  uwsgi_temp_path $WORK/ngx_uwsgi;
  scgi_temp_path $WORK/ngx_scgi;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / { root $WORK/www; }
  }
}
CONF
nginx -c "$WORK/nginx.conf" -p "$WORK"
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$NGINX_PORT/kernel.so" -o /dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$NGINX_PORT/kernel.so" | cmp - "$WORK/www/kernel.so" || { echo "load: nginx does not serve the file"; cat "$WORK/nginx.err"; exit 1; }

run() {  # slug label url
  local out
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$3")
  echo "$out" >"$WORK/$1.wrk"
  local rps p50 p99 non2xx sock
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); non2xx=${non2xx:-0}
  sock=$(awk '/Socket errors/ {gsub(",",""); print $4+$6+$8+$10}' <<<"$out"); sock=${sock:-0}
  echo "| $2 | $rps | $p50 | $p99 | $non2xx | $sock |"
  echo "$rps" >"$WORK/$1.rps"
}
echo "wrk -t$THREADS -c$CONNS -d${DURATION}s --latency, artifact of $BYTES bytes, $(nproc) cores, $(date -u +%F)"
echo
echo "| server | requests/s | p50 | p99 | non-2xx | socket errors |"
echo "|---|---|---|---|---|---|"
run kforge "kforge (GET /kernels/{key}/artifact)" "$ARTIFACT"
run nginx "nginx (static file)" "http://127.0.0.1:$NGINX_PORT/kernel.so"
echo
/usr/bin/python3 -c "import sys; k,n=(float(open(f).read()) for f in sys.argv[1:]); print(f'kforge / nginx = {k/n:.2f}')" \
  "$WORK/kforge.rps" "$WORK/nginx.rps"
