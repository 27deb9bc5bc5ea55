#!/usr/bin/env bash
# Builds docker/Dockerfile with podman, runs the image with a bind-mounted cache directory
# and a token file, and compiles a cpu kernel through it: a miss, then a hit for the same
# request, an artifact that computes what it should, the entry on the mounted directory,
# every process of the container under the image's non-root uid, the image's health check
# passing, a clean stop on SIGTERM, and no build dependency in the runtime image. Then once
# more with the security options docker/compose.yaml gives its instances: kforge must get
# bubblewrap working as its sandbox there. Prints how long each step took and the image size.
#
# Usage: tests/docker/run.sh [SOURCE_DIR]. Exit 0 passed, 1 failed, 77 skipped (the reason
# on stdout) where podman cannot run containers.
#
# tests/docker/lib.sh says what works on these machines and what is kept between runs.
set -euo pipefail
SRC=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
# shellcheck source=tests/docker/lib.sh
. "$SRC/tests/docker/lib.sh"
IMAGE=localhost/kforge:ctest
BUILD_STAGE=localhost/kforge-build:ctest

docker_test_setup
debian_base trixie

# --- build --------------------------------------------------------------------------------
step "podman build -f docker/Dockerfile"
build_image docker/Dockerfile "$BUILD_STAGE" "$IMAGE"

# --- the runtime image holds what serving needs and nothing to build kforge with ----------
step "runtime image contents"
check_runtime_contents docker/Dockerfile "$IMAGE" kforge kforge-runner-cpu kforge-runner-rocm g++ hipcc bwrap tini curl

# --- run ----------------------------------------------------------------------------------
prepare_mounts "$IMAGE"

# compile FACTOR SANDBOX: POSTs the cluster test's source-mode kernel (y = FACTOR * x) twice.
compile() {
  /usr/bin/python3 - "$URL" "$token" "$WORK" "$uid" "$1" "$2" <<'EOF'
import ctypes, json, os, sys, urllib.request
url, token, work, uid, factor, want_sandbox = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
src = ('#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility("default")))\n'
       'extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, '
       'size_t* workspace_size, uint8_t* workspace, void* stream) {\n'
       '  if (workspace_size) { *workspace_size = 0; return 0; }\n'
       f'  for (int64_t i = 0; i < n; ++i) y[i] = {factor} * x[i];\n  return 0;\n}}\n')
# Benchmarked too: kforge-runner-cpu (OpenBLAS, libffi) runs in the image, in the sandbox.
tensor = lambda name: {"name": name, "dtype": "float32", "sizes": [1024]}
body = json.dumps({"backend": "cpu", "arch": "x86-64", "source": src,
                   "benchmark": {"inputs": [tensor("x")], "output": tensor("y"), "extra_args": [1024]}}).encode()

def call(path, data=None):
    headers = {"Authorization": "Bearer " + token}
    if data:
        headers["Content-Type"] = "application/json"
    with urllib.request.urlopen(urllib.request.Request(url + path, data=data, headers=headers), timeout=300) as r:
        return r.read()

def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)

sandbox = json.loads(call("/toolchains")).get("sandbox", {})
print(f"sandbox: {sandbox.get('mode')} ({sandbox.get('reason')})")
if want_sandbox != "any" and sandbox.get("mode") != want_sandbox:
    fail(f"expected the {want_sandbox} sandbox")
first = json.loads(call("/kernels", body))
second = json.loads(call("/kernels", body))
print(f"first: {first['cache']}, second: {second['cache']}, key {first['key'][:16]}...")
if first["cache"] != "miss" or second["cache"] != "hit" or first["key"] != second["key"]:
    fail(f"expected a miss then a hit of the same key: {first['cache']} {second['cache']}")
bench = first.get("benchmark") or {}
if bench.get("status") != "ok":
    fail(f"the benchmark did not run: {json.dumps(bench)[:300]}")
print(f"benchmarked on {bench['device']['name']}: median {bench['median_ms']} ms")
key = first["key"]
entry = os.path.join(work, "cache", "v1", "objects", key[:2], key)
for f in ("manifest.json", "kernel.so"):
    p = os.path.join(entry, f)
    if not os.path.isfile(p):
        fail(f"{f} of {key} is not on the mounted cache directory ({entry})")
    if os.stat(p).st_uid != uid:
        fail(f"{p} belongs to uid {os.stat(p).st_uid}, not the image's {uid}")
so = os.path.join(work, f"kernel{factor}.so")
with open(so, "wb") as f:
    f.write(call(f"/kernels/{key}/artifact"))
fn = getattr(ctypes.CDLL(so), first["kernel_name"])
x, y = (ctypes.c_float * 3)(1, 2, 3), (ctypes.c_float * 3)()
if fn(x, y, ctypes.c_int64(3), None, None, None) != 0 or list(y) != [factor * 1.0, factor * 2.0, factor * 3.0]:
    fail(f"the artifact computed {list(y)}")
print(f"the entry is on the mounted directory, owned by uid {uid}; the artifact computes {factor}*x")
EOF
}

step "podman run (the image as it is)"
start kforge-ctest-$$ "$IMAGE"
"${PODMAN[@]}" healthcheck run kforge-ctest-$$ >/dev/null 2>>"$PLOG" || fail "the image's HEALTHCHECK does not pass"
# Every process of the container runs as the image's user (seen from the host: there is no
# user namespace, so these are host uids).
[ "$("${PODMAN[@]}" exec kforge-ctest-$$ id -u)" = "$uid" ] || fail "podman exec does not run as uid $uid"
pid1=$("${PODMAN[@]}" inspect -f '{{.State.Pid}}' kforge-ctest-$$)
for p in "$pid1" $(cat /proc/"$pid1"/task/*/children); do
  u=$(awk '/^Uid:/ {print $2}' "/proc/$p/status")
  [ "$u" = "$uid" ] || fail "process $p ($(tr '\0' ' ' <"/proc/$p/cmdline")) runs as uid $u"
done
echo "every process of the container runs as uid $uid"
compile 3 any
"${PODMAN[@]}" stop -t 20 kforge-ctest-$$ >/dev/null 2>>"$PLOG"
code=$("${PODMAN[@]}" inspect -f '{{.State.ExitCode}}' kforge-ctest-$$)
[ "$code" = 0 ] || fail "kforge exited $code on SIGTERM: $("${PODMAN[@]}" logs kforge-ctest-$$ 2>&1 | tail -5)"
echo "SIGTERM: kforge stopped, exit code 0"

step "podman run with docker/compose.yaml's security options and environment"
mapfile -t secopts < <(compose_security_options)
echo "${secopts[*]}"
start kforge-ctest-bwrap-$$ "$IMAGE" "${secopts[@]}"
compile 5 bwrap

echo "passed in $((SECONDS - T0)) s (build $build_s s); image $((size / 1000000)) MB"
