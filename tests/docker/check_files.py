#!/usr/bin/python3
"""What can be checked of docker/ without running it: docker/compose.yaml (and the CUDA
override) as a real YAML parser reads it, against the repository's files, and the three
Dockerfiles against what docs/OPERATIONS.md ("Containers") says they are. The CUDA image
cannot be built on CI machines (NVIDIA's registry is out of reach), so this is all it gets
there; tests/docker/run.sh builds and runs docker/Dockerfile, tests/docker/rocm.sh
docker/Dockerfile.rocm (both Debian 13, sharing their build stage).

Usage: tests/docker/check_files.py [SOURCE_DIR]. Exit 0 passed, 1 failed, 77 skipped (no
python3-yaml: scripts/setup.sh installs it).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCKER = os.path.join(SRC, "docker")
failures = []


def check(ok, what):
    print(("ok      " if ok else "FAILED  ") + what)
    if not ok:
        failures.append(what)
    return ok


def read(rel):
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        return f.read()


# --- Dockerfiles -------------------------------------------------------------------------
INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def parse_dockerfile(text):
    """[(INSTRUCTION, arguments, line)] with the builder's rules: `#` lines are comments (also
    inside a continued instruction), a trailing backslash continues the line."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        if not buf:
            if not line.strip():
                continue
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip(), start))
        buf = ""
    if buf:
        out.append(("<unterminated>", buf, start))
    return out


def stages(instructions):
    """[{name, base, instructions}] per FROM."""
    result = []
    for ins, args, line in instructions:
        if ins == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            result.append({"base": words[0], "name": words[2] if len(words) > 2 and words[1].upper() == "AS" else None,
                           "ins": []})
        elif result:
            result[-1]["ins"].append((ins, args, line))
    return result


def apt_packages(stage):
    """The packages every `apt-get install` of a stage names."""
    pkgs = set()
    for ins, args, _ in stage["ins"]:
        if ins != "RUN":
            continue
        lex = shlex.shlex(args, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words = []
        for w in list(lex) + [";"]:  # each command of the shell line, as the shell splits it
            if w not in ("&&", "||", ";", "|"):
                words.append(w)
                continue
            if "apt-get" in words and "install" in words:
                pkgs.update(x for x in words[words.index("install") + 1:] if not x.startswith("-"))
            words = []
    return pkgs


def documented_images():
    """docs/OPERATIONS.md's table: | `docker/FILE` | `base` | `build packages` | `runtime packages` |"""
    rows = {}
    for line in read("docs/OPERATIONS.md").splitlines():
        cells = re.findall(r"`([^`]*)`", line)
        if line.startswith("| `docker/Dockerfile") and len(cells) == 4:
            rows[cells[0]] = {"base": cells[1], "build": set(cells[2].split()), "runtime": set(cells[3].split())}
    return rows


def dockerignore_allows(path):
    kept = [l[1:].rstrip("/") for l in read(".dockerignore").splitlines() if l.startswith("!")]
    return any(path == k or path.startswith(k + "/") for k in kept)


def check_dockerfile(rel, doc, runner):
    text = read(rel)
    ins = parse_dockerfile(text)
    check(all(i in INSTRUCTIONS for i, _, _ in ins),
          f"{rel}: every instruction is a Dockerfile instruction "
          f"({[(i, l) for i, _, l in ins if i not in INSTRUCTIONS] or 'none unknown'})")
    check(ins and ins[0][0] == "FROM", f"{rel}: starts with FROM")
    st = stages(ins)
    check(len(st) == 2 and st[0]["name"] == "build" and st[1]["name"] is None,
          f"{rel}: two stages, `build` and the runtime one")
    if not check(doc is not None, f"{rel}: docs/OPERATIONS.md names its base image and packages"):
        return
    for s in st:
        check(s["base"] == doc["base"], f"{rel}: FROM {s['base']} is the documented {doc['base']}")
    if len(st) != 2:
        return
    build, runtime = st
    check(apt_packages(build) == doc["build"],
          f"{rel}: the build stage installs the documented packages (differences: "
          f"{sorted(apt_packages(build) ^ doc['build']) or 'none'})")
    check(apt_packages(runtime) == doc["runtime"],
          f"{rel}: the runtime stage installs the documented packages (differences: "
          f"{sorted(apt_packages(runtime) ^ doc['runtime']) or 'none'})")
    dev = sorted(p for p in apt_packages(runtime) if p.endswith("-dev") and p != "libamdhip64-dev")
    check(not dev and not {"cmake", "make", "ccache"} & apt_packages(runtime),
          f"{rel}: no build tool or -dev package at runtime but the ROCm headers hipcc needs ({dev or 'none'})")
    build_run = " ".join(a for i, a, _ in build["ins"] if i == "RUN")
    check("-DKFORGE_BUILD_TESTS=OFF" in build_run and re.search(rf"--target kforge kforge-runner-cpu {runner}\b", build_run),
          f"{rel}: builds the serving targets only (kforge, kforge-runner-cpu, {runner}), no tests")
    for i, a, line in build["ins"]:
        if i == "COPY" and not a.startswith("--from"):
            for p in a.split()[:-1]:
                check(os.path.exists(os.path.join(SRC, p)) and dockerignore_allows(p.rstrip("/")),
                      f"{rel}:{line}: COPY {p} exists and .dockerignore lets it into the context")
    rt = {i: a for i, a, _ in runtime["ins"]}
    check(rt.get("USER") not in (None, "root", "0"), f"{rel}: runs as a non-root user ({rt.get('USER')})")
    check(rt.get("VOLUME") == "/var/cache/kforge", f"{rel}: VOLUME /var/cache/kforge")
    check("/readyz" in rt.get("HEALTHCHECK", ""), f"{rel}: HEALTHCHECK on /readyz")
    env = rt.get("ENV", "")
    for want in ("KFORGE_HOST=0.0.0.0", "KFORGE_CACHE_DIR=/var/cache/kforge", "KFORGE_TOKEN_FILE=/run/secrets/kforge_tokens"):
        check(want in env, f"{rel}: ENV {want}")
    check(any(i == "COPY" and a.startswith("--from=build") for i, a, _ in runtime["ins"]),
          f"{rel}: the runtime stage takes the binaries from the build stage")


# --- compose -----------------------------------------------------------------------------
def nginx_upstreams(text):
    """{upstream name: [server host:port, ...]}"""
    return {m.group(1): re.findall(r"\bserver\s+([^\s;]+)", m.group(2))
            for m in re.finditer(r"upstream\s+(\S+)\s*\{(.*?)\}", text, re.S)}


def host_path(compose_dir, p):
    return os.path.normpath(os.path.join(compose_dir, os.path.expandvars(p)))


def build_only_packages(rel):
    """What the build stage of a Dockerfile installs and its runtime stage does not: none of it
    may be in the runtime image (tests/docker/run.sh looks)."""
    build, runtime = stages(parse_dockerfile(read(rel)))
    return sorted(apt_packages(build) - apt_packages(runtime))


# The service keys of the Compose specification (compose-spec.io) that a file like ours may
# use: a misspelt key is otherwise only found by `docker compose config` on a GPU host.
SERVICE_KEYS = {
    "annotations", "build", "cap_add", "cap_drop", "cgroup", "command", "configs", "container_name",
    "cpus", "depends_on", "deploy", "devices", "dns", "entrypoint", "env_file", "environment", "expose",
    "extends", "extra_hosts", "group_add", "healthcheck", "hostname", "image", "init", "ipc", "labels",
    "logging", "mem_limit", "network_mode", "networks", "pid", "platform", "ports", "privileged",
    "profiles", "pull_policy", "read_only", "restart", "runtime", "secrets", "security_opt", "shm_size",
    "stop_grace_period", "stop_signal", "sysctls", "tmpfs", "ulimits", "user", "volumes", "working_dir",
}


def check_compose():
    import yaml

    rel = "docker/compose.yaml"
    try:
        with open(os.path.join(SRC, rel), encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except yaml.YAMLError as e:
        check(False, f"{rel}: parses as YAML ({e})")
        return
    check(True, f"{rel}: parses as YAML")
    services = doc.get("services", {})
    kforge = {n: s for n, s in services.items() if n.startswith("kforge-")}
    check({"redis", "nginx"} <= set(services) and len(kforge) >= 2,
          f"{rel}: services redis, nginx and at least two kforge instances ({sorted(services)})")
    for name, s in services.items():
        check("healthcheck" in s, f"{rel}: {name} has a health check")
        check(set(s) <= SERVICE_KEYS, f"{rel}: {name} uses Compose service keys only ({sorted(set(s) - SERVICE_KEYS) or 'yes'})")

    cmd = services.get("redis", {}).get("command", [])
    cmd = " ".join(cmd) if isinstance(cmd, list) else str(cmd)
    check("--maxmemory-policy allkeys-lru" in cmd and "--maxmemory " in cmd and "--appendonly no" in cmd,
          f"{rel}: redis is a cache as docs/SCALING.md says (maxmemory, allkeys-lru, no persistence)")

    ids = {}
    for name, s in kforge.items():
        build = s.get("build", {})
        dockerfile = os.path.join(host_path(DOCKER, build.get("context", ".")), build.get("dockerfile", "Dockerfile"))
        check(os.path.isfile(dockerfile), f"{rel}: {name} builds {os.path.relpath(dockerfile, SRC)}, which exists")
        env = s.get("environment", {})
        ids[name] = env.get("KFORGE_INSTANCE_ID")
        check(str(env.get("KFORGE_REDIS", "")).startswith("redis://redis:"), f"{rel}: {name} uses the redis service")
        check(ids[name] and re.fullmatch(r"[a-z0-9]{1,32}", ids[name]) and name == f"kforge-{ids[name]}",
              f"{rel}: {name} has instance id {ids[name]!r}")
        check(env.get("KFORGE_ADVERTISE_URL") == f"http://{name}:8080", f"{rel}: {name} advertises http://{name}:8080")
        check("kforge_tokens" in s.get("secrets", []) and env.get("KFORGE_TOKEN_FILE") == "/run/secrets/kforge_tokens",
              f"{rel}: {name} reads its tokens from the kforge_tokens secret")
        check(env.get("KFORGE_SANDBOX") == "bwrap" and "systempaths=unconfined" in s.get("security_opt", []),
              f"{rel}: {name} asks for the bwrap sandbox and lets it mount /proc")
        cache = [v for v in s.get("volumes", []) if str(v).split(":")[1:2] == ["/var/cache/kforge"]]
        check(cache and cache[0].split(":")[0] in (doc.get("volumes") or {}),
              f"{rel}: {name} keeps its cache on a named volume")
    check(len(set(ids.values())) == len(ids), f"{rel}: instance ids are distinct")
    secret = doc.get("secrets", {}).get("kforge_tokens", {}).get("file", "")
    default = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", secret)
    check(os.path.relpath(host_path(DOCKER, default), SRC) == "docker/tokens" and "/docker/tokens" in read(".gitignore"),
          f"{rel}: the token file (default {default}) is git-ignored")

    # nginx: the repository's files, mounted where kforge.conf includes them from.
    mounts = {}
    for v in services.get("nginx", {}).get("volumes", []):
        src, dst = str(v).split(":")[:2]
        check(os.path.isfile(host_path(DOCKER, src)), f"{rel}: nginx mounts {src}, which exists")
        mounts[dst] = os.path.realpath(host_path(DOCKER, src))
    conf = os.path.realpath(os.path.join(DOCKER, "nginx", "kforge.conf"))
    locations = os.path.realpath(os.path.join(DOCKER, "nginx", "kforge-locations.conf"))
    check(mounts.get("/etc/nginx/conf.d/default.conf") == conf,
          f"{rel}: nginx's default server is docker/nginx/kforge.conf")
    include = re.findall(r"include\s+([^\s;]+)", read("docker/nginx/kforge.conf"))
    check(include and mounts.get(include[0]) == locations,
          f"{rel}: docker/nginx/kforge-locations.conf is mounted where kforge.conf includes it ({include})")
    check("docker\" / \"nginx\" / \"kforge-locations.conf" in read("tests/integration/cluster_test.cpp"),
          "the cluster test includes the same docker/nginx/kforge-locations.conf")
    ups = nginx_upstreams(read("docker/nginx/kforge.conf"))
    check(sorted(ups.get("kforge", [])) == sorted(f"{n}:8080" for n in kforge),
          f"docker/nginx/kforge.conf: upstream kforge is every compose instance ({ups.get('kforge')})")
    for name, i in ids.items():
        check(ups.get(f"kforge_{i}") == [f"{name}:8080"], f"docker/nginx/kforge.conf: upstream kforge_{i} is {name}")
    check(set(ups) == {"kforge"} | {f"kforge_{i}" for i in ids.values()},
          f"docker/nginx/kforge.conf: no upstream without its compose service ({sorted(ups)})")
    nginx_accepts(include[0] if include else None)

    gpu_override("docker/compose.cuda.yaml", "docker/Dockerfile.cuda", kforge,
                 lambda s: any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", [])
                               for d in s.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])),
                 "reserves the NVIDIA GPUs")
    gpu_override("docker/compose.rocm.yaml", "docker/Dockerfile.rocm", kforge,
                 lambda s: {"/dev/kfd", "/dev/dri"} <= set(s.get("devices", [])) and len(s.get("group_add", [])) == 2,
                 "gets /dev/kfd and /dev/dri and the host's video and render groups")


def gpu_override(rel, dockerfile_rel, kforge, has_gpus, gpus_what):
    """A GPU host's override of docker/compose.yaml: every kforge instance, and nothing else,
    built from the GPU image and given the GPUs."""
    import yaml

    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        over = yaml.safe_load(f).get("services", {})
    check(True, f"{rel}: parses as YAML")
    check(set(over) == set(kforge), f"{rel}: overrides every kforge instance and nothing else ({sorted(over)})")
    for name, s in over.items():
        check(set(s) <= SERVICE_KEYS, f"{rel}: {name} uses Compose service keys only ({sorted(set(s) - SERVICE_KEYS) or 'yes'})")
        build = s.get("build", {})
        dockerfile = os.path.join(host_path(DOCKER, build.get("context", ".")), build.get("dockerfile", ""))
        check(os.path.relpath(dockerfile, SRC) == dockerfile_rel, f"{rel}: {name} builds {dockerfile_rel}")
        check(has_gpus(s), f"{rel}: {name} {gpus_what}")


def nginx_accepts(locations_path):
    """`nginx -t` on docker/nginx/ at the paths compose mounts them, with the compose service
    names resolving (a private mount namespace with its own /etc/hosts and /etc/nginx)."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if os.geteuid() != 0 or not nginx or not shutil.which("unshare") or not locations_path:
        print("not checked: nginx -t (needs root, nginx and unshare)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost kforge-a kforge-b kforge-c kforge-d redis\n")
        with open(os.path.join(tmp, "nginx.conf"), "w") as f:
            f.write(f"pid {tmp}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
                    "http { include /etc/nginx/conf.d/default.conf; }\n")
        script = (f"mount --bind {tmp}/hosts /etc/hosts && mount -t tmpfs tmpfs /etc/nginx && "
                  f"mkdir /etc/nginx/conf.d && cp {DOCKER}/nginx/kforge.conf /etc/nginx/conf.d/default.conf && "
                  f"cp {DOCKER}/nginx/kforge-locations.conf {locations_path} && "
                  f"{nginx} -t -q -p {tmp} -c {tmp}/nginx.conf")
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"nginx -t accepts docker/nginx/ as compose mounts it {r.stderr.strip()}")


# --- docs --------------------------------------------------------------------------------
def check_settings_documented():
    names = re.findall(r'^\s*\{"([a-z-]+)", "[^"]*", "', read("service/serve_config.cpp"), re.M)
    docs = read("docs/OPERATIONS.md")
    section = docs[docs.find("## Containers"):]
    missing = [n for n in names if n != "config" and "KFORGE_" + n.upper().replace("-", "_") not in section]
    check(names and not missing, f"docs/OPERATIONS.md (Containers): every `kforge serve` setting's variable ({missing or 'all there'})")


def main():
    global SRC, DOCKER
    if len(sys.argv) > 1:
        SRC = os.path.abspath(sys.argv[1])
        DOCKER = os.path.join(SRC, "docker")
    try:
        import yaml  # noqa: F401
    except ImportError:
        print("SKIPPED: python3-yaml is not installed (scripts/setup.sh installs it)")
        return 77
    images = documented_images()
    check_dockerfile("docker/Dockerfile", images.get("docker/Dockerfile"), "kforge-runner-rocm")
    check_dockerfile("docker/Dockerfile.cuda", images.get("docker/Dockerfile.cuda"), "kforge-runner-cuda")
    check(re.fullmatch(r"nvidia/cuda:13\.0\.\d+-devel-ubuntu24\.04", images.get("docker/Dockerfile.cuda", {}).get("base", "")),
          "docker/Dockerfile.cuda: the base is NVIDIA's CUDA 13.0 devel image on Ubuntu 24.04")
    check_dockerfile("docker/Dockerfile.rocm", images.get("docker/Dockerfile.rocm"), "kforge-runner-rocm")
    rocm = images.get("docker/Dockerfile.rocm", {})
    check(rocm.get("base") == "debian:trixie" and {"hipcc", "librocblas0"} <= rocm.get("runtime", set())
          and "librocblas-dev" in rocm.get("build", set()),
          "docker/Dockerfile.rocm: Debian 13 with its hipcc (ROCm 5.7) and rocBLAS, built against and shipped")
    check("-DKFORGE_ROCBLAS=ON" in read("docker/Dockerfile.rocm"),
          "docker/Dockerfile.rocm: kforge-runner-rocm must link rocBLAS (-DKFORGE_ROCBLAS=ON)")
    # The two Debian images build in one stage: the same base and instructions up to the compile,
    # and a compile that differs only in rocBLAS. Then a builder shares those layers, and the
    # second compile takes every object but the rocm runner's from ccache (same compiler, flags,
    # paths): CI builds kforge for images once, not twice.
    plain, with_blas = (stages(parse_dockerfile(read(f)))[0] for f in ("docker/Dockerfile", "docker/Dockerfile.rocm"))
    steps = lambda st: [(ins, args) for ins, args, _ in st["ins"]]
    compile_of = lambda st: steps(st)[-1][1] if st["ins"] else ""
    check(plain["base"] == with_blas["base"] and steps(plain)[:-1] == steps(with_blas)[:-1]
          and "-DKFORGE_ROCBLAS=OFF" in compile_of(plain)
          and compile_of(plain).replace("-DKFORGE_ROCBLAS=OFF", "-DKFORGE_ROCBLAS=ON") == compile_of(with_blas),
          "docker/Dockerfile and docker/Dockerfile.rocm: one build stage (the same base and steps; "
          "the compile differs only in -DKFORGE_ROCBLAS=OFF/ON)")
    check_compose()
    check_settings_documented()
    print(f"check_files: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
