#!/usr/bin/env python3
"""kforge's gemm inside torch.compile on a GPU: step time, winners, compile time (issue 38).

Starts `kforge serve` (the bundle's binary, --kforge) on a fresh cache and runs, each in a fresh
Python process with its own Inductor and Triton caches:

Phase A, compile time and restarts (MLP block, M = --compile-m, the first dtype):
  A1 torch.compile(mode="max-autotune") without kforge kernels
  A2 with kforge.inductor.install(url, kernels=True), the kforge server cold (fresh cache)
  A3 the same with the server warm (A2's server cache; fresh Inductor, Triton and client caches)
  A4 a restart: A3's Inductor cache again (the FX graph cache hits), the kernels found by key
  A5 (not with --quick) as A3 with autotune_in_subproc=True
Phase B, step time (one process per dtype, sharing the server of phase A): for each model and M,
  the graph compiled without and with kforge kernels in one process, timed interleaved (CUDA
  events around many calls; max-autotune's CUDA graphs replay), each result checked against
  eager (ATen) in the same dtype. --compiles N compiles each variant N times (the repeats with
  every cache off, so Inductor autotunes anew) and also compares the variants' medians over their
  compiles: Inductor's picks differ between two compiles of one graph by up to 3 %, as much as
  the margin measured. --control adds a third variant, the graph without kforge
  compiled again with every cache off (an A/A control of the measure's noise); --profile lists
  each variant's GPU kernels per step. A case in which Dynamo compiled a graph while the
  variants were timed is reported NOT VALID.

Models: the MLP block gelu_tanh(x @ W1 + b1) @ W2 + b2, and a Llama-style layer's projections
(F.linear without bias: q, k, v, o 4096x4096; gate, up 4096 -> 11008 with silu(gate) * up;
down 11008 -> 4096); hidden 4096, intermediate 11008, tokens M. Inductor's default backends
(ATEN,TRITON). Which choice won each matmul comes from Inductor's feedback hook (every
autotune's timings) and from the generated code (kforge calls counted); the fused bias +
activation decisions from kforge.inductor.kernel_stats().

Usage (on the GPU host, torch 2.11 with CUDA; no network needed):
    KFORGE_BUNDLE_EXES="kforge kforge-runner-cuda" scripts/bundle.sh build .device/bundle
    python3 bench/inductor_kernels.py --kforge .device/bundle/bin/kforge --out inductor_kernels.json
    python3 bench/inductor_kernels.py --kforge .device/bundle/bin/kforge --quick     # a 2-minute smoke test
Prints a table (and per-phase wall times) and writes every figure to --out.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "..", "clients", "python")
HIDDEN, INTER = 4096, 11008
# The server's autotune: no reference run (each kernel is checked against ATen by the client
# before Inductor may pick it) and short measurements, to fit the GPU lease.
KERNEL_BENCHMARK = {"verify": False, "budget_ms": 30}
TOL = {"float16": 4 * 2.0 ** -11, "bfloat16": 4 * 2.0 ** -8}

MODELS = {
    "mlp": ("def {name}(x, w1, b1, w2, b2):\n"
            "    return F.gelu(x @ w1 + b1, approximate='tanh') @ w2 + b2\n"),
    "llama": ("def {name}(x, wq, wk, wv, wo, wg, wu, wd):\n"
              "    q, k, v = F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)\n"
              "    o = F.linear(q + k + v, wo)\n"
              "    h = F.silu(F.linear(x, wg)) * F.linear(x, wu)\n"
              "    return o + F.linear(h, wd)\n"),
}


# --- the child: one process, one set of cases ---------------------------------------------

def weights(torch, model, dtype, gen):
    def w(*shape):  # scaled so sums over K stay near 1
        return (torch.randn(*shape, device="cuda", generator=gen) * shape[-2 if model == "mlp" else -1] ** -0.5).to(dtype)

    def b(n):
        return (torch.randn(n, device="cuda", generator=gen) * 0.1).to(dtype)
    if model == "mlp":
        return [w(HIDDEN, INTER), b(INTER), w(INTER, HIDDEN), b(HIDDEN)]
    return [w(HIDDEN, HIDDEN), w(HIDDEN, HIDDEN), w(HIDDEN, HIDDEN), w(HIDDEN, HIDDEN),
            w(INTER, HIDDEN), w(INTER, HIDDEN), w(HIDDEN, INTER)]


def function(model, tag):
    """A fresh function object with its own code object: Dynamo never reuses another variant's graph."""
    import torch.nn.functional as F
    name = f"{model}_{tag}"
    ns = {"F": F}
    exec(compile(MODELS[model].format(name=name), f"<kforge-bench-{name}>", "exec"), ns)
    return ns[name]


def child(spec):
    import torch
    import torch._dynamo
    import torch._inductor.config as cfg
    from torch._dynamo.utils import counters

    sys.path.insert(0, CLIENT)
    import kforge.inductor as ki

    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)
    cfg.max_autotune_gemm_backends = "ATEN,TRITON"
    cfg.autotune_in_subproc = spec.get("subproc", False)
    autotunes = []
    try:
        from torch._inductor import select_algorithm

        def saver(timings, name, input_nodes, *rest):
            try:
                best = min(timings, key=timings.get)
                kf = [t for c, t in timings.items() if "kforge" in getattr(c, "name", "")]
                autotunes.append({"op": name, "sizes": [[int(s) for s in n.get_size()] for n in input_nodes],
                                  "winner": best.name, "ms": round(float(timings[best]), 5),
                                  "kforge_ms": round(float(kf[0]), 5) if kf else None, "choices": len(timings)})
            except Exception as e:  # noqa: BLE001 - a report, never a failure
                autotunes.append({"op": name, "error": str(e)})
        select_algorithm.add_feedback_saver(saver)
    except Exception as e:  # noqa: BLE001
        print(f"# no feedback saver: {e}", file=sys.stderr)

    dev = torch.cuda.get_device_name()
    results = []
    for model, dtype_name, m in spec["cases"]:
        dtype = getattr(torch, dtype_name)
        gen = torch.Generator(device="cuda").manual_seed(0)
        args = [torch.randn(m, HIDDEN, device="cuda", generator=gen).to(dtype)] + weights(torch, model, dtype, gen)
        for t in args:  # CUDA graphs read them in place (else every replay copies the weights in)
            torch._dynamo.mark_static_address(t)
        with torch.no_grad():
            ref = function(model, "eager")(*args).float()
        case = {"model": model, "dtype": dtype_name, "m": m, "device": dev, "variants": {}}
        fns = {}
        # Each variant compiled `compiles` times, the repeats with every cache off (Inductor
        # autotunes anew and may pick differently): "with#1" is the second compile of "with".
        keys = [(variant, variant if i == 0 else f"{variant}#{i}") for variant in spec["variants"]
                for i in range(spec.get("compiles", 1))]
        for variant, key in keys:
            ki.uninstall()
            before = len(autotunes)
            fx_before = dict(counters["inductor"])
            try:
                if variant == "with":
                    ki.install(spec["url"], kernels=True, kernel_benchmark=KERNEL_BENCHMARK)
                f = torch.compile(function(model, key.replace("#", "_")), mode="max-autotune", dynamic=False)
                t0 = time.perf_counter()
                # "again": the graph without kforge compiled a second time, every cache off, so
                # Inductor autotunes anew: how far two compiles of one graph differ
                with torch.no_grad(), cfg.patch(force_disable_caches=(variant == "again" or key != variant)):
                    out, code = run_and_get_code_kept(f, *args)
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001 - the other cases still run
                import traceback
                traceback.print_exc()
                case["variants"][key] = {"error": f"{type(e).__name__}: {e}"[:2000]}
                continue
            text = "\n".join(code)
            err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            v = {"compile_s": round(compile_s, 2), "rel_err_vs_eager": err,
                 "kforge_calls": text.count("kforge_gemm(") + text.count("kforge.gemm.default("),
                 "fused_calls": text.count("kforge.gemm.default("),
                 "extern_mm_calls": len(re.findall(r"extern_kernels\.(?:mm|addmm|bmm|bias_addmm)\(", text)),
                 "autotunes": autotunes[before:],
                 "fx_graph_cache": {k: counters["inductor"].get(k, 0) - fx_before.get(k, 0)
                                    for k in ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")}}
            if variant == "with":
                s = ki.kernel_stats()
                v["kforge"] = {"offered": s.offered, "refused": s.refused, "fused": s.fused, "fused_kept": s.fused_kept,
                               "fused_timings": s.fused_timings, "verified": s.verified, "verify_failed": s.verify_failed,
                               "runtime_loads": s.runtime_loads, "runtime_fallbacks": s.runtime_fallbacks,
                               "server_seconds": round(s.server_seconds, 2), "last_error": s.last_error,
                               "client_requests": ki._hook.client.stats["requests"] if ki._hook else None}
            case["variants"][key] = v
            fns[key] = f
        ki.uninstall()  # compiled graphs keep running their kforge kernels
        graphs = counters["stats"]["unique_graphs"]
        if spec.get("time_steps") and fns:
            try:
                case["step_ms"] = time_interleaved(torch, fns, args, spec.get("rounds", 7))
            except Exception as e:  # noqa: BLE001
                case["step_error"] = f"{type(e).__name__}: {e}"[:2000]
        if spec.get("profile") and fns:
            try:
                case["kernels_us"] = profile_kernels(torch, fns, args)
            except Exception as e:  # noqa: BLE001
                case["profile_error"] = f"{type(e).__name__}: {e}"[:2000]
        # Graphs Dynamo compiled while the variants ran: any is a variant timed on a graph
        # other than its own.
        case["recompiles_while_timed"] = counters["stats"]["unique_graphs"] - graphs
        results.append(case)
        print("CASE " + json.dumps(case), flush=True)
    print("RESULT " + json.dumps(results), flush=True)


def run_and_get_code_kept(f, *args):
    """Inductor's run_and_get_code without its torch._dynamo.reset(): the reset dropped the
    variants compiled before, so each was compiled again when it was timed, after kforge's
    uninstall(), and a "with" variant compiled before another one was timed on the graph
    without kforge kernels (the profile showed no kforge kernel; recompiles_while_timed)."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering
    codes = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        out = f(*args)
    return out, codes


def time_interleaved(torch, fns, args, rounds):
    """Median ms per call of each variant: rounds of back-to-back calls between two CUDA events,
    the variants alternating round by round (each round's order reversed from the last)."""
    with torch.no_grad():
        for f in fns.values():
            for _ in range(10):  # CUDA graph warm-up and recording
                f(*args)
        torch.cuda.synchronize()

        def block(f, n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(n):
                f(*args)
            e.record()
            e.synchronize()
            return s.elapsed_time(e) / n
        est = max(min(block(f, 5) for f in fns.values()), 1e-3)
        n = max(5, min(2000, int(40.0 / est)))
        times = {k: [] for k in fns}
        order = list(fns)
        for r in range(rounds):
            for k in (order if r % 2 == 0 else order[::-1]):
                times[k].append(block(fns[k], n))
    return {k: {"median": round(statistics.median(v), 5), "min": round(min(v), 5), "calls": n * rounds}
            for k, v in times.items()}


def profile_kernels(torch, fns, args, calls=20):
    """Each variant's GPU kernels over `calls` steps (torch.profiler; the CUDA graphs' kernels
    too): {variant: [[kernel name, launches per step, microseconds per step], ...]}, longest first.
    Two passes over the variants, the first discarded: on the H100 the first variant profiled
    ran the same cuBLAS kernels 10-20 % slower than the others."""
    from torch.profiler import ProfilerActivity, profile
    out = {}
    with torch.no_grad():
        for k, f in list(fns.items()) * 2:
            f(*args)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(calls):
                    f(*args)
                torch.cuda.synchronize()
            rows = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    r = rows.setdefault(e.name, [0, 0.0])
                    r[0] += 1
                    r[1] += e.device_time
            out[k] = sorted(([n[:140], c / calls, round(t / calls, 2)] for n, (c, t) in rows.items()),
                            key=lambda r: -r[2])
    return out


# --- the parent -------------------------------------------------------------------------

class Server:
    def __init__(self, kforge, cache, log):
        os.makedirs(cache, exist_ok=True)
        self.proc = subprocess.Popen([kforge, "serve", "--port", "0", "--cache-dir", cache, "--compile-jobs", "16"],
                                     stdout=subprocess.PIPE, stderr=open(log, "a"), text=True)
        line = self.proc.stdout.readline().split()
        if not line:
            raise RuntimeError(f"{kforge} serve did not start; see {log}")
        self.url = line[-1]

    def compiles(self):
        text = urllib.request.urlopen(self.url + "/metrics").read().decode()
        m = re.search(r"^kforge_compiler_runs_total (\S+)", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def run_child(spec, work, tag, inductor_dir=None, client_cache=None):
    inductor_dir = inductor_dir or tempfile.mkdtemp(prefix=f"ind-{tag}-", dir=work)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=inductor_dir, TRITON_CACHE_DIR=os.path.join(inductor_dir, "triton"),
               KFORGE_CLIENT_CACHE=client_cache or tempfile.mkdtemp(prefix=f"client-{tag}-", dir=work),
               PYTHONUNBUFFERED="1")
    log = os.path.join(work, f"{tag}.log")
    t0 = time.time()
    with open(log, "w") as lf:
        p = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env, stdout=subprocess.PIPE,
                           stderr=lf, text=True)
    wall = time.time() - t0
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None:  # what the cases that finished said
        res = [json.loads(line[5:]) for line in p.stdout.splitlines() if line.startswith("CASE ")]
    out = {"tag": tag, "rc": p.returncode, "process_s": round(wall, 1), "cases": res, "inductor_dir": inductor_dir,
           "client_cache": env["KFORGE_CLIENT_CACHE"]}
    if p.returncode != 0:
        out["log_tail"] = open(log).read()[-3000:]
        print(f"# {tag}: exit {p.returncode}; log {log}:\n{out['log_tail'][-1500:]}", flush=True)
    return out


def winners(v):
    """'op MxK·KxN: winner (kforge ms / best ms)' for each autotune of a variant."""
    rows = []
    for a in v.get("autotunes", []):
        if "winner" not in a:
            continue
        shape = "·".join("x".join(map(str, s)) for s in a["sizes"] if len(s) >= 2)
        k = f", kforge {a['kforge_ms']:.4f}" if a.get("kforge_ms") is not None else ""
        rows.append(f"{a['op']} {shape}: {a['winner']} {a['ms']:.4f} ms{k}")
    for f in v.get("kforge", {}).get("fused_timings", []):
        ms = ", ".join(f"{k} {t:.4f}" for k, t in f["ms"].items())
        rows.append(f"fused bias+{f['act']} {'x'.join(map(str, f['shape']))}: {'kforge' if f['kforge'] else 'Inductor'} ({ms} ms)")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--kforge", help="the kforge binary (bundle)")
    ap.add_argument("--out", default="inductor_kernels.json")
    ap.add_argument("--quick", action="store_true", help="MLP, M=2048, float16; phase A without A1/A5 (about 2 minutes)")
    ap.add_argument("--models", default="mlp,llama")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--ms", default="1,16,128,2048")
    ap.add_argument("--compile-m", type=int, default=2048)
    ap.add_argument("--phases", default="A,B")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--control", action="store_true",
                    help="phase B also compiles the graph without kforge a second time, caches off (an A/A control)")
    ap.add_argument("--profile", action="store_true", help="phase B also lists each variant's GPU kernels per step")
    ap.add_argument("--compiles", type=int, default=1,
                    help="phase B compiles each variant this many times (the repeats with every cache off) and also "
                         "compares the variants' medians over their compiles")
    a = ap.parse_args()
    if a.child:
        return child(json.loads(a.child))
    if not a.kforge:
        ap.error("--kforge is required")
    if a.quick:
        a.models, a.dtypes, a.ms = "mlp", "float16", "2048"
    dtypes, models, ms = a.dtypes.split(","), a.models.split(","), [int(x) for x in a.ms.split(",")]
    work = tempfile.mkdtemp(prefix="kforge-inductor-kernels-")
    os.chmod(work, 0o755)  # the sandbox uid must reach the server's cache
    report = {"args": vars(a), "phases": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t_all = time.time()
    server = Server(a.kforge, os.path.join(work, "server-cache"), os.path.join(work, "server.log"))
    print(f"# kforge {server.url}, work {work}", flush=True)
    try:
        if "A" in a.phases:
            t0 = time.time()
            case = [["mlp", dtypes[0], a.compile_m]]
            base = {"cases": case, "url": server.url}
            phase = {}
            if not a.quick:
                phase["A1 without"] = run_child(dict(base, variants=["without"]), work, "A1")
            c0 = server.compiles()
            phase["A2 with, cold server"] = run_child(dict(base, variants=["with"]), work, "A2")
            c1 = server.compiles()
            a3 = run_child(dict(base, variants=["with"]), work, "A3")
            phase["A3 with, warm server"] = a3
            c2 = server.compiles()
            phase["A4 restart (FX graph cache)"] = run_child(dict(base, variants=["with"]), work, "A4",
                                                             inductor_dir=a3["inductor_dir"],
                                                             client_cache=a3["client_cache"])
            c3 = server.compiles()
            if not a.quick:
                phase["A5 with, warm, autotune_in_subproc"] = run_child(dict(base, variants=["with"], subproc=True),
                                                                        work, "A5")
            report["phases"]["A"] = {"runs": phase, "server_compiles": {"A2": (c1 or 0) - (c0 or 0),
                                                                        "A3": (c2 or 0) - (c1 or 0),
                                                                        "A4": (c3 or 0) - (c2 or 0)},
                                     "wall_s": round(time.time() - t0, 1)}
            print(f"# phase A: {time.time() - t0:.0f} s", flush=True)
        if "B" in a.phases:
            t0 = time.time()
            runs = {}
            for dt in dtypes:
                cases = [[mo, dt, m] for mo in models for m in ms]
                variants = ["without", "with"] + (["again"] if a.control else [])
                runs[dt] = run_child({"cases": cases, "url": server.url, "variants": variants, "time_steps": True,
                                      "rounds": a.rounds, "profile": a.profile, "compiles": a.compiles}, work, f"B-{dt}")
                print(f"# phase B {dt}: {runs[dt]['process_s']:.0f} s", flush=True)
            report["phases"]["B"] = {"runs": runs, "wall_s": round(time.time() - t0, 1)}
    finally:
        server.stop()
    report["wall_s"] = round(time.time() - t_all, 1)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print_report(report)
    print(f"# total {report['wall_s']:.0f} s; JSON in {a.out}; logs in {work}")
    return 0


def print_report(report):
    A = report["phases"].get("A")
    if A:
        print("\n## compile (MLP block), each a fresh process with empty Inductor/Triton caches\n")
        print("| run | compile s | process s | kforge calls in the graph | fused | FX cache hit | client requests | "
              "server compiles | rel. err vs eager |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, r in A["runs"].items():
            for c in r.get("cases") or []:
                for var, v in c["variants"].items():
                    if "error" in v:
                        print(f"| {name} | error: {v['error'][:200]} | | | | | | | |")
                        continue
                    kf = v.get("kforge", {})
                    sc = A["server_compiles"].get(name.split()[0], "")
                    print(f"| {name} | {v['compile_s']:.1f} | {r['process_s']:.0f} | {v['kforge_calls']} | {kf.get('fused', '')} | "
                          f"{v['fx_graph_cache'].get('fxgraph_cache_hit', 0)} | {kf.get('client_requests', '')} | {sc} | "
                          f"{v['rel_err_vs_eager']:.2e} |")
            if r["rc"] != 0:
                print(f"| {name} | failed (exit {r['rc']}) | | | | | | | |")
    B = report["phases"].get("B")
    if B:
        print("\n## step time, torch.compile(mode=\"max-autotune\"), ATEN,TRITON, with and without kforge kernels\n")
        print("| model | dtype | M | without (ms) | with (ms) | speed-up | kforge calls (fused) | compile s without / with "
              "| rel. err without / with | within tolerance | A/A: without, compiled again |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        details = []
        for dt, r in B["runs"].items():
            for c in r.get("cases") or []:
                w, k = c["variants"].get("without", {}), c["variants"].get("with", {})
                for var, v in c["variants"].items():
                    if "error" in v:
                        print(f"| {c['model']} | {c['dtype']} | {c['m']} | {var} failed: {v['error'][:200]} | | | | | | |")
                st = c.get("step_ms", {})
                tw, tk = st.get("without", {}).get("median"), st.get("with", {}).get("median")
                sp = f"{tw / tk:.3f}×" if tw and tk else "?"
                ok = k.get("rel_err_vs_eager", 1) <= max(2 * w.get("rel_err_vs_eager", 0), TOL[c["dtype"]])
                ta = st.get("again", {}).get("median")
                aa = f"{ta} ms: {tw / ta:.3f}×" if tw and ta else "—"
                print(f"| {c['model']} | {c['dtype']} | {c['m']} | {tw} | {tk} | {sp} | {k.get('kforge_calls')} "
                      f"({k.get('fused_calls')}) | {w.get('compile_s')} / {k.get('compile_s')} | "
                      f"{w.get('rel_err_vs_eager', float('nan')):.1e} / {k.get('rel_err_vs_eager', float('nan')):.1e} | {ok} "
                      f"| {aa} |")
                details.append((c, k))
            if r["rc"] != 0:
                print(f"| ({dt}) | failed (exit {r['rc']}) | | | | | | | | |")
        moved = [f"{c['model']} {c['dtype']} M={c['m']}: {c['recompiles_while_timed']}" for c, _ in details
                 if c.get("recompiles_while_timed")]
        if moved:
            print("\nNOT VALID: Dynamo compiled graphs while the variants were timed (a variant ran a graph not its own): "
                  + "; ".join(moved))
        if any(len(compiled(c.get("step_ms", {}), "with")) > 1 for c, _ in details):
            print_compiles(details)
        print("\n## which choice won each matmul (with kforge kernels; and in the other variants)\n")
        for c, k in details:
            print(f"- {c['model']} {c['dtype']} M={c['m']}: " + "; ".join(winners(k)) +
                  (f" [refused: {k.get('kforge', {}).get('refused')}]" if k.get("kforge", {}).get("refused") else ""))
            for var, v in c["variants"].items():
                if var != "with" and winners(v):
                    print(f"  - {var}: " + "; ".join(winners(v)))
        for c, _ in details:
            if c.get("kernels_us"):
                print_kernels(c)


def compiled(step_ms, variant):
    """A variant's median step times, one per compile (keys "with", "with#1", ...)."""
    return [t["median"] for k, t in step_ms.items() if k == variant or k.startswith(variant + "#")]


def print_compiles(details):
    """--compiles: each variant's step time over its compiles, and the ratio of their medians (how
    much kforge's kernels change the step, beside how much Inductor's own picks vary)."""
    print("\n## over compiles: each variant compiled anew (caches off), its median step per compile\n")
    print("| model | dtype | M | without: each compile (ms) | with: each compile (ms) | median without / median with | "
          "spread of without (max / min) |")
    print("|---|---|---|---|---|---|---|")
    for c, _ in details:
        w, k = compiled(c.get("step_ms", {}), "without"), compiled(c.get("step_ms", {}), "with")
        if not w or not k:
            continue
        mw, mk = statistics.median(w), statistics.median(k)
        print(f"| {c['model']} | {c['dtype']} | {c['m']} | {' / '.join(f'{t:.4f}' for t in w)} | "
              f"{' / '.join(f'{t:.4f}' for t in k)} | **{mw / mk:.3f}×** | {max(w) / min(w):.3f} |")


def print_kernels(c, rows=14):
    """The kernels whose time per step differs most between the variants (--profile)."""
    prof = c["kernels_us"]
    names = list(prof)
    per = {v: {r[0]: r for r in prof[v]} for v in names}
    total = {v: sum(r[2] for r in prof[v]) for v in names}
    print(f"\n### GPU kernels per step: {c['model']} {c['dtype']} M={c['m']} (µs per step; launches)\n")
    print("| kernel | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    print("| all kernels | " + " | ".join(f"{total[v]:.1f}" for v in names) + " |")
    keys = {k for v in names for k in per[v]}
    spread = sorted(keys, key=lambda k: -(max(per[v].get(k, [0, 0, 0])[2] for v in names) -
                                          min(per[v].get(k, [0, 0, 0])[2] for v in names)))
    for k in spread[:rows]:
        cells = [f"{per[v][k][2]:.1f} ({per[v][k][1]:g})" if k in per[v] else "—" for v in names]
        print(f"| `{k[:90]}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
