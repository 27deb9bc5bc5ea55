#!/usr/bin/env bash
# Builds docker/Dockerfile.rocm (Debian 13: hipcc of ROCm 5.7.1, clang 17, device libraries 6.0,
# rocBLAS) with podman and proves what it is for, with no AMD GPU at hand: kforge in the image
# lists gfx942, gfx90a and gfx1100 and names its release; the gemm template (float16 and
# bfloat16) and a source-mode kernel compile for gfx942 and gfx90a, their code objects contain
# MFMA instructions (llvm-objdump of each hsaco, in the image) and the compile reports resource
# usage per arch; the Inductor hook (clients/python, run here) compiles torch's ROCm command for
# MI300 there; gfx950, which clang 17 does not know, is a 400; kforge-runner-rocm links rocBLAS,
# and it and the service report the missing GPU cleanly. The runtime image holds no build
# dependency. Prints how long each step took and the image size.
#
# Usage: tests/docker/rocm.sh [SOURCE_DIR]. Exit 0 passed, 1 failed, 77 skipped (the reason on
# stdout) where podman cannot run containers. tests/docker/lib.sh says what works on these
# machines and what is kept between runs; the Debian 13 base is shared with tests/docker/run.sh
# (made once, by whichever runs first).
set -euo pipefail
SRC=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
# shellcheck source=tests/docker/lib.sh
. "$SRC/tests/docker/lib.sh"
IMAGE=localhost/kforge-rocm:ctest
BUILD_STAGE=localhost/kforge-rocm-build:ctest

docker_test_setup
debian_base trixie

step "podman build -f docker/Dockerfile.rocm"
build_image docker/Dockerfile.rocm "$BUILD_STAGE" "$IMAGE"

step "runtime image contents"
check_runtime_contents docker/Dockerfile.rocm "$IMAGE" kforge kforge-runner-cpu kforge-runner-rocm g++ hipcc bwrap tini curl
# The runner links rocBLAS, and without a GPU says so and which targets its rocBLAS has kernels for.
# shellcheck disable=SC2016
probe=$("${PODMAN[@]}" run --rm --network=host --no-healthcheck "${LIMITS[@]}" --entrypoint /bin/sh "$IMAGE" -c '
  ldd /usr/local/bin/kforge-runner-rocm | grep -q "librocblas.so.0 => /" || { echo "kforge-runner-rocm does not link rocBLAS"; exit 1; }
  ! ldd /usr/local/bin/kforge-runner-rocm | grep "not found"
  echo "{\"mode\": \"probe\"}" | /usr/local/bin/kforge-runner-rocm') || fail "kforge-runner-rocm: $probe"
echo "kforge-runner-rocm: $probe"
/usr/bin/python3 -c 'import json, sys
p = json.loads(sys.argv[1])
assert p["available"] is False and "AMD GPU" in p["reason"], p
v = p["vendor"]
assert v["name"] == "rocblas" and v["version"] and "gfx90a" in v["kernels_for"], v' "$probe" ||
  fail "the runner's probe is not a clean \"no AMD GPU\" with rocBLAS"

step "podman run with docker/compose.yaml's security options"
prepare_mounts "$IMAGE"
mapfile -t secopts < <(compose_security_options)
# A stand-in for Composable Kernel (not in Debian), registered as the library `ck` the way
# docs/OPERATIONS.md says: mounted read-only, named by KFORGE_LIBRARY.
mkdir -p "$WORK/ck/include/ck" "$WORK/ck/library/include"
printf '#pragma once\n#define CK_SCALE 3.0f\n' >"$WORK/ck/include/ck/ck.hpp"
chmod -R a+rX "$WORK/ck"
start kforge-rocm-ctest-$$ "$IMAGE" "${secopts[@]}" -v "$WORK/ck:/opt/ck:ro" -e KFORGE_LIBRARY=ck=/opt/ck

step "compiles for gfx942 and gfx90a"
/usr/bin/python3 - "$URL" "$token" "$WORK" "$SRC" >"$WORK/keys" <<'EOF'
import json, os, sys, urllib.error, urllib.request
url, token, work, src = sys.argv[1:5]

def call(path, body=None):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

def fail(msg):
    print("FAILED: " + msg, file=sys.stderr)
    sys.exit(1)

def say(msg):
    print(msg, file=sys.stderr)

_, tc = call("/toolchains")
rocm = tc["rocm"]
if not rocm.get("available"):
    fail(f"rocm is unavailable in the image: {rocm.get('reason')}")
archs = set(rocm["archs"])
say(f"rocm: {rocm['compiler']}, release {rocm.get('release')}, {len(archs)} targets, device libraries in {rocm.get('device_libs')}")
if rocm.get("release") != "5.7" or not {"gfx942", "gfx90a", "gfx1100"} <= archs or "gfx950" in archs:
    fail(f"expected ROCm 5.7 with gfx942, gfx90a and gfx1100 (and no gfx950): {rocm.get('release')} {sorted(archs)}")
dev = rocm.get("device", {})
if dev.get("available") or "AMD GPU" not in dev.get("reason", "") or dev.get("vendor", {}).get("name") != "rocblas":
    fail(f"the rocm device should be unavailable (no AMD GPU here), with rocBLAS named: {dev}")

TWO = ["gfx942", "gfx90a"]
def gemm(dtype):
    t = lambda name, sizes: {"name": name, "dtype": dtype, "sizes": sizes, "strides": [sizes[1], 1]}
    return {"backend": "rocm", "arch": TWO, "template": "gemm",
            "inputs": [t("a", [256, 128]), t("b", [128, 256])], "output": t("c", [256, 256])}
# A source-mode kernel as Inductor's ROCm templates write one, with an MFMA builtin on CDNA.
SOURCE = r'''#include <hip/hip_runtime.h>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef float float4v __attribute__((ext_vector_type(4)));
__global__ void tile(const half4* a, const half4* b, float4v* c) {
#if defined(__gfx90a__) || defined(__gfx942__)
  const int i = threadIdx.x;
  c[i] = __builtin_amdgcn_mfma_f32_16x16x16f16(a[i], b[i], c[i], 0, 0, 0);
#endif
}
extern "C" PT_EXPORT int KERNEL_NAME(const _Float16* a, const _Float16* b, float* c, size_t* workspace_size,
                                     uint8_t* workspace, hipStream_t stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  hipLaunchKernelGGL(tile, dim3(1), dim3(64), 0, stream, (const half4*)a, (const half4*)b, (float4v*)c);
  return hipGetLastError() == hipSuccess ? 0 : 1;
}
'''
cases = [("gemm float16", gemm("float16")), ("gemm bfloat16", gemm("bfloat16")),
         ("source mode", {"backend": "rocm", "arch": TWO, "source": SOURCE})]
for what, body in cases:
    status, r = call("/kernels", body)
    if status != 200:
        fail(f"{what}: HTTP {status}: {json.dumps(r)[:1500]}")
    objs = sorted(o["arch"] for o in r["code_objects"])
    usage = {u.get("arch"): u for u in r["compile"]["resources"]}
    if objs != sorted(TWO) or set(usage) != set(TWO) or any("vgprs" not in u for u in usage.values()):
        fail(f"{what}: code objects {objs}, resources {r['compile']['resources']}")
    say(f"{what}: {r['key'][:16]}..., {r['compile']['seconds']:.1f} s; " +
        "; ".join(f"{a}: {u['vgprs']} VGPRs, {u.get('agprs', 0)} AGPRs, LDS {u.get('lds_bytes', 0)} B" for a, u in sorted(usage.items())))
    print(r["key"])

# An arch that clang 17 does not know, and a benchmark where there is no GPU.
status, r = call("/kernels", {"backend": "rocm", "arch": ["gfx942", "gfx950"], "source": SOURCE})
if status != 400 or r["errors"][0]["field"] != "/arch/1" or "gfx950" not in r["detail"]:
    fail(f"gfx950: expected a 400 on /arch/1, got {status}: {json.dumps(r)[:500]}")
say(f"gfx950: 400: {r['detail'][:90]}...")
half = lambda name: {"name": name, "dtype": "float16", "sizes": [64, 4]}
status, r = call("/kernels", {"backend": "rocm", "arch": TWO, "source": SOURCE,
                              "benchmark": {"inputs": [half("a"), half("b")],
                                            "output": {"name": "c", "dtype": "float32", "sizes": [64, 4]}}})
bench = r.get("benchmark") or {}
if status != 200 or bench.get("status") != "unavailable" or "AMD GPU" not in bench.get("reason", ""):
    fail(f"a benchmark without a GPU: expected 200 with the benchmark unavailable, got {status}: {json.dumps(r)[:800]}")
say(f"benchmark without a GPU: {bench['status']}: {bench['reason']}")

# The Inductor hook, torch-free (clients/python), with torch 2.11's ROCm command for MI300 and
# MI200 on Debian's ROCm (ROCm home /usr): it goes to kforge, and the .o and .so land where
# Inductor looks.
sys.path[:0] = [os.path.join(src, "clients", "python"), os.path.join(src, "clients", "python", "tests")]
from pathlib import Path
import kforge
from kforge import inductor
from test_inductor import CK_SOURCE, rocm_command  # torch 2.11's command line, with its defaults
ck = os.path.join(work, "ck")  # the server has it as the library `ck`
client = kforge.Client(url, token=token, cache_dir=os.path.join(work, "client-cache"), timeout=600, retries=0)
hook = inductor.Hook(client, {"ck": ck}, fallback=False, toolkit_dirs=inductor.toolkit_dirs(None, "/usr", None))
source = CK_SOURCE.replace("NAME", "rocm_ck_scale_0a1b2c3d")
line = rocm_command(Path(ck), archs=TWO, rocm_home="/usr")(["k.cpp"], "k.o", "o")
outputs = {"o": os.path.join(work, "k.o"), "so": os.path.join(work, "k.so")}
manifest = hook.build("rocm", source, line, outputs)
objs = sorted(o["arch"] for o in manifest["code_objects"])
if objs != sorted(TWO) or not all(os.path.getsize(p) for p in outputs.values()):
    fail(f"the hook's compile: code objects {objs}")
say(f"the Inductor hook: {' '.join(line.split()[:6])} ... -> kforge {manifest.get('cache')}, code objects {objs}")
EOF
[ -s "$WORK/keys" ] || fail "no kernels compiled"

step "MFMA in each code object (llvm-objdump in the image)"
# The entries are on the mounted cache; the image's LLVM 17 unbundles and disassembles them.
# shellcheck disable=SC2016
"${PODMAN[@]}" exec -i kforge-rocm-ctest-$$ /bin/sh -c '
  llvm=/usr/lib/llvm-17/bin; bad=0; seen=0
  for key in $(cat); do
    so=/var/cache/kforge/v1/objects/$(echo "$key" | cut -c1-2)/$key/kernel.so
    objcopy --dump-section .hip_fatbin=/tmp/fb "$so" || exit 1
    for arch in gfx942 gfx90a; do
      $llvm/clang-offload-bundler --unbundle --type=o --input=/tmp/fb --targets=hipv4-amdgcn-amd-amdhsa--$arch --output=/tmp/$arch.co || exit 1
      mfma=$($llvm/llvm-objdump -d --mcpu=$arch /tmp/$arch.co | grep -o "v_mfma_[a-z0-9_]*" | sort | uniq -c | tr -s " " | tr "\n" ",")
      echo "$(echo "$key" | cut -c1-12) $arch: ${mfma:-none}"
      [ -n "$mfma" ] || bad=1
      seen=$((seen + 1))
    done
  done
  [ "$seen" = 6 ] || { echo "disassembled $seen code objects, not 6"; bad=1; }
  exit $bad' <"$WORK/keys" || fail "a gfx942 or gfx90a code object without MFMA instructions (above)"

"${PODMAN[@]}" stop -t 20 kforge-rocm-ctest-$$ >/dev/null 2>>"$PLOG"
code=$("${PODMAN[@]}" inspect -f '{{.State.ExitCode}}' kforge-rocm-ctest-$$)
[ "$code" = 0 ] || fail "kforge exited $code on SIGTERM"
echo "passed in $((SECONDS - T0)) s (build $build_s s); image $((size / 1000000)) MB"
