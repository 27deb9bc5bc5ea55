# shellcheck shell=bash
# What tests/docker/run.sh (docker/Dockerfile) and tests/docker/rocm.sh (docker/Dockerfile.rocm)
# share: sourced after `set -euo pipefail` with SRC set.
#
# What works on these machines (Debian 12, no Docker Hub, no container network): rootful
# podman with runc and cgroupfs (crun and the systemd cgroup manager fail), host network,
# and base images made with debootstrap from deb.debian.org and `podman import`, tagged as
# the name a Dockerfile's FROM uses. They are made once and kept; podman's layer cache and
# the builds' ccache are kept too, so a later run rebuilds only what a change touches.

T0=$SECONDS
LABEL=org.opencontainers.image.title=kforge # on every image the Dockerfiles make

skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAILED: $*"
  exit 1
}
step() { echo "-- $* (at $((SECONDS - T0)) s)"; }

# Prerequisites, podman's options (PODMAN, LIMITS), the machine's lock, a work directory (WORK,
# removed at exit with every container in RUNNING) and PLOG, where podman's complaints go.
docker_test_setup() {
  [ "$(id -u)" -eq 0 ] || skip "needs root: the test drives rootful podman"
  local tool
  for tool in podman runc debootstrap curl; do
    command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh installs it)"
  done
  /usr/bin/python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml is not installed (scripts/setup.sh installs it)"
  # podman raises nofile and nproc for its containers beyond what a process without
  # CAP_SYS_RESOURCE may set (these machines are containers themselves): ask for what is allowed.
  local nofile
  nofile=$(ulimit -Hn)
  [ "$nofile" = unlimited ] && nofile=1048576
  PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
  LIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)
  # One run at a time on a machine (several checkouts may run their suites at once, and both
  # image tests build): they share the layer cache, and a prune must not meet another's build.
  exec 9>/var/tmp/kforge-docker-test.lock
  flock 9
  WORK=$(mktemp -d /var/tmp/kforge-docker-test.XXXXXX)
  RUNNING=()
  trap docker_test_cleanup EXIT
  # podman's own complaints (no systemd here to time health checks) go to a log, not the output.
  PLOG=$WORK/podman.log
}

docker_test_cleanup() {
  local c
  for c in "${RUNNING[@]}"; do "${PODMAN[@]}" rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}

# debian_base SUITE: docker.io/library/debian:SUITE (what `FROM debian:SUITE` resolves to), made
# with debootstrap the first time, with the sources Debian's official image has (security
# updates included) and no package lists or downloaded packages in the layer.
debian_base() {
  local suite=$1 base=docker.io/library/debian:$1 root out
  if ! "${PODMAN[@]}" image exists "$base"; then
    step "making $base with debootstrap (once)"
    root=$WORK/base-$suite
    if ! debootstrap --variant=minbase "$suite" "$root" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1; then
      tail -5 "$WORK/debootstrap.log"
      skip "debootstrap could not make a Debian $suite base (deb.debian.org unreachable?)"
    fi
    rm -f "$root/etc/apt/sources.list"
    cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | "${PODMAN[@]}" import -q --change 'CMD ["bash"]' - "$base" >/dev/null
    rm -rf "$root"
  fi
  if ! out=$("${PODMAN[@]}" run --rm --network=host "${LIMITS[@]}" "$base" true 2>&1); then
    skip "podman cannot run a container here: $out"
  fi
}

# build_image DOCKERFILE BUILD_STAGE IMAGE: podman build; sets build_s and size.
# --format docker keeps HEALTHCHECK (OCI images have no such field); --pull=never: the base
# is the local one (Docker Hub is out of reach anyway). The build stage first, under a name
# of its own: then pruning removes only what earlier builds left behind, never the layer
# cache of this one; the whole image then takes that stage from the cache.
build_image() {
  local dockerfile=$1 stage=$2 image=$3 start=$SECONDS
  local build=("${PODMAN[@]}" build --network=host --pull=never --format docker --layers "${LIMITS[@]}"
    -f "$SRC/$dockerfile")
  if ! "${build[@]}" --target build -t "$stage" "$SRC" >"$WORK/build.log" 2>&1 ||
    ! "${build[@]}" -t "$image" "$SRC" >>"$WORK/build.log" 2>&1; then
    tail -40 "$WORK/build.log"
    fail "podman build -f $dockerfile failed"
  fi
  build_s=$((SECONDS - start))
  size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$image")
  echo "image $image: $((size / 1000000)) MB, built in $build_s s"
  "${PODMAN[@]}" image prune -f --filter "label=$LABEL" >/dev/null 2>>"$PLOG" || true
}

# check_runtime_contents DOCKERFILE IMAGE PROGRAM...: the runtime image has the programs and none
# of what only the build stage installs, nor the build's inputs.
check_runtime_contents() {
  local dockerfile=$1 image=$2 build_only
  shift 2
  build_only=$(/usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import check_files as c
print(" ".join(c.build_only_packages(sys.argv[2])))' "$SRC/tests/docker" "$dockerfile")
  # The script runs in the container: its $ are its own; the names are its words.
  # shellcheck disable=SC2016,SC2086
  "${PODMAN[@]}" run --rm --network=host --no-healthcheck "${LIMITS[@]}" --entrypoint /bin/sh "$image" -c '
    bad=0
    programs=$1
    shift
    for p in $programs; do
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
    exit $bad' sh "$*" $build_only || fail "the runtime image holds the wrong things (above)"
  echo "absent from the runtime image: $build_only"
}

# start NAME IMAGE [podman run options...]: runs IMAGE on a free port (host network: there is
# no other here) with $WORK/cache and $WORK/tokens mounted, and waits until it is ready; sets URL.
start() {
  local name=$1 image=$2 port
  shift 2
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  RUNNING+=("$name")
  "${PODMAN[@]}" run -d --name "$name" --network=host "${LIMITS[@]}" -e KFORGE_PORT="$port" "$@" \
    -v "$WORK/cache:/var/cache/kforge" -v "$WORK/tokens:/run/secrets/kforge_tokens:ro" "$image" >/dev/null 2>>"$PLOG"
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
  # $(...) drops the trailing newline: the line may be all there is, or the first of several.
  [[ $stdout == "listening on http://0.0.0.0:$port" || $stdout == "listening on http://0.0.0.0:$port"$'\n'* ]] ||
    fail "kforge does not listen on 0.0.0.0 in the container: ${stdout:0:200}"
}

# A cache directory and a token file for the image's user (as docs/OPERATIONS.md says for a
# bind-mounted cache); sets uid, gid and token.
prepare_mounts() {
  local image=$1
  uid=$("${PODMAN[@]}" run --rm --network=host --no-healthcheck "${LIMITS[@]}" --entrypoint /usr/bin/id "$image" -u)
  gid=$("${PODMAN[@]}" run --rm --network=host --no-healthcheck "${LIMITS[@]}" --entrypoint /usr/bin/id "$image" -g)
  [ "$uid" != 0 ] || fail "the image's user is root"
  mkdir "$WORK/cache"
  chown "$uid:$gid" "$WORK/cache"
  token=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  printf 'submit:%s\n' "$token" >"$WORK/tokens"
  chown "$uid:$gid" "$WORK/tokens"
  chmod 600 "$WORK/tokens"
}

# The security options and sandbox setting docker/compose.yaml gives its instances, as podman
# run options (one a line).
compose_security_options() {
  /usr/bin/python3 -c 'import sys, yaml
s = yaml.safe_load(open(sys.argv[1]))["services"]["kforge-a"]
for o in s["security_opt"]: print("--security-opt=" + o)
print("--env=KFORGE_SANDBOX=" + s["environment"]["KFORGE_SANDBOX"])' "$SRC/docker/compose.yaml"
}
