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
# What works on these machines (Debian 12, no Docker Hub, no container network): rootful
# podman with runc and cgroupfs (crun and the systemd cgroup manager fail), host network,
# and a base image made with debootstrap from deb.debian.org and `podman import`, tagged as
# the name the Dockerfile's FROM uses. It is made once and kept; podman's layer cache and
# the build's ccache are kept too, so a later run rebuilds only what a change touches.
set -euo pipefail
SRC=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
BASE=docker.io/library/debian:bookworm  # what `FROM debian:bookworm` resolves to
IMAGE=localhost/kforge:ctest
BUILD_STAGE=localhost/kforge-build:ctest
LABEL=org.opencontainers.image.title=kforge  # on every image the Dockerfile makes
T0=$SECONDS

skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAILED: $*"
  exit 1
}
step() { echo "-- $* (at $((SECONDS - T0)) s)"; }

[ "$(id -u)" -eq 0 ] || skip "needs root: the test drives rootful podman"
for tool in podman runc debootstrap curl; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh installs it)"
done
/usr/bin/python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml is not installed (scripts/setup.sh installs it)"
# podman raises nofile and nproc for its containers beyond what a process without
# CAP_SYS_RESOURCE may set (these machines are containers themselves): ask for what is allowed.
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=1048576
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
LIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)

# One run at a time on a machine (several checkouts may run their suites at once): they share
# the image's tag and the layer cache, and a prune must not meet another run's build.
exec 9>/var/tmp/kforge-docker-test.lock
flock 9

WORK=$(mktemp -d /var/tmp/kforge-docker-test.XXXXXX)
RUNNING=()
cleanup() {
  for c in "${RUNNING[@]}"; do "${PODMAN[@]}" rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
# podman's own complaints (no systemd here to time health checks) go to a log, not the output.
PLOG=$WORK/podman.log

# --- the base image -----------------------------------------------------------------------
if ! "${PODMAN[@]}" image exists "$BASE"; then
  step "making $BASE with debootstrap (once)"
  root=$WORK/base
  if ! debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1; then
    tail -5 "$WORK/debootstrap.log"
    skip "debootstrap could not make a Debian 12 base (deb.debian.org unreachable?)"
  fi
  # The sources Debian's official image has (security updates included), and no package
  # lists or downloaded packages in the layer.
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | "${PODMAN[@]}" import -q --change 'CMD ["bash"]' - "$BASE" >/dev/null
  rm -rf "$root"
fi
if ! out=$("${PODMAN[@]}" run --rm --network=host "${LIMITS[@]}" "$BASE" true 2>&1); then
  skip "podman cannot run a container here: $out"
fi

# --- build --------------------------------------------------------------------------------
step "podman build -f docker/Dockerfile"
build_start=$SECONDS
# --format docker keeps HEALTHCHECK (OCI images have no such field); --pull=never: the base
# is the local one (Docker Hub is out of reach anyway). The build stage first, under a name
# of its own: then pruning removes only what earlier builds left behind, never the layer
# cache of this one; the whole image then takes that stage from the cache.
BUILD=("${PODMAN[@]}" build --network=host --pull=never --format docker --layers "${LIMITS[@]}"
  -f "$SRC/docker/Dockerfile")
if ! "${BUILD[@]}" --target build -t "$BUILD_STAGE" "$SRC" >"$WORK/build.log" 2>&1 ||
  ! "${BUILD[@]}" -t "$IMAGE" "$SRC" >>"$WORK/build.log" 2>&1; then
  tail -40 "$WORK/build.log"
  fail "podman build failed"
fi
build_s=$((SECONDS - build_start))
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")
echo "image $IMAGE: $((size / 1000000)) MB, built in $build_s s"
"${PODMAN[@]}" image prune -f --filter "label=$LABEL" >/dev/null 2>>"$PLOG" || true

# --- the runtime image holds what serving needs and nothing to build kforge with ----------
step "runtime image contents"
# Whatever the build stage installs and the runtime stage does not must be absent.
build_only=$(/usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import check_files as c
print(" ".join(c.build_only_packages("docker/Dockerfile")))' "$SRC/tests/docker")
# The script runs in the container: its $ are its own; the package names are its words.
# shellcheck disable=SC2016,SC2086
"${PODMAN[@]}" run --rm --network=host --no-healthcheck "${LIMITS[@]}" --entrypoint /bin/sh "$IMAGE" -c '
  bad=0
  for p in kforge kforge-runner-cpu kforge-runner-rocm g++ hipcc bwrap tini curl; do
    command -v "$p" >/dev/null || { echo "missing: $p"; bad=1; }
  done
  for p in "$@"; do
    ! dpkg-query -W -f="\${Status}" "$p" 2>/dev/null | grep -q "install ok installed" ||
      { echo "a build dependency in the runtime image: $p"; bad=1; }
  done
  for f in /usr/bin/cmake /usr/include/httplib.h /usr/include/nlohmann /usr/include/hiredis \
           /usr/include/openssl /usr/share/javascript /src /build; do
    ! test -e "$f" || { echo "a build input in the runtime image: $f"; bad=1; }
  done
  exit $bad' sh $build_only || fail "the runtime image holds the wrong things (above)"
echo "absent from the runtime image: $build_only"

# --- run ----------------------------------------------------------------------------------
uid=$("${PODMAN[@]}" run --rm --network=host --no-healthcheck "${LIMITS[@]}" --entrypoint /usr/bin/id "$IMAGE" -u)
gid=$("${PODMAN[@]}" run --rm --network=host --no-healthcheck "${LIMITS[@]}" --entrypoint /usr/bin/id "$IMAGE" -g)
[ "$uid" != 0 ] || fail "the image's user is root"
mkdir "$WORK/cache"
chown "$uid:$gid" "$WORK/cache"  # as docs/OPERATIONS.md says for a bind-mounted cache
token=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
printf 'submit:%s\n' "$token" >"$WORK/tokens"
chown "$uid:$gid" "$WORK/tokens"
chmod 600 "$WORK/tokens"

# start NAME [podman run options...]: runs the image on a free port (host network: there is
# no other here) with the cache and token file mounted, and waits until it is ready; sets URL.
start() {
  local name=$1 port
  shift
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  RUNNING+=("$name")
  "${PODMAN[@]}" run -d --name "$name" --network=host "${LIMITS[@]}" -e KFORGE_PORT="$port" "$@" \
    -v "$WORK/cache:/var/cache/kforge" -v "$WORK/tokens:/run/secrets/kforge_tokens:ro" "$IMAGE" >/dev/null 2>>"$PLOG"
  URL=http://127.0.0.1:$port
  for _ in $(seq 1 120); do
    curl -fsS -o /dev/null "$URL/readyz" 2>/dev/null && break
    [ "$("${PODMAN[@]}" inspect -f '{{.State.Running}}' "$name")" = true ] || break
    sleep 0.5
  done
  if ! curl -fsS -o /dev/null "$URL/readyz"; then
    "${PODMAN[@]}" logs "$name" 2>&1 | tail -20
    fail "$name did not become ready on $URL"
  fi
  # The address it bound, from its first stdout line (which may reach the log a moment
  # after /readyz answers).
  local stdout=""
  for _ in $(seq 1 20); do
    stdout=$("${PODMAN[@]}" logs "$name" 2>/dev/null)
    [[ $stdout == *"listening on "* ]] && break
    sleep 0.5
  done
  [[ $stdout == "listening on http://0.0.0.0:$port"$'\n'* ]] ||
    fail "kforge does not listen on 0.0.0.0 in the container: ${stdout:0:200}"
}

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
start kforge-ctest-$$
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
mapfile -t secopts < <(/usr/bin/python3 -c 'import sys, yaml
s = yaml.safe_load(open(sys.argv[1]))["services"]["kforge-a"]
for o in s["security_opt"]: print("--security-opt=" + o)
print("--env=KFORGE_SANDBOX=" + s["environment"]["KFORGE_SANDBOX"])' "$SRC/docker/compose.yaml")
echo "${secopts[*]}"
start kforge-ctest-bwrap-$$ "${secopts[@]}"
compile 5 bwrap

echo "passed in $((SECONDS - T0)) s (build $build_s s); image $((size / 1000000)) MB"
