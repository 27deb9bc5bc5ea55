#!/usr/bin/env bash
# Where a hit's time goes (issue 12): perf samples kforge while wrk drives each hit path
# (GET of an artifact, POST /kernels template mode) at CONNECTIONS connections, and prints
# the share per shared object and the top symbols. Needs perf (Debian's linux-perf) and wrk.
# Usage: bench/profile_hits.sh [SECONDS=10] [CONNECTIONS=64] [KFORGE=build/bin/kforge] [-- serve args]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CONNS=${2:-64}
KFORGE=$(realpath "${3:-build/bin/kforge}")
shift $(($# < 3 ? $# : 3))
[ "${1:-}" = "--" ] && shift
for tool in wrk perf curl; do
  command -v $tool >/dev/null || { echo "profile: $tool is missing (apt-get install wrk linux-perf)"; exit 2; }
done
WORK=$(mktemp -d)
PID=""
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
"$KFORGE" serve --port 0 --cache-dir "$WORK/cache" "$@" >"$WORK/out" 2>"$WORK/log" &
PID=$!
for _ in $(seq 100); do grep -q '^listening on' "$WORK/out" 2>/dev/null && break; sleep 0.1; done
URL=$(head -1 "$WORK/out" | cut -d' ' -f3)
TENSOR='"dtype":"float32","sizes":[256,256],"strides":[256,1]'
BODY="{\"backend\":\"cpu\",\"arch\":\"native\",\"template\":\"gemm\",\"inputs\":[{\"name\":\"a\",$TENSOR},{\"name\":\"b\",$TENSOR}],\"output\":{\"name\":\"c\",$TENSOR}}"
KEY=$(curl -sf "$URL/kernels" -d "$BODY" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
curl -sf "$URL/kernels" -d "$BODY" >/dev/null
sleep 1.1  # a file younger than a second is not kept in memory
curl -sf "$URL/kernels/$KEY/artifact" -o /dev/null
printf 'wrk.method = "POST"; wrk.headers["Content-Type"] = "application/json"\nwrk.body = %s\n' \
  "$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$BODY")" >"$WORK/post.lua"

profile() {
  local label=$1 url=$2 lua=${3:-}
  perf record -F 999 -g -p "$PID" -o "$WORK/perf.data" -- sleep "$DURATION" >/dev/null 2>&1 &
  local perf_pid=$!
  local out
  out=$(wrk -t"$(nproc)" -c"$CONNS" -d"${DURATION}s" --latency ${lua:+-s "$lua"} "$url")
  wait $perf_pid || true
  echo "== $label: $(awk '/^Requests\/sec/ {print $2}' <<<"$out") requests/s under perf, p99 $(awk '$1=="99%" {print $2}' <<<"$out")"
  echo "-- by shared object"
  perf report -i "$WORK/perf.data" --stdio --no-children -g none --sort dso --percent-limit 1 2>/dev/null |
    grep '%' | sed 's/  */ /g'
  echo "-- top symbols"
  perf report -i "$WORK/perf.data" --stdio --no-children -g none --sort dso,symbol --percent-limit 0.8 2>/dev/null |
    grep '%' | sed 's/  */ /g' | cut -c1-140 | head -25
}
profile "GET /kernels/{key}/artifact" "$URL/kernels/$KEY/artifact"
profile "POST /kernels (template mode, a hit)" "$URL/kernels" "$WORK/post.lua"
