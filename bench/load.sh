#!/usr/bin/env bash
# The hit path under load (issue 12), next to nginx serving the same file, in one run:
#   1. nginx serving the artifact as a static file (the baseline)
#   2. kforge: GET /kernels/{key}/artifact
#   3. nginx in front of kforge with X-Accel-Redirect (kforge checks auth and the entry,
#      nginx sends the file; a second kforge on the same cache, --accel-redirect)
#   4. kforge: POST /kernels, template mode, a hit
#   5. kforge: POST /kernels, source mode, a hit
#   6. kforge: POST /kernels, 90 % hits and 10 % misses (distinct sources, compiled)
# Each with wrk at CONNECTIONS connections for SECONDS; prints requests/s, p50, p99, errors
# and kforge's RSS before and after, as a markdown table for docs/BENCHMARKS.md.
# Usage: bench/load.sh [SECONDS=30] [CONNECTIONS=64] [KFORGE=build/bin/kforge]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-30}
CONNS=${2:-64}
KFORGE=$(realpath "${3:-build/bin/kforge}")
THREADS=$(nproc)
for tool in wrk nginx curl; do
  command -v $tool >/dev/null || { echo "load: $tool is missing (scripts/setup.sh, or apt-get install wrk nginx-light)"; exit 2; }
done
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# serve NAME ARGS...: starts kforge serve on a free port; sets URL_<NAME> and PID_<NAME>.
serve() {
  local name=$1
  shift
  "$KFORGE" serve --port 0 --cache-dir "$WORK/cache" --max-queue 256 "$@" >"$WORK/$name.out" 2>"$WORK/$name.log" &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 300); do grep -q '^listening on' "$WORK/$name.out" 2>/dev/null && break; sleep 0.1; done
  grep -q '^listening on' "$WORK/$name.out" || { echo "load: kforge ($name) did not start"; cat "$WORK/$name.log"; exit 1; }
  printf -v "URL_$name" '%s' "$(head -1 "$WORK/$name.out" | cut -d' ' -f3)"
  printf -v "PID_$name" '%s' "$pid"
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

serve main
serve accel --accel-redirect /kforge-cache
KEY_OF='import json,sys; print(json.load(sys.stdin)["key"])'

# Source mode: the README's kernel. A %d in it makes the distinct kernels of the mix.
source_request() {
  printf '{"backend":"cpu","arch":"native","source":"#include <cstddef>\\n#include <cstdint>\\n#define PT_EXPORT __attribute__((visibility(\\"default\\")))\\nextern \\"C\\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, void* stream) { if (workspace_size) { *workspace_size = 0; return 0; } for (int64_t i = 0; i < n; ++i) y[i] = %s * x[i]; return 0; }"}' "$1"
}
SOURCE_BODY=$(source_request 2)
TENSOR='"dtype":"float32","sizes":[256,256],"strides":[256,1]'
TEMPLATE_BODY="{\"backend\":\"cpu\",\"arch\":\"native\",\"template\":\"gemm\",\"inputs\":[{\"name\":\"a\",$TENSOR},{\"name\":\"b\",$TENSOR}],\"output\":{\"name\":\"c\",$TENSOR}}"
post() { curl -sf "$URL_main/kernels" -H 'Content-Type: application/json' -d "$1"; }
KEY=$(post "$SOURCE_BODY" | /usr/bin/python3 -c "$KEY_OF")
post "$TEMPLATE_BODY" >/dev/null
for body in "$SOURCE_BODY" "$TEMPLATE_BODY"; do
  [ "$(post "$body" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["cache"])')" = hit ] ||
    { echo "load: the warm-up request is not a hit"; exit 1; }
done
mkdir -p "$WORK/www"
curl -sf "$URL_main/kernels/$KEY/artifact" -o "$WORK/www/kernel.so"
# nginx's workers run as nobody: they read the file and the cache (the accel route).
chmod -R a+rX "$WORK"
BYTES=$(stat -c %s "$WORK/www/kernel.so")

NGINX_STATIC=$(free_port)
NGINX_ACCEL=$(free_port)
cat >"$WORK/nginx.conf" <<CONF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/ngx_body;
  proxy_temp_path $WORK/ngx_proxy;
  fastcgi_temp_path $WORK/ngx_fcgi;
  uwsgi_temp_path $WORK/ngx_uwsgi;
  scgi_temp_path $WORK/ngx_scgi;
  server {
    listen 127.0.0.1:$NGINX_STATIC;
    location / { root $WORK/www; }
  }
  upstream kforge_accel { server ${URL_accel#http://}; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_ACCEL;
    location / {
      proxy_pass http://kforge_accel;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
    # What X-Accel-Redirect names: the cache root, read-only, never reachable from outside.
    location /kforge-cache/ {
      internal;
      alias $WORK/cache/;
    }
  }
}
CONF
nginx -c "$WORK/nginx.conf" -p "$WORK"  # returns once it listens (it daemonizes after binding)
curl -sf "http://127.0.0.1:$NGINX_STATIC/kernel.so" | cmp - "$WORK/www/kernel.so" ||
  { echo "load: nginx does not serve the file"; cat "$WORK/nginx.err"; exit 1; }
curl -sf "http://127.0.0.1:$NGINX_ACCEL/kernels/$KEY/artifact" | cmp - "$WORK/www/kernel.so" ||
  { echo "load: nginx with X-Accel-Redirect does not serve the artifact"; cat "$WORK/nginx.err"; exit 1; }

# wrk scripts: a fixed POST, and the mix (a distinct source once in ten requests).
lua_string() { /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
cat >"$WORK/post_template.lua" <<LUA
wrk.method = "POST"; wrk.headers["Content-Type"] = "application/json"
wrk.body = $(lua_string "$TEMPLATE_BODY")
LUA
cat >"$WORK/post_source.lua" <<LUA
wrk.method = "POST"; wrk.headers["Content-Type"] = "application/json"
wrk.body = $(lua_string "$SOURCE_BODY")
LUA
MISS_TEMPLATE=$(source_request '%s')
cat >"$WORK/mix.lua" <<LUA
local hit = $(lua_string "$SOURCE_BODY")
local miss = $(lua_string "$MISS_TEMPLATE")
local headers = { ["Content-Type"] = "application/json" }
local n, id = 0, 0
local threads = 0
function setup(thread) threads = threads + 1; thread:set("id", threads) end
function init(args) id = wrk.thread:get("id") or 0; math.randomseed(os.time() * 100 + id) end
function request()
  n = n + 1
  if n % 10 == 0 then
    -- a float literal no request has used: a distinct kernel, compiled
    local salt = string.format("%d.%d%df", id, os.time(), n)
    return wrk.format("POST", "/kernels", headers, string.format(miss, salt))
  end
  return wrk.format("POST", "/kernels", headers, hit)
end
LUA

# run SLUG LABEL PID URL [LUA]: one wrk run; prints a table row.
run() {
  local slug=$1 label=$2 pid=$3 url=$4 lua=${5:-}
  local before after out
  before=$( [ "$pid" = - ] && echo - || rss_kb "$pid")
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --timeout 60s --latency ${lua:+-s "$lua"} "$url")
  after=$( [ "$pid" = - ] && echo - || rss_kb "$pid")
  echo "$out" >"$WORK/$slug.wrk"
  local rps p50 p99 non2xx sock
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); non2xx=${non2xx:-0}
  sock=$(awk '/Socket errors/ {gsub(",",""); print $4+$6+$8+$10}' <<<"$out"); sock=${sock:-0}
  local rss="-"
  [ "$pid" != - ] && rss="$((before / 1024)) → $((after / 1024))"
  echo "| $label | $rps | $p50 | $p99 | $non2xx | $sock | $rss |"
  echo "$rps" >"$WORK/$slug.rps"
}

echo "wrk -t$THREADS -c$CONNS -d${DURATION}s --timeout 60s --latency; artifact of $BYTES bytes; $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')); $(date -u +%F)"
echo
echo "| what | requests/s | p50 | p99 | non-2xx | socket errors | kforge RSS MiB before → after |"
echo "|---|---|---|---|---|---|---|"
run nginx "nginx: static file" - "http://127.0.0.1:$NGINX_STATIC/kernel.so"
run get "kforge: GET artifact" "$PID_main" "$URL_main/kernels/$KEY/artifact"
run accel "nginx + kforge (X-Accel-Redirect): GET artifact" "$PID_accel" "http://127.0.0.1:$NGINX_ACCEL/kernels/$KEY/artifact"
run template "kforge: POST /kernels hit, template mode" "$PID_main" "$URL_main/kernels" "$WORK/post_template.lua"
run source "kforge: POST /kernels hit, source mode" "$PID_main" "$URL_main/kernels" "$WORK/post_source.lua"
run mix "kforge: POST /kernels, 90 % hits + 10 % misses" "$PID_main" "$URL_main/kernels" "$WORK/mix.lua"
echo
/usr/bin/python3 - "$WORK" <<'PY'
import sys
w = sys.argv[1]
rps = {s: float(open(f"{w}/{s}.rps").read()) for s in ("nginx", "get", "accel")}
print(f"kforge GET / nginx = {rps['get'] / rps['nginx']:.2f}; with X-Accel-Redirect / nginx = {rps['accel'] / rps['nginx']:.2f}")
PY
jobs_ms=$(curl -s -o /dev/null -w '%{time_total}' "$URL_main/jobs")
echo "GET /jobs after the run: $(curl -s "$URL_main/jobs" | /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print(len(j), "jobs (builds only)")') in $(/usr/bin/python3 -c "print(round($jobs_ms*1000, 2))") ms"
