#!/usr/bin/env python3
"""The CUDA gemm over shapes that look like real models, beside cuBLAS and torch.mm.

For each shape it asks a real kforge service for the gemm (`POST /kernels` with the template's
default parameters, or `POST /autotune` with the default choices under --autotune), verified
against the reference rendering, timed by kforge-runner-cuda beside cuBLAS on the same buffers
(the runner's `vendor`: cuBLASLt with its own fused epilogue where cuBLASLt has the case's,
bias, gelu (its tanh form) or bias + gelu; the plain gemm otherwise), the two interleaved call by
call, and times torch.mm / torch.bmm on the same shape in this process (CUDA events, the 50 MiB
L2 flushed with a 256 MiB memset before each call, as many calls as the runner's budget gives,
median), when torch is importable. Every row says which device and driver measured it.

Shapes (issue 15): square 1024..8192; LLM projections, M in {1, 16, 128, 2048, 8192} against
(N, K) in {(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)}; batched attention-like
products; float16 and bfloat16; layouts NN, NT, TN, TT; with and without a bias + gelu epilogue (the
tanh form, which cuBLASLt fuses; --epilogue bias_gelu asks for the erf form).
--quick keeps one dtype, layout NN and no epilogue, unless --dtypes, --layouts or --epilogue say otherwise.
--random N --seed S instead draws N shapes nobody tuned for (random_shapes(): M, N, K from the
ranges of real models, ragged on purpose); the seed is printed with the results.
--deadline S reports the cases answered within S seconds and names the rest (a run cut short
by a time limit would otherwise print nothing: the rows come once every case is answered).

Usage: bench/cuda_suite.py --kforge .bundle/bin/kforge [--autotune] [--warm] [--quick] [--only 4096x4096x4096,...]
                           [--dtypes float16,bfloat16] [--layouts nn,nt,tn,tt]
                           [--epilogue none,bias,gelu,gelu_tanh,bias_gelu,bias_gelu_tanh]
                           [--groups square,llm,bmm | --shapes 2048x11008x1024,... | --random 64 --seed S]
                           [--budget-ms 100] [--jobs 16] [--arch sm_90a] [--deadline 300]
                           [--params '{"mma": "wgmma", ...}' | --autotune --choices '[{...}, ...]']
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

SQUARE = [(1, s, s, s) for s in (1024, 2048, 4096, 8192)]
LLM = [(1, m, n, k) for m in (1, 16, 128, 2048, 8192) for (n, k) in ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096))]
# (batch, M, N, K): attention scores (L x d @ d x L) and values (L x L @ L x d) for 32 heads.
BMM = [(32, 2048, 2048, 128), (32, 2048, 128, 2048), (64, 512, 512, 64), (64, 512, 64, 512)]
# The suite's epilogue is bias + gelu in its tanh form, the function cuBLASLt fuses
# (CUBLASLT_EPILOGUE_GELU_BIAS), so both sides compute the same; bias_gelu is the erf form
# (torch's default gelu), which cuBLASLt does not have: its vendor column is the tanh form, a
# cheaper function. bias and gelu alone split the cost.
GELU_TANH = {"op": "gelu", "approximate": "tanh"}
EPILOGUES = {"none": [], "bias": [{"op": "add", "input": 2}], "gelu": [{"op": "gelu"}], "gelu_tanh": [GELU_TANH],
             "bias_gelu": [{"op": "add", "input": 2}, {"op": "gelu"}], "bias_gelu_tanh": [{"op": "add", "input": 2}, GELU_TANH]}


def random_shapes(n, seed):
    """n (1, M, N, K) shapes drawn the way real models make them, with ragged sizes on purpose.

    M is the tokens of a step: anything from a decode (1-64) to a prefill (up to 16384), drawn
    log-uniformly; a third of the time it is odd, a third of the time one past a multiple of 64
    (257: a tile boundary). N and K are a model's widths and their multiples (hidden sizes of
    1024-8192, MLP ratios 2.67-4, head groups), with one in four bent off the power-of-two
    grid (a multiple of 8 but not of 64, like 5120+8) or one past a multiple of 64. A shape
    whose operands pass 2 GiB is drawn again. Deterministic for a seed (random.Random)."""
    import random
    rng = random.Random(seed)
    widths = [1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192]

    def ragged(x):
        r = rng.random()
        if r < 0.15:
            return x + 8 * rng.randint(1, 7)  # off the 64 grid, still a multiple of 8
        if r < 0.25:
            return x + 1
        return x

    out = []
    while len(out) < n:
        m = int(round(math.exp(rng.uniform(math.log(1), math.log(16384)))))
        r = rng.random()
        if r < 1 / 3:
            m |= 1
        elif r < 2 / 3:
            m = 64 * max(1, m // 64) + 1
        m = max(1, min(m, 16384))
        h = rng.choice(widths)
        kind = rng.random()
        if kind < 0.4:  # an up projection: hidden -> MLP width
            n_, k_ = int(h * rng.choice([2.6875, 3.5, 4.0]) // 64 * 64), h
        elif kind < 0.8:  # a down projection
            n_, k_ = h, int(h * rng.choice([2.6875, 3.5, 4.0]) // 64 * 64)
        else:  # a square-ish one (attention output, QKV)
            n_, k_ = h * rng.choice([1, 1, 3]), h
        n_, k_ = ragged(n_), ragged(k_)
        if 2 * (m * k_ + k_ * n_ + m * n_) > 2 << 30:
            continue
        out.append((1, m, n_, k_))
    return out


def operand(name, dtype, batch, rows, cols, transposed):
    """A [rows, cols] operand (batched when batch > 1); transposed: a .t() view of [cols, rows]."""
    if batch > 1:
        strides = [rows * cols, 1, rows] if transposed else [rows * cols, cols, 1]
        return {"name": name, "dtype": dtype, "sizes": [batch, rows, cols], "strides": strides}
    strides = [1, rows] if transposed else [cols, 1]
    return {"name": name, "dtype": dtype, "sizes": [rows, cols], "strides": strides}


def request(shape, dtype, layout, epilogue, budget_ms, arch="native"):
    b, m, n, k = shape
    body = {"backend": "cuda", "arch": arch, "template": "gemm",
            "inputs": [operand("A", dtype, b, m, k, layout[0] == "t"), operand("B", dtype, b, k, n, layout[1] == "t")],
            "output": {"name": "C", "dtype": dtype, "sizes": [b, m, n] if b > 1 else [m, n]},
            "benchmark": {"verify": True, "vendor": True, "budget_ms": budget_ms}}
    if epilogue.startswith("bias"):
        body["inputs"].append({"name": "bias", "dtype": dtype, "sizes": [n]})
    if EPILOGUES[epilogue]:
        body["epilogue"] = EPILOGUES[epilogue]
    return body


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def case_name(shape, dtype, layout, epi):
    b, m, n, k = shape
    return f"{dtype} {layout.upper()} {epi.replace('_tanh', '-tanh').replace('_', '+') + ' ' if epi != 'none' else ''}{'%dx' % b if b > 1 else ''}{m}x{n}x{k}"


def post(url, path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=3600) as f:
            return json.load(f), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return {"http_error": e.code, "body": e.read()[:1500].decode(errors="replace")}, time.monotonic() - t0


class TorchTimer:
    """torch.mm / torch.bmm (+ bias + gelu) on the same shapes, timed like the runner times."""

    def __init__(self):
        import torch  # noqa: PLC0415 (optional: the suite runs without it)
        self.torch = torch
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def time(self, shape, dtype, layout, epilogue, budget_ms):
        t = self.torch
        b, m, n, k = shape
        dt = getattr(t, dtype)

        def make(rows, cols, transposed):
            x = t.randn((b, cols, rows) if transposed else (b, rows, cols), device="cuda", dtype=dt)
            return x.transpose(-1, -2) if transposed else x

        a, bb = make(m, k, layout[0] == "t"), make(k, n, layout[1] == "t")
        if b == 1:
            a, bb = a[0], bb[0]
        bias = t.randn(n, device="cuda", dtype=dt)
        mm = t.bmm if b > 1 else t.mm

        def run():
            c = mm(a, bb)
            if epilogue.startswith("bias"):
                c = c + bias
            if "gelu" in epilogue:
                c = t.nn.functional.gelu(c, approximate="tanh" if epilogue.endswith("_tanh") else "none")
            return c

        def timed():
            self.flush.zero_()
            s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            s.record()
            run()
            e.record()
            e.synchronize()
            return s.elapsed_time(e)

        # Sized much as the runner sizes its loop: warm up (3 calls and 25 ms, flushed here), then
        # as many flushed calls as fit the budget by the median warm-up call (5 to 1000). A handful of calls right
        # after the warm-up run at the GPU's highest clocks and read several percent fast.
        warm = [timed() for _ in range(3)]
        while sum(warm) < 25 and len(warm) < 1000:
            warm.append(timed())
        reps = min(1000, max(5, int(budget_ms / max(sorted(warm)[len(warm) // 2], 1e-4))))
        times = sorted(timed() for _ in range(reps))
        return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kforge", required=True)
    ap.add_argument("--autotune", action="store_true", help="POST /autotune with the default choices (else the default parameters)")
    ap.add_argument("--quick", action="store_true", help="float16, NN, no epilogue (where --dtypes, --layouts, --epilogue are not given)")
    ap.add_argument("--dtypes", help="default float16,bfloat16")
    ap.add_argument("--layouts", help="default nn,nt,tn,tt")
    ap.add_argument("--epilogue", help="default none,bias_gelu_tanh (also: bias, gelu, gelu_tanh, bias_gelu: the erf form)")
    ap.add_argument("--groups", default="square,llm,bmm")
    ap.add_argument("--budget-ms", type=float, default=100)
    ap.add_argument("--only", default="", help="keep the shapes named BxMxNxK or MxNxK, comma-separated")
    ap.add_argument("--shapes", default="", help="these shapes (BxMxNxK or MxNxK, comma-separated) instead of the suite's groups")
    ap.add_argument("--random", type=int, default=0, help="N shapes drawn by random_shapes() instead of the suite's groups")
    ap.add_argument("--seed", type=int, default=None, help="the seed of --random (default: from the clock; printed)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4, help="requests in flight (compiles run in parallel)")
    ap.add_argument("--compile-jobs", type=int, default=0,
                    help="the service's compile workers (default: --jobs); with --jobs 1, cases run one after the other "
                         "and each autotune still compiles its choices in parallel")
    ap.add_argument("--params", default="", help="tuning parameters (JSON) sent with every case instead of the defaults")
    ap.add_argument("--choices", default="",
                    help="with --autotune: this list of parameter objects (JSON) instead of the template's default choices, "
                         "e.g. to rank variants of a tiling on the same buffers")
    ap.add_argument("--options", default="", help="compile options (JSON) sent with every case, e.g. {\"defines\": {\"X\": \"1\"}}")
    ap.add_argument("--warm", action="store_true",
                    help="after the cold pass, send every case again, one at a time, and print each warm wall time")
    ap.add_argument("--arch", default="native",
                    help="the arch to compile for (default: the service's GPU's); a named one, sm_90a, also compiles on a "
                         "host without a GPU, whose answers then say why nothing was timed")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds after the first request: the cases answered by then are reported, the rest named and "
                         "left (no --warm pass then; exit status 1). Default 0: wait for every case")
    args = ap.parse_args()
    if args.choices and not args.autotune:
        ap.error("--choices needs --autotune")
    choices = json.loads(args.choices) if args.choices else "default"
    full, quick = ("float16,bfloat16", "nn,nt,tn,tt", "none,bias_gelu_tanh"), ("float16", "nn", "none")
    args.dtypes, args.layouts, args.epilogue = (given or default for given, default in
                                                zip((args.dtypes, args.layouts, args.epilogue), quick if args.quick else full))
    shapes = []
    for g in args.groups.split(","):
        shapes += {"square": SQUARE, "llm": LLM, "bmm": BMM}[g]
    if args.shapes:
        shapes = [tuple(([1] if len(d) == 3 else []) + d) for d in ([int(x) for x in t.split("x")] for t in args.shapes.split(","))]
    if args.random:
        if args.seed is None:
            args.seed = int(time.time()) % 1000003
        shapes = random_shapes(args.random, args.seed)
        print(f"# random shapes: --random {args.random} --seed {args.seed}", flush=True)
    if args.only:
        keep = set(args.only.split(","))
        shapes = [s for s in shapes if "x".join(map(str, s[1:])) in keep or "x".join(map(str, s)) in keep]
    unknown = set(args.epilogue.split(",")) - set(EPILOGUES)
    if unknown:
        ap.error(f"--epilogue: {', '.join(sorted(unknown))} is not one of {', '.join(EPILOGUES)}")
    cases = [(s, d, l, e) for s in shapes for d in args.dtypes.split(",") for l in args.layouts.split(",")
             for e in args.epilogue.split(",")]

    work = tempfile.mkdtemp(prefix="kforge-suite-")
    os.chmod(work, 0o755)  # the sandbox uid must reach the cache
    log_path = os.path.join(work, "server.log")
    proc = subprocess.Popen([args.kforge, "serve", "--port", "0", "--cache-dir", os.path.join(work, "cache"),
                             "--compile-jobs", str(args.compile_jobs or args.jobs),
                             # an autotune queues a compile per choice (the default search: up to 16)
                             "--max-queue", str((16 if args.autotune else 4) * len(cases) + 16)],
                            stdout=subprocess.PIPE, stderr=open(log_path, "w"), text=True)
    url = proc.stdout.readline().split()[-1]
    try:
        torch_timer = TorchTimer()
    except Exception as e:  # noqa: BLE001 (no torch, or no GPU for it)
        torch_timer = None
        print(f"# torch.mm column: unavailable ({e})", flush=True)
    results, unanswered = [], []
    try:
        tc = json.load(urllib.request.urlopen(url + "/toolchains"))
        print("# device:", json.dumps(tc["cuda"].get("device")), flush=True)
        what = f'autotune ({"default" if choices == "default" else len(choices)} choices)' if args.autotune else f'params {args.params}' if args.params else 'default parameters'
        print(f"# {len(cases)} cases, {what}", flush=True)
        path = "/autotune" if args.autotune else "/kernels"
        t0 = time.monotonic()
        # Compiles in parallel (the service's pool); the runner times one kernel at a time anyway.
        pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
        futs = []
        for c in cases:
            body = request(*c, args.budget_ms, args.arch)
            if args.params:
                body["params"] = json.loads(args.params)
            if args.options:
                body["options"] = json.loads(args.options)
            if args.autotune:
                body["choices"] = choices
            futs.append(pool.submit(post, url, path, body))
        done, _ = concurrent.futures.wait(futs, timeout=args.deadline or None)
        unanswered = [c for c, f in zip(cases, futs) if f not in done]
        results = [(c, *f.result()) for c, f in zip(cases, futs) if f in done]
        total = time.monotonic() - t0
        pool.shutdown(wait=False, cancel_futures=True)
        if unanswered:
            # Stopped here, the service would go on compiling and timing them beside the torch
            # timings below; its end also ends the requests still waiting on it.
            print(f"# deadline: {len(unanswered)} of {len(cases)} cases not answered within {args.deadline:g} s: " +
                  ", ".join(case_name(*c) for c in unanswered), flush=True)
            proc.terminate()
            proc.wait()
        rows = []
        for (shape, dtype, layout, epi), j, wall in results:
            b, m, n, k = shape
            name = case_name(shape, dtype, layout, epi)
            if "http_error" in j:
                print(f"{name}: HTTP {j['http_error']} {j['body'][:400]}", flush=True)
                continue
            bench = (j.get("winner") or {}).get("benchmark") if args.autotune else j.get("benchmark")
            params = (j.get("winner") or {}).get("params") if args.autotune else j.get("template", {}).get("params")
            if not bench or bench.get("status") != "ok":
                # Why: the autotune's reason and each choice's outcome (its params, status, and
                # what its benchmark or verification said), not the head of the whole answer.
                why = [j.get("winner_reason") or (bench or {}).get("reason") or (bench or {}).get("status")]
                for c in j.get("choices", []):
                    cb = c.get("benchmark") or {}
                    why.append(f"{json.dumps(c.get('params'), sort_keys=True)}: {c.get('status')}, benchmark {cb.get('status')}"
                               f" {cb.get('reason') or cb.get('error') or ''} verify {json.dumps(cb.get('verify'))[:200]}")
                print(f"{name}: no timing: " + "; ".join(str(w) for w in why), flush=True)
                continue
            ok = bench.get("verify", {}).get("passed")
            # The vendor is timed with each kernel (interleaved with it): the winner's result carries it.
            vendor = bench.get("vendor") if bench.get("vendor", {}).get("median_ms") else j.get("vendor", {})
            ms, vms = bench["median_ms"], vendor.get("median_ms")
            # cuBLAS's own epilogue where cuBLASLt fuses the case's (its gelu is the tanh form).
            vname = "cuBLAS" if vendor.get("name", "cublas") == "cublas" else vendor["name"]
            tms = torch_timer.time(shape, dtype, layout, epi, args.budget_ms) if torch_timer else None
            flops = 2 * b * m * n * k
            ratio = vms / ms if vms else float("nan")
            vms = vms if vms else float("nan")
            rows.append((name, ms, vms, tms, ratio, ok, params, wall, epi, vname))
            print(f"{name:>40}: kforge {ms:.4f} ms (min {bench['min_ms']:.4f}, p90 {bench.get('p90_ms', float('nan')):.4f}, "
                  f"{bench['iters']} runs; {flops / ms / 1e9:.0f} TFLOP/s)  {vname} {vms:.4f} ms "
                  f"({vendor.get('iters', '?')} runs, {vendor.get('order', 'order not given')})  "
                  f"torch {tms if tms is None else round(tms, 4)} ms  kforge/cuBLAS {ratio:.2f}x  verified={ok}  "
                  f"wall {wall:.1f}s  {json.dumps(params, sort_keys=True)}", flush=True)
            if args.autotune:
                print(f"{'':>42}compile {j.get('compile_seconds', 0):.1f} s, benchmark {j.get('benchmark_seconds', 0):.1f} s; "
                      f"runner phases of each choice (ms): "
                      f"{[{k: round(v) for k, v in c.get('benchmark', {}).get('phases_ms', {}).items()} for c in j.get('choices', [])]}",
                      flush=True)
                # The ranking: each choice's median and what sets it apart from the default tiling (/c2x2: cluster_m x cluster_n;
                # /t: tail_split; /T: swap_ab, where block_n tiles M; /p: pingpong).
                print(f"{'':>42}ranked: " + "; ".join(
                    f"{c.get('benchmark', {}).get('median_ms', float('nan')):.4f} "
                    f"{c.get('params', {}).get('block_m')}x{c.get('params', {}).get('block_n')}"
                    f"/s{c.get('params', {}).get('stages')}/w{c.get('params', {}).get('warps')}"
                    f"/k{c.get('params', {}).get('split_k', 1)}/c{c.get('params', {}).get('cluster_m', 1)}"
                    f"{'x' + str(c['params']['cluster_n']) if c.get('params', {}).get('cluster_n', 1) > 1 else ''}"
                    f"{'/t' if c.get('params', {}).get('tail_split', 0) else ''}"
                    f"{'/T' if c.get('params', {}).get('swap_ab', 0) else ''}"
                    f"{'/p' if c.get('params', {}).get('pingpong', 0) else ''}"
                    for c in j.get("choices", [])), flush=True)
            elif bench.get("phases_ms"):
                print(f"{'':>42}runner phases (ms): {json.dumps({k: round(v, 1) for k, v in bench['phases_ms'].items()})}", flush=True)
        if args.warm and not unanswered:
            # The same requests again: the service answers from its cache (an autotune's
            # ranking, a kernel's entry), each timed alone from the client's side.
            walls = []
            for c in cases:
                j, wall = post(url, path, dict(request(*c, args.budget_ms, args.arch), **({"choices": choices} if args.autotune else {})))
                walls.append(wall)
                print(f"warm {c[1]} {c[2].upper()} {'x'.join(map(str, c[0]))}: {wall * 1000:.1f} ms, cache {j.get('cache')}",
                      flush=True)
            walls.sort()
            print(f"# warm: {len(walls)} requests, median {walls[len(walls) // 2] * 1000:.1f} ms, max {walls[-1] * 1000:.1f} ms")
        ratios = [r[4] for r in rows if r[4] == r[4] and r[4] > 0]
        print()
        print(f"# {len(rows)} of {len(cases)} cases timed in {total:.0f} s; "
              f"geometric mean kforge/cuBLAS {geomean(ratios):.3f}, min {min(ratios):.3f}" if ratios else "# nothing timed")
        for epi in sorted({r[8] for r in rows}):
            mine = [r[4] for r in rows if r[8] == epi and r[4] == r[4] and r[4] > 0]
            calls = sorted({r[9] for r in rows if r[8] == epi})
            if mine:
                print(f"#   epilogue {epi}: {len(mine)} cases against {', '.join(calls)}: geometric mean {geomean(mine):.3f}, "
                      f"min {min(mine):.3f}, {sum(x < 0.8 for x in mine)} below 0.8")
        print("| case | kforge (ms) | cuBLAS (ms) | cuBLAS call | torch (ms) | kforge / cuBLAS | verified | params |")
        print("|---|---|---|---|---|---|---|---|")
        for name, ms, vms, tms, ratio, ok, params, _, _, vname in rows:
            print(f"| {name} | {ms:.4f} | {vms:.4f} | {vname} | {'' if tms is None else f'{tms:.4f}'} | {ratio:.2f}× | {ok} | "
                  f"`{json.dumps(params, sort_keys=True)}` |")
    finally:
        proc.terminate()
        proc.wait()
    return 0 if results and not unanswered and all("http_error" not in j for _, j, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
