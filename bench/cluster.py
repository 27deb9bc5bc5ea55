#!/usr/bin/python3
"""The cluster's costs, in one run (issue 13): redis-server, kforge instances, nginx.

1. Hit throughput through nginx: wrk GET of one artifact through nginx in front of 1 instance,
   then in front of 3 instances (same machine, same run).
2. The cost of a shared-tier hit against a local hit: N kernels compiled on instance A; each
   asked of instance B (empty local cache: fetched from Redis, verified, published locally),
   then asked of B again (a local hit). POST /kernels latency, median and p90, same run.

Usage: bench/cluster.py [--seconds 15] [--connections 64] [--kernels 40] [--kforge build/bin/kforge]
Prints markdown tables for docs/BENCHMARKS.md. Needs redis-server, nginx and wrk.
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def source(factor):
    return ("#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
            "extern \"C\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, "
            "uint8_t* workspace, void* stream) {\n  if (workspace_size) { *workspace_size = 0; return 0; }\n"
            f"  for (int64_t i = 0; i < n; ++i) y[i] = {factor} * x[i];\n  return 0;\n}}\n")


def post(url, body):
    t = time.perf_counter()
    req = urllib.request.Request(url + "/kernels", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        answer = json.load(r)
    return answer, (time.perf_counter() - t) * 1000


class Cluster:
    def __init__(self, kforge, work):
        self.kforge, self.work, self.procs = kforge, work, []
        self.redis_port = free_port()
        self.spawn(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--maxmemory", "512mb", "--maxmemory-policy", "allkeys-lru"], "redis")
        wait_port(self.redis_port)
        self.urls = {}

    def spawn(self, argv, name, **kw):
        p = subprocess.Popen(argv, stdout=kw.pop("stdout", open(os.path.join(self.work, name + ".log"), "w")),
                             stderr=open(os.path.join(self.work, name + ".err"), "w"), text=True, **kw)
        self.procs.append(p)
        return p

    def instance(self, iid):
        p = self.spawn([self.kforge, "serve", "--port", "0", "--cache-dir", os.path.join(self.work, "cache-" + iid),
                        "--redis", f"redis://127.0.0.1:{self.redis_port}", "--instance-id", iid], iid,
                       stdout=subprocess.PIPE)
        self.urls[iid] = p.stdout.readline().split()[-1]
        return self.urls[iid]

    def nginx(self, ids):
        port = free_port()
        d = tempfile.mkdtemp(dir=self.work)
        os.chmod(self.work, 0o755)
        ups = "".join(f"    server {self.urls[i][7:]};\n" for i in ids)
        per = "".join(f"  upstream kforge_{i} {{ server {self.urls[i][7:]}; }}\n" for i in ids)
        user = "user root root;\n" if os.geteuid() == 0 else ""
        conf = (f"{user}worker_processes auto;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\n"
                "events { worker_connections 4096; }\nhttp {\n  access_log off;\n"
                f"  client_body_temp_path {d}; proxy_temp_path {d};\n"
                f"  upstream kforge {{\n{ups}    keepalive 64;\n  }}\n{per}"
                f"  server {{\n    listen 127.0.0.1:{port};\n    include {ROOT}/docker/nginx/kforge-locations.conf;\n  }}\n}}\n")
        open(os.path.join(d, "nginx.conf"), "w").write(conf)
        p = self.spawn(["nginx", "-p", d, "-c", os.path.join(d, "nginx.conf"), "-g", "daemon off;"], "nginx")
        wait_port(port)
        return p, f"http://127.0.0.1:{port}"

    def close(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            p.wait()


def wrk(url, seconds, conns):
    out = subprocess.run(["wrk", "-t", str(os.cpu_count()), "-c", str(conns), "-d", f"{seconds}s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, lat.get("50"), lat.get("99"), int(errors.group(1)) if errors else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--kernels", type=int, default=40)
    ap.add_argument("--kforge", default=os.path.join(ROOT, "build", "bin", "kforge"))
    a = ap.parse_args()
    for tool in ("redis-server", "nginx", "wrk"):
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool):
            raise SystemExit(f"cluster.py: {tool} is missing (scripts/setup.sh installs it)")
    os.environ["PATH"] += ":/usr/sbin"
    work = tempfile.mkdtemp(prefix="kforge-cluster-bench-")
    c = Cluster(a.kforge, work)
    try:
        a_url, b_url, c_url = c.instance("a"), c.instance("b"), c.instance("c")
        # 2. shared-tier hit vs local hit
        for f in range(a.kernels):
            post(a_url, {"backend": "cpu", "arch": "x86-64", "source": source(100 + f)})
        remote_ms, local_ms = [], []
        for f in range(a.kernels):
            answer, ms = post(b_url, {"backend": "cpu", "arch": "x86-64", "source": source(100 + f)})
            assert answer["cache"] == "hit", answer["cache"]
            remote_ms.append(ms)
        for f in range(a.kernels):
            answer, ms = post(b_url, {"backend": "cpu", "arch": "x86-64", "source": source(100 + f)})
            local_ms.append(ms)
        size = answer["artifact"]["bytes"]
        # 1. hit throughput through nginx, 1 and 3 instances
        answer, _ = post(a_url, {"backend": "cpu", "arch": "x86-64", "source": source(100)})
        for i in ("b", "c"):  # every instance has it locally before the load starts
            post(c.urls[i], {"backend": "cpu", "arch": "x86-64", "source": source(100)})
        rows = []
        for ids in (["a"], ["a", "b", "c"]):
            proc, nginx_url = c.nginx(ids)
            rows.append((len(ids),) + wrk(nginx_url + answer["artifact"]["url"], a.seconds, a.connections))
            proc.terminate()
            proc.wait()
        cpu = open("/proc/cpuinfo").read()
        model = re.search(r"model name\s*:\s*(.*)", cpu).group(1)
        print(f"bench/cluster.py --seconds {a.seconds} --connections {a.connections} --kernels {a.kernels}; "
              f"{os.cpu_count()} cores ({model}), {time.strftime('%Y-%m-%d')}\n")
        print(f"| GET artifact ({size} B) through nginx | requests/s | p50 | p99 | non-2xx |\n|---|---|---|---|---|")
        for n, rps, p50, p99, err in rows:
            print(f"| {n} instance{'s' if n > 1 else ''} | {rps:,.0f} | {p50} | {p99} | {err} |")
        print(f"\n3 vs 1 instance: {rows[1][1] / rows[0][1]:.2f}x\n")
        med = lambda xs: statistics.median(xs)
        p90 = lambda xs: sorted(xs)[int(0.9 * (len(xs) - 1))]
        print(f"| POST /kernels hit on instance b ({a.kernels} kernels) | median | p90 |\n|---|---|---|")
        print(f"| shared tier (Redis → verify → local publish) | {med(remote_ms):.2f} ms | {p90(remote_ms):.2f} ms |")
        print(f"| local tier | {med(local_ms):.2f} ms | {p90(local_ms):.2f} ms |")
        print(f"\nshared-tier hit / local hit: {med(remote_ms) / med(local_ms):.2f}x (median)")
    finally:
        c.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
