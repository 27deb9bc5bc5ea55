#!/usr/bin/env bash
# kforge over HTTPS (issue 16, part 5), with the openssl CLI and a real client (curl):
#   - a self-signed certificate for 127.0.0.1 (subjectAltName IP:127.0.0.1, DNS:localhost)
#     serves /healthz, a POST /kernels and the artifact's download to `curl --cacert`;
#   - without --cacert curl refuses the certificate (exit 60);
#   - plain HTTP on the TLS port fails at once, and the server stays up;
#   - a mismatched key, an expired certificate, a certificate not valid yet, an RSA-512 pair
#     (below OpenSSL's security level), a missing key file and a file with no certificate
#     each make `kforge serve` exit 2 within seconds, with one clear line on stderr.
# Prints `ok N - what` per check; stops at the first failure (`not ok N - what`, then the
# server's log). Exits 77 (skipped) only where openssl or curl is missing.
# Usage: tests/tls/tls_test.sh KFORGE_BINARY
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 KFORGE_BINARY" >&2; exit 2; }
KFORGE=$(realpath "$1")
for tool in openssl curl; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool is missing (apt-get install $tool)"; exit 77; }
done
WORK=$(mktemp -d)
PID=
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"

N=0
LOG=
ok() { N=$((N + 1)); echo "ok $N - $*"; }
not_ok() {
  N=$((N + 1))
  echo "not ok $N - $*"
  if [ -n "$LOG" ] && [ -f "$LOG" ]; then sed 's/^/# kforge: /' "$LOG"; fi
  exit 1
}
# curl without ~/.curlrc (-q), quiet but for errors, never waiting long.
CURL=(curl -q -sS --max-time 60)

# --- Certificates -----------------------------------------------------------------------
EC=(-algorithm EC -pkeyopt ec_paramgen_curve:P-256)
openssl genpkey "${EC[@]}" -out key.pem 2>/dev/null
openssl req -x509 -new -key key.pem -out cert.pem -days 2 -subj /CN=127.0.0.1 \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null
openssl genpkey "${EC[@]}" -out other.key 2>/dev/null  # not cert.pem's key
# Certificates with dates in the past and in the future: `openssl ca -selfsign` takes
# -startdate/-enddate (OpenSSL 3.0's `req -x509` and `x509` cannot set them).
openssl genpkey "${EC[@]}" -out dated.key 2>/dev/null
openssl req -new -key dated.key -subj /CN=127.0.0.1 -out dated.csr 2>/dev/null
mkdir ca && touch ca/index.txt
cat >ca.cnf <<'CNF'
[ ca ]
default_ca = dated
[ dated ]
dir = ./ca
database = $dir/index.txt
new_certs_dir = $dir
serial = $dir/serial
rand_serial = yes
unique_subject = no
default_md = sha256
policy = any
[ any ]
commonName = supplied
CNF
dated_cert() {  # OUT START END
  openssl ca -batch -config ca.cnf -selfsign -keyfile dated.key -in dated.csr -notext \
    -startdate "$2" -enddate "$3" -out "$1" >ca.log 2>&1 || { cat ca.log; not_ok "openssl ca makes $1"; }
}
dated_cert expired.pem 20200101000000Z 20200102000000Z
dated_cert future.pem 20900101000000Z 20910101000000Z
# Valid and matching, but under every OpenSSL security level above 0.
openssl req -x509 -newkey rsa:512 -nodes -keyout weak.key -out weak.pem -days 2 -subj /CN=127.0.0.1 2>/dev/null
openssl x509 -in cert.pem -noout -checkend 3600 >/dev/null || not_ok "the self-signed certificate is valid"
ok "openssl made a self-signed certificate for 127.0.0.1, an unrelated key, expired, future and RSA-512 certificates"

# --- A server with the good pair ------------------------------------------------------
LOG=$WORK/serve.log
"$KFORGE" serve --port 0 --cache-dir "$WORK/cache" --tls-cert cert.pem --tls-key key.pem \
  >serve.out 2>"$LOG" &
PID=$!
for _ in $(seq 600); do
  grep -q '^listening on' serve.out 2>/dev/null && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
grep -q '^listening on https://127.0.0.1:' serve.out || not_ok "kforge serve --tls-cert/--tls-key prints its https URL"
URL=$(head -1 serve.out | cut -d' ' -f3)
PORT=${URL##*:}
ok "kforge serve listens on $URL"

out=$("${CURL[@]}" --cacert cert.pem -o healthz.json -w '%{http_code} %{content_type}' "$URL/healthz") ||
  not_ok "GET /healthz over TLS (curl --cacert)"
[[ $out == "200 application/json"* ]] || not_ok "GET /healthz over TLS answers 200 JSON (got: $out)"
grep -q '^{' healthz.json || not_ok "GET /healthz over TLS has a JSON body: $(cat healthz.json)"
ok "GET /healthz over TLS with curl --cacert: 200, JSON"

out=$("${CURL[@]}" --cacert cert.pem --resolve "localhost:$PORT:127.0.0.1" -o /dev/null -w '%{http_code}' \
  "https://localhost:$PORT/healthz") || not_ok "GET https://localhost:$PORT/healthz (the DNS name)"
[ "$out" = 200 ] || not_ok "GET https://localhost:$PORT/healthz answers 200 (got $out)"
ok "the certificate's DNS name (localhost) verifies too"

# The README's kernel, in source mode (bench/load.sh).
BODY='{"backend":"cpu","arch":"native","source":"#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\nextern \"C\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, void* stream) { if (workspace_size) { *workspace_size = 0; return 0; } for (int64_t i = 0; i < n; ++i) y[i] = 3 * x[i]; return 0; }"}'
out=$("${CURL[@]}" --max-time 240 --cacert cert.pem -o kernel.json -w '%{http_code}' "$URL/kernels" \
  -H 'Content-Type: application/json' -d "$BODY") || not_ok "POST /kernels over TLS"
[ "$out" = 200 ] || not_ok "POST /kernels over TLS answers 200 (got $out: $(head -c 600 kernel.json))"
read -r KEY SHA < <(/usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
print(j["key"], j["artifact"]["sha256"])' kernel.json) || not_ok "POST /kernels over TLS answers a key and an artifact"
ok "POST /kernels over TLS: 200, key ${KEY:0:16}..."

out=$("${CURL[@]}" --cacert cert.pem -o kernel.so -w '%{http_code}' "$URL/kernels/$KEY/artifact") ||
  not_ok "GET /kernels/{key}/artifact over TLS"
[ "$out" = 200 ] || not_ok "GET /kernels/{key}/artifact over TLS answers 200 (got $out)"
got=$(sha256sum kernel.so | cut -d' ' -f1)
[ "$got" = "$SHA" ] || not_ok "the artifact downloaded over TLS has the announced sha256 ($got, not $SHA)"
ok "GET /kernels/{key}/artifact over TLS: $(stat -c %s kernel.so) bytes, sha256 matches"

rc=0
"${CURL[@]}" -o /dev/null "$URL/healthz" 2>curl.err || rc=$?
[ "$rc" = 60 ] || not_ok "curl without --cacert refuses the self-signed certificate with exit 60 (got $rc: $(cat curl.err))"
ok "curl without --cacert refuses the certificate (exit 60: $(head -1 curl.err | cut -c1-70))"

rc=0
start=$(date +%s)
code=$(curl -q -sS --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/healthz" 2>curl.err) || rc=$?
took=$(($(date +%s) - start))
[ "$rc" != 28 ] || not_ok "plain HTTP on the TLS port does not hang (curl timed out after 5 s)"
[ "$rc" != 0 ] || [ "$code" != 200 ] || not_ok "plain HTTP on the TLS port is not answered 200"
ok "plain HTTP on the TLS port fails in ${took} s (curl exit $rc: $(head -1 curl.err | cut -c1-60))"

kill -0 "$PID" 2>/dev/null || not_ok "kforge is still running after the plain HTTP request"
out=$("${CURL[@]}" --cacert cert.pem -o /dev/null -w '%{http_code}' "$URL/healthz") || not_ok "GET /healthz over TLS afterwards"
[ "$out" = 200 ] || not_ok "GET /healthz over TLS afterwards answers 200 (got $out)"
ok "the server stays up: GET /healthz over TLS still 200"

kill "$PID"
rc=0
wait "$PID" || rc=$?
PID=
[ "$rc" = 0 ] || not_ok "kforge stops cleanly on SIGTERM (exit $rc)"
ok "kforge stops cleanly on SIGTERM"

# --- Pairs refused at start -------------------------------------------------------------
# refused WHAT CERT KEY PATTERN: kforge serve exits 2 within 10 s, with PATTERN on stderr.
refused() {
  local what=$1 cert=$2 key=$3 pattern=$4 rc=0 i
  LOG=$WORK/refused.log
  "$KFORGE" serve --port 0 --cache-dir "$WORK/cache2" --tls-cert "$cert" --tls-key "$key" \
    >refused.out 2>"$LOG" &
  PID=$!
  for i in $(seq 100); do
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$PID" 2>/dev/null; then not_ok "$what: kforge serve exits within 10 s"; fi
  wait "$PID" || rc=$?
  PID=
  [ "$rc" = 2 ] || not_ok "$what: kforge serve exits 2 (got $rc)"
  grep -q '^listening' refused.out && not_ok "$what: kforge serve never listens"
  grep -qE "$pattern" "$LOG" || not_ok "$what: stderr says /$pattern/"
  ok "$what: refused at start (exit 2): $(grep -E "$pattern" "$LOG" | head -1)"
}
refused "a key that is not the certificate's" cert.pem other.key \
  '^kforge serve: --tls-key other.key is not the private key of the certificate in cert.pem'
refused "an expired certificate" expired.pem dated.key \
  '^kforge serve: --tls-cert expired.pem \(CN=127.0.0.1\) has expired: valid from 2020-01-01 00:00:00 UTC until 2020-01-02 00:00:00 UTC$'
refused "a certificate not valid yet" future.pem dated.key \
  '^kforge serve: --tls-cert future.pem \(CN=127.0.0.1\) is not valid yet: valid from 2090-01-01 00:00:00 UTC'
refused "a pair that OpenSSL's TLS refuses (RSA 512)" weak.pem weak.key \
  "^kforge serve: --tls-cert weak.pem with --tls-key weak.key is refused by OpenSSL's TLS: .+"
refused "a missing key file" cert.pem missing.key \
  '^kforge serve: cannot read --tls-key missing.key: No such file or directory$'
refused "a certificate file with no certificate" key.pem key.pem \
  '^kforge serve: --tls-cert key.pem holds no PEM certificate$'
[ ! -e "$WORK/cache2" ] || not_ok "a refused server did not create its cache directory"
ok "a refused server touched nothing (no cache directory)"
echo "1..$N"
