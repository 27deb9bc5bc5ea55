#!/usr/bin/env python3
"""torch.compile through kforge on a real GPU: the Inductor hook, end to end (issue 17).

Starts `kforge serve --library cutlass=DIR` (the bundle given by --kforge), then runs each
scenario in a fresh Python process with a fresh, empty Inductor cache:

    torch.compile(mode="max-autotune") of  y = a @ b  [+ bias, relu]
    with max_autotune_gemm_backends = "ATEN,CUTLASS" or "CUTLASS", fp16 or bf16,
    in-process or with autotune_in_subproc=True,
    and kforge.inductor.install(url, fallback=False) -- or, for a baseline, without the hook.

With the hook, the torch process gets a failing `nvcc` first on its PATH (it logs every call):
a single local nvcc compile fails the scenario (Inductor's `nvcc --version` probe, which it
tolerates failing, is counted apart). Each scenario reports its wall time, the hook's
counters (kforge misses, hits, renames), the CUTLASS choices Inductor timed and how many came
out `inf` (a choice lost to a compile or load error), the error against eager PyTorch, and
whether the result equals the baseline run's. Prints a table and writes JSON to --out.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "..", "..", "clients", "python")


def child(spec):
    """One scenario, in this (fresh) process."""
    import torch
    import torch._inductor.config as cfg

    cfg.cutlass.cutlass_dir = spec["cutlass"]
    cfg.cutlass.cutlass_max_profiling_configs = spec.get("configs", 4)
    cfg.max_autotune = True
    cfg.max_autotune_gemm_backends = spec["backends"]
    cfg.autotune_in_subproc = spec["subproc"]
    hook = None
    if spec["hook"]:
        sys.path.insert(0, CLIENT)
        import kforge.inductor
        hook = kforge.inductor.install(spec["url"], fallback=False)
        from torch._inductor.codegen.cuda import compile_utils
        import shutil
        print("local nvcc for Inductor:", shutil.which(compile_utils._cuda_compiler()), file=sys.stderr)
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[spec["dtype"]]
    m, n, k = spec["shape"]
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=dt, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dt, generator=g)
    bias = torch.randn(n, device="cuda", dtype=dt, generator=g)
    epi = spec["epilogue"]

    def f(a, b, bias):
        y = a @ b
        return torch.relu(y + bias) if epi else y

    t0 = time.time()
    out = torch.compile(f, mode="max-autotune")(a, b, bias)
    torch.cuda.synchronize()
    wall = time.time() - t0
    ref = f(a.float(), b.float(), bias.float())
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    digest = hashlib.sha256(out.cpu().view(torch.int16).numpy().tobytes()).hexdigest()
    res = {"wall_s": round(wall, 1), "rel_err": err, "out_sha256": digest[:16]}
    if hook:
        s = kforge.inductor.stats()
        res["hook"] = {"remote": s.remote, "kforge_miss": s.remote_miss, "by_cache": s.by_cache,
                       "local_hits": s.local_hits, "fallbacks": s.fallbacks, "errors": s.errors,
                       "seconds_in_kforge": round(s.seconds, 1)}
    print("RESULT " + json.dumps(res), flush=True)


def metrics(url):
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'kforge_cache_requests_total\{outcome="(\w+)"\} (\S+)', line) or \
            re.match(r'kforge_(compiler_runs)_total (\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def run_scenario(spec, badnvcc, workdir):
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="ind-", dir=workdir)
    env["PYTHONUNBUFFERED"] = "1"
    if spec["hook"]:
        env["PATH"] = os.path.join(badnvcc, "bin") + ":" + env["PATH"]
        for v in ("CUDA_HOME", "CUDA_PATH", "CUDACXX"):
            env.pop(v, None)
    log = os.path.join(workdir, spec["name"] + ".log")
    t0 = time.time()
    with open(log, "w") as lf:
        p = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env,
                           stdout=subprocess.PIPE, stderr=lf, text=True)
    text = open(log).read()
    res = {"name": spec["name"], "rc": p.returncode, "process_s": round(time.time() - t0, 1)}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res.update(json.loads(line[7:]))
    cutlass_rows = re.findall(r"^\s+(cutlass_\w+) (\S+) ms", text, re.M)
    res["cutlass_choices"] = len(cutlass_rows)
    res["cutlass_inf"] = sum(1 for _, t in cutlass_rows if t == "inf")
    winner = re.findall(r"AUTOTUNE mm.*\n(?:strides.*\n)?(?:dtypes.*\n)?\s+(\S+) (\S+) ms", text)
    res["winner"] = winner[-1] if winner else None
    if p.returncode != 0:
        res["tail"] = text[-3000:]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--kforge")
    ap.add_argument("--cutlass")
    ap.add_argument("--scenarios", default="all")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.child:
        return child(json.loads(a.child))

    import torch
    print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), flush=True)
    work = tempfile.mkdtemp(prefix="kforge-inductor-")
    badnvcc = os.path.join(work, "badnvcc")
    os.makedirs(os.path.join(badnvcc, "bin"))
    calls = os.path.join(work, "nvcc-calls.log")
    with open(os.path.join(badnvcc, "bin", "nvcc"), "w") as f:
        f.write(f'#!/bin/sh\necho "$@" >> {calls}\necho "nvcc is not for the torch process (kforge test)" >&2\nexit 1\n')
    os.chmod(os.path.join(badnvcc, "bin", "nvcc"), 0o755)

    cache = os.path.join(work, "cache")
    os.makedirs(cache)
    os.chmod(work, 0o755)
    srv = subprocess.Popen([a.kforge, "serve", "--port", "0", "--cache-dir", cache, "--library",
                            "cutlass=" + a.cutlass, "--compile-jobs", str(os.cpu_count())],
                           stdout=subprocess.PIPE, stderr=open(os.path.join(work, "server.log"), "w"), text=True)
    url = srv.stdout.readline().split()[-1]
    print("kforge at", url, flush=True)

    base = {"cutlass": a.cutlass, "url": url, "configs": 4}
    S = lambda name, **kw: dict(base, name=name, **kw)
    big, llm = [4096, 4096, 4096], [2048, 11008, 4096]
    scenarios = {
        # fp16 4096^3, ATEN+CUTLASS: the reference, without and with kforge.
        "fp16-4096-aten+cutlass-local": S("fp16-4096-aten+cutlass-local", hook=False, dtype="float16", shape=big,
                                          epilogue=False, backends="ATEN,CUTLASS", subproc=False),
        "fp16-4096-aten+cutlass-kforge-cold": S("fp16-4096-aten+cutlass-kforge-cold", hook=True, dtype="float16",
                                                shape=big, epilogue=False, backends="ATEN,CUTLASS", subproc=False),
        "fp16-4096-aten+cutlass-kforge-warm": S("fp16-4096-aten+cutlass-kforge-warm", hook=True, dtype="float16",
                                                shape=big, epilogue=False, backends="ATEN,CUTLASS", subproc=False),
        # CUTLASS alone: a CUTLASS kernel wins and is renamed for the final graph.
        "fp16-4096-cutlass-subproc": S("fp16-4096-cutlass-subproc", hook=True, dtype="float16", shape=big,
                                       epilogue=False, backends="CUTLASS", subproc=True),
        "bf16-llm-bias-relu-aten+cutlass-subproc": S("bf16-llm-bias-relu-aten+cutlass-subproc", hook=True,
                                                     dtype="bfloat16", shape=llm, epilogue=True,
                                                     backends="ATEN,CUTLASS", subproc=True),
        "bf16-llm-bias-relu-cutlass": S("bf16-llm-bias-relu-cutlass", hook=True, dtype="bfloat16", shape=llm,
                                        epilogue=True, backends="CUTLASS", subproc=False),
        "fp16-llm-bias-relu-cutlass-subproc": S("fp16-llm-bias-relu-cutlass-subproc", hook=True, dtype="float16",
                                                shape=llm, epilogue=True, backends="CUTLASS", subproc=True),
        "fp16-llm-bias-relu-cutlass-local": S("fp16-llm-bias-relu-cutlass-local", hook=False, dtype="float16",
                                              shape=llm, epilogue=True, backends="CUTLASS", subproc=True),
        "bf16-4096-cutlass": S("bf16-4096-cutlass", hook=True, dtype="bfloat16", shape=big, epilogue=False,
                               backends="CUTLASS", subproc=False),
    }
    names = list(scenarios) if a.scenarios == "all" else a.scenarios.split(",")
    results = []
    for name in names:
        before = metrics(url)
        seen = open(calls).read().splitlines() if os.path.exists(calls) else []
        r = run_scenario(scenarios[name], badnvcc, work)
        after = metrics(url)
        r["server"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        new = (open(calls).read().splitlines() if os.path.exists(calls) else [])[len(seen):]
        r["local_nvcc_runs"] = sum(1 for c in new if c.strip() != "--version")
        r["local_nvcc_version_probes"] = sum(1 for c in new if c.strip() == "--version")
        results.append(r)
        print(json.dumps(r), flush=True)
    srv.terminate()
    ok = True
    print("\n%-42s %5s %8s %6s %6s %5s %9s %s" % ("scenario", "rc", "wall_s", "nvcc", "cutl", "inf", "rel_err", "server / hook"))
    for r in results:
        hooked = scenarios[r["name"]]["hook"]
        good = r["rc"] == 0 and r["cutlass_inf"] == 0 and (not hooked or r["local_nvcc_runs"] == 0) \
            and r.get("rel_err", 1) < 2e-2
        ok &= good
        print("%-42s %5s %8s %6s %6s %5s %9.2e %s %s" % (r["name"], r["rc"], r.get("wall_s"), r["local_nvcc_runs"],
              r["cutlass_choices"], r["cutlass_inf"], r.get("rel_err", float("nan")), r["server"], r.get("hook", "")))
        if not good:
            print("  FAILED", r.get("tail", ""))
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)
    print("ALL OK" if ok else "SOME FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
