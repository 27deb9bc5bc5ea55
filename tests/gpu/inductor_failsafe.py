#!/usr/bin/env python3
"""torch.compile never waits on a kforge that is down, hung or slow (issue 37), on a real GPU.

    python3 tests/gpu/inductor_failsafe.py --kforge BUNDLE/bin/kforge --cutlass DIR/cutlass \
        [--scenarios a,b,c,d,e] [--heartbeat 30] [--subproc] [--out failsafe.json]

Each scenario runs, in a fresh Python process with a fresh Inductor cache
(TORCHINDUCTOR_CACHE_DIR), torch.compile(mode="max-autotune") of the MLP

    y = gelu_tanh(x @ W1 + b1) @ W2 + b2      fp16, x 768x1024, W1 1024x4096, W2 4096x1024

with max_autotune_gemm_backends="CUTLASS" and cutlass_max_profiling_configs=4:

  a  no hook: the baseline (wall time, local nvcc runs, the output);
  b  hook, fallback=True, no server on its port: must finish with the local nvcc, give the
     baseline's result (checked against fp32 eager), and take at most 10% longer than (a);
  c  hook, fallback=False, no server: must fail with an error that names kforge, the URL and
     "Connection refused", less than 5 s after the first compile was tried; no local nvcc;
  d  hook, fallback=True, `kforge serve` stopped with SIGSTOP once a compile is under way: must
     fail over (reason "stalled") within the heartbeat window after the stop, and finish;
  e  hook, fallback=True, no server at first; `kforge serve` is started on that port once the
     hook has logged that it marked the server down: the breaker must close again and later
     compiles go remote (stats: remote > 0 after fallbacks > 0).

Local nvcc runs are counted as tests/gpu/inductor_hook.py counts them: the torch process gets
a logging `nvcc` (CUDACXX, first on PATH) that records its arguments and runs the real nvcc;
`--version` probes are counted apart. The server is the bundle's `kforge` (--kforge), with
`--library cutlass=DIR`, a fresh cache per start. Prints a table and writes JSON to --out.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "..", "..", "clients", "python")
M, K, N, HIDDEN = 768, 1024, 1024, 4096


def child(spec):
    """One scenario, in this (fresh) process: prints RESULT <json>."""
    import dataclasses
    import logging

    import torch
    import torch._inductor.config as cfg
    import torch.nn.functional as F

    cfg.cutlass.cutlass_dir = spec["cutlass"]
    cfg.cutlass.cutlass_max_profiling_configs = 4
    cfg.max_autotune = True
    cfg.max_autotune_gemm_backends = "CUTLASS"
    cfg.autotune_in_subproc = spec["subproc"]
    events = []  # the hook's WARNING/ERROR records: (unix time, level, message)

    class Recorder(logging.Handler):
        def emit(self, record):
            events.append((record.created, record.levelname, record.getMessage()[:400]))
            print(f"[{record.created:.3f}] {record.levelname} {record.getMessage()[:400]}",
                  file=sys.stderr, flush=True)

    hook = None
    if spec["hook"]:
        sys.path.insert(0, CLIENT)
        import kforge.inductor
        logging.getLogger("kforge.inductor").addHandler(Recorder(logging.WARNING))
        hook = kforge.inductor.install(spec["url"], fallback=spec["fallback"],
                                       heartbeat=spec["heartbeat"], backoff=1.0)
    from torch._inductor.codegen.cuda import compile_utils
    print("local nvcc for Inductor:", compile_utils._cuda_compiler(), file=sys.stderr, flush=True)

    g = torch.Generator(device="cuda").manual_seed(0)
    rnd = lambda *s, scale=1.0: (torch.randn(*s, device="cuda", generator=g) * scale).half()  # noqa: E731
    x, w1, b1 = rnd(M, K), rnd(K, HIDDEN, scale=K ** -0.5), rnd(HIDDEN, scale=0.1)
    w2, b2 = rnd(HIDDEN, N, scale=HIDDEN ** -0.5), rnd(N, scale=0.1)

    def mlp(x, w1, b1, w2, b2):
        return F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2

    res = {}
    t0 = time.time()
    try:
        out = torch.compile(mlp, mode="max-autotune")(x, w1, b1, w2, b2)
        torch.cuda.synchronize()
        res["wall_s"] = round(time.time() - t0, 1)
        ref = mlp(*(t.float() for t in (x, w1, b1, w2, b2)))
        res["rel_err"] = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        torch.save(out.cpu(), spec["out_path"])
    except Exception as e:  # noqa: BLE001 - scenario c wants exactly this error
        t_err = time.time()
        res["error"] = f"{type(e).__name__}: {e}"[-6000:]
        res["error_after_s"] = round(t_err - t0, 2)
        if events:
            res["error_after_first_failure_s"] = round(t_err - events[0][0], 2)
    if hook is not None:
        res["hook"] = dataclasses.asdict(kforge.inductor.stats())
        res["events"] = events[:20]
    print("RESULT " + json.dumps(res), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The bundle's `kforge serve` on a fixed port, with a fresh cache."""

    def __init__(self, kforge, cutlass, port, work, tag):
        cache = tempfile.mkdtemp(prefix=f"cache-{tag}-", dir=work)
        # As root, kforge's compilers run as nobody, who must reach the cache (mkdtemp: 0700).
        for d in (work, cache):
            os.chmod(d, 0o755)
        self.proc = subprocess.Popen(
            [kforge, "serve", "--port", str(port), "--cache-dir", cache, "--library", "cutlass=" + cutlass,
             "--compile-jobs", str(os.cpu_count())],
            stdout=subprocess.PIPE, stderr=open(os.path.join(work, f"server-{tag}.log"), "w"), text=True)
        line = self.proc.stdout.readline().split()
        if not line:
            self.proc.wait()
            log = open(os.path.join(work, f"server-{tag}.log")).read()[-3000:]
            raise RuntimeError(f"kforge serve exited {self.proc.returncode} before listening:\n{log}")
        self.url = line[-1]
        self.stopped = False

    def jobs(self):
        with urllib.request.urlopen(self.url + "/jobs", timeout=5) as r:
            return json.load(r)["jobs"]

    def stop_signal(self):
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.stopped = True

    def close(self):
        if self.stopped:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_child(spec, work, shim, calls):
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"ind-{spec['name']}-", dir=work)
    env["PYTHONUNBUFFERED"] = "1"
    env["CUDACXX"] = shim  # Inductor's nvcc (checked before CUDA_HOME); CUDA_HOME stays for its libs
    env["PATH"] = os.path.dirname(shim) + ":" + env["PATH"]
    log = os.path.join(work, spec["name"] + ".log")
    seen = len(open(calls).read().splitlines()) if os.path.exists(calls) else 0
    proc = subprocess.Popen([sys.executable, __file__, "--child", json.dumps(spec)], env=env,
                            stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    return proc, log, seen, time.time()


def finish_child(proc, log, seen, t0, calls, name, limit=3600):
    try:
        stdout, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
    res = {"name": name, "rc": proc.returncode, "process_s": round(time.time() - t0, 1)}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            res.update(json.loads(line[7:]))
    new = (open(calls).read().splitlines() if os.path.exists(calls) else [])[seen:]
    res["local_nvcc_runs"] = sum(1 for c in new if c.strip() != "--version")
    res["local_nvcc_version_probes"] = sum(1 for c in new if c.strip() == "--version")
    text = open(log).read()
    rows = re.findall(r"^\s+(cutlass_\w+) (\S+) ms", text, re.M)
    res["cutlass_choices"], res["cutlass_inf"] = len(rows), sum(1 for _, t in rows if t == "inf")
    if proc.returncode != 0 or "error" in res:
        res["tail"] = text[-3000:]
    return res


def wait_until(cond, limit, what):
    deadline = time.time() + limit
    while not cond():
        if time.time() > deadline:
            raise RuntimeError(f"no {what} within {limit} s")
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--kforge")
    ap.add_argument("--cutlass")
    ap.add_argument("--scenarios", default="a,b,c,d,e")
    ap.add_argument("--heartbeat", type=float, default=30.0)
    ap.add_argument("--subproc", action="store_true", help="autotune_in_subproc=True in every scenario")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.child:
        return child(json.loads(a.child))

    import torch
    print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), flush=True)
    work = tempfile.mkdtemp(prefix="kforge-failsafe-")
    os.chmod(work, 0o755)
    real = os.environ.get("CUDACXX") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                         if os.environ.get("CUDA_HOME") else shutil.which("nvcc"))
    if not real or not os.path.exists(real):
        sys.exit("no nvcc for the local compiles (set CUDA_HOME or CUDACXX)")
    os.makedirs(os.path.join(work, "shim"))
    shim, calls = os.path.join(work, "shim", "nvcc"), os.path.join(work, "nvcc-calls.log")
    with open(shim, "w") as f:
        f.write(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real} "$@"\n')
    os.chmod(shim, 0o755)
    print("work dir", work, "real nvcc", real, flush=True)

    base = {"cutlass": a.cutlass, "heartbeat": a.heartbeat, "subproc": a.subproc}
    spec = lambda name, **kw: dict(base, name=name, out_path=os.path.join(work, name + ".pt"), **kw)  # noqa: E731
    results = {}
    for name in a.scenarios.split(","):
        port = free_port()
        down = f"http://127.0.0.1:{port}"  # nothing listens there (yet)
        server = None
        extra = {}
        try:
            if name == "a":
                s = spec("a", hook=False, fallback=True, url=None)
            elif name in ("b", "c"):
                s = spec(name, hook=True, fallback=(name == "b"), url=down)
            elif name == "d":
                server = Server(a.kforge, a.cutlass, port, work, "d")
                s = spec("d", hook=True, fallback=True, url=server.url)
            elif name == "e":
                s = spec("e", hook=True, fallback=True, url=down)
            else:
                raise SystemExit(f"unknown scenario {name}")
            proc, log, seen, t0 = start_child(s, work, shim, calls)
            ended = lambda: proc.poll() is not None  # noqa: E731 - a child that died early
            if name == "d":  # stop the server once one of the hook's compiles is under way
                wait_until(lambda: ended() or any(j.get("state") == "compiling" for j in server.jobs()),
                           1800, "compiling job")
                if not ended():
                    server.stop_signal()
                    extra["stopped_at"] = time.time()
            if name == "e":  # start the server once the hook has marked it down
                wait_until(lambda: ended() or "until a probe finds the server again" in open(log).read(),
                           1800, "breaker opening")
                if not ended():
                    server = Server(a.kforge, a.cutlass, port, work, "e")
                    extra["server_started_after_s"] = round(time.time() - t0, 1)
            r = finish_child(proc, log, seen, t0, calls, name)
            r.update(extra, url=s["url"])
        finally:
            if server is not None:
                server.close()
        results[name] = r
        print(json.dumps({k: v for k, v in r.items() if k != "tail"}), flush=True)

    checks = judge(results, a.heartbeat, down_hint="Connection refused")
    print("\n%-3s %4s %8s %7s %5s %6s %6s %-34s %5s %7s  %s" % (
        "", "rc", "wall_s", "vs_a", "nvcc", "remote", "local", "fallback reasons", "opens", "lost_s", "check"))
    for name, r in results.items():
        h = r.get("hook") or {}
        wall = r.get("wall_s", r.get("error_after_s"))
        vs = (f"{wall / results['a']['wall_s']:.2f}x" if "a" in results and results["a"].get("wall_s")
              and wall else "")
        print("%-3s %4s %8s %7s %5s %6s %6s %-34s %5s %7s  %s" % (
            name, r["rc"], wall, vs, r["local_nvcc_runs"], h.get("remote", ""), h.get("fallbacks", ""),
            json.dumps(h.get("fallback_reasons", ""))[:34], h.get("breaker_openings", ""),
            round(h.get("lost_seconds", 0), 1) if h else "", "; ".join(checks[name]) or "OK"))
        if checks[name] and r.get("tail"):
            print("   ", r["tail"][-1500:].replace("\n", "\n    "))
    if a.out:
        json.dump({"results": results, "failed_checks": checks, "heartbeat": a.heartbeat,
                   "subproc": a.subproc}, open(a.out, "w"), indent=1)
    ok = not any(checks.values())
    print("ALL OK" if ok else "SOME FAILED")
    return 0 if ok else 1


def judge(results, heartbeat, down_hint):
    """Each scenario's failed checks (empty: it passed)."""
    out = {}
    base = results.get("a", {})
    for name, r in results.items():
        h, bad = r.get("hook") or {}, []
        reasons = h.get("fallback_reasons", {})
        finished = r["rc"] == 0 and "error" not in r and r.get("rel_err", 1) < 2e-2
        if name != "c" and not finished:
            bad.append(f"did not finish right (rc {r['rc']}, {r.get('error', '')[:120]})")
        if name == "a" and r["local_nvcc_runs"] == 0:
            bad.append("no local nvcc run counted: is the shim used?")
        if name == "b":
            if h.get("remote") or not h.get("fallbacks"):
                bad.append("expected local compiles only")
            if base.get("wall_s") and r.get("wall_s") and r["wall_s"] > 1.10 * base["wall_s"]:
                bad.append(f"wall {r['wall_s']} s > 1.10 x (a) {base['wall_s']} s")
            if not set(reasons) <= {"unreachable", "breaker_open"}:
                bad.append(f"unexpected reasons {reasons}")
        if name == "c":
            err = r.get("error", "")
            if not err:
                bad.append("no error raised")
            elif not ("kforge" in err and r["url"] in err and down_hint in err):
                bad.append("the error does not name kforge, the URL and the cause")
            if r.get("error_after_first_failure_s", 1e9) >= 5:
                bad.append(f"error {r.get('error_after_first_failure_s')} s after the first failure (>= 5)")
            if r["local_nvcc_runs"]:
                bad.append(f"{r['local_nvcc_runs']} local nvcc runs in strict mode")
        if name == "d":
            if "stalled" not in reasons:
                bad.append(f"no 'stalled' fallback: {reasons}")
            stall = [t for t, _, msg in r.get("events", []) if "sent nothing" in msg or "nothing from" in msg]
            if not stall or not r.get("stopped_at"):
                bad.append("no stall logged")
            else:
                r["failover_after_stop_s"] = round(stall[0] - r["stopped_at"], 1)
                if r["failover_after_stop_s"] > heartbeat + 5:
                    bad.append(f"failed over {r['failover_after_stop_s']} s after the stop (heartbeat {heartbeat} s)")
        if name == "e":
            if not h.get("remote") or not h.get("fallbacks") or not h.get("breaker_openings"):
                bad.append("expected local compiles, then remote ones after the breaker closed")
            if not any("answers again" in msg for _, _, msg in r.get("events", [])):
                bad.append("the breaker never closed")
        out[name] = bad
    return out


if __name__ == "__main__":
    sys.exit(main())
