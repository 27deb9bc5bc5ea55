#!/usr/bin/env python3
"""Autotunes the cpu gemm (float32) through a real kforge service, for each target ISA and
layout asked, and prints the winner's time beside OpenBLAS's sgemm, both measured by the
cpu runner in the same run (same buffers, same LLC flush, same timing loop). The service
pins OpenBLAS to each target's ISA (SkylakeX kernels for an AVX-512 target, Haswell for
x86-64-v3), so each ratio compares code for the same instruction set.

Usage: bench/cpu_autotune.py [--kforge build/bin/kforge] [--budget-ms 200]
                             [--sizes 1024,2048] [--archs native,x86-64-v3] [--layouts nn,nt]
Exit status 0 when every winner is at least --target times OpenBLAS.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import urllib.request


def operand(name, rows, cols, transposed):
    """A [rows, cols] operand; transposed: stored column-major (a .t() view of [cols, rows])."""
    strides = [1, rows] if transposed else [cols, 1]
    return {"name": name, "dtype": "float32", "sizes": [rows, cols], "strides": strides}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kforge", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "kforge"))
    ap.add_argument("--budget-ms", type=float, default=200)
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--archs", default="native,x86-64-v3")
    ap.add_argument("--layouts", default="nn,nt", help="nn: A, B row-major; nt: B transposed")
    ap.add_argument("--target", type=float, default=1.0, help="winner/OpenBLAS throughput to reach")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kforge-bench-")
    log = open(os.path.join(work, "server.log"), "w")
    proc = subprocess.Popen([args.kforge, "serve", "--port", "0", "--cache-dir", os.path.join(work, "cache")],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    url = proc.stdout.readline().split()[-1]
    rows = []
    try:
        with urllib.request.urlopen(url + "/toolchains") as f:
            cpu = json.load(f)["cpu"]
        print(f"cpu: {cpu_model()}; g++ native = {cpu['native']}", flush=True)
        for arch in args.archs.split(","):
            for layout in args.layouts.split(","):
                for s in map(int, args.sizes.split(",")):
                    body = {"backend": "cpu", "arch": arch, "template": "gemm", "choices": "default",
                            "inputs": [operand("A", s, s, layout[0] == "t"), operand("B", s, s, layout[1] == "t")],
                            "output": {"name": "C", "dtype": "float32", "sizes": [s, s]},
                            "benchmark": {"verify": True, "vendor": True, "budget_ms": args.budget_ms}}
                    req = urllib.request.Request(url + "/autotune", json.dumps(body).encode(),
                                                 {"Content-Type": "application/json"})
                    with urllib.request.urlopen(req, timeout=3600) as f:
                        j = json.load(f)
                    w, v = j["winner"], j["vendor"]
                    flops = 2 * s ** 3
                    rows.append((arch, layout, s, w, v, j))
                    print(f"{arch:>10} {layout} {s}^3  winner {w['median_ms']:.2f} ms ({flops / w['median_ms'] / 1e6:.1f} GFLOP/s)"
                          f"  openblas[{v['name'].split('(')[-1].split(' ')[0]}] {v['median_ms']:.2f} ms"
                          f" ({flops / v['median_ms'] / 1e6:.1f} GFLOP/s)  ratio {j['vs_vendor']:.2f}x"
                          f"  verified={w['benchmark']['verify']['passed']}  params={json.dumps(w['params'], sort_keys=True)}",
                          flush=True)
        print()
        print(f"device: {rows[0][5]['device']['name']} ({rows[0][5]['device']['threads']} threads)")
        print("| target | layout | size | winner (ms) | winner GFLOP/s | OpenBLAS kernels | OpenBLAS (ms) | OpenBLAS GFLOP/s "
              "| winner / OpenBLAS | choices | winner params |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for arch, layout, s, w, v, j in rows:
            flops = 2 * s ** 3
            core = v["name"].split("(")[-1].split(" ")[0]
            print(f"| {arch} | {layout.upper()} | {s}³ | {w['median_ms']:.2f} | {flops / w['median_ms'] / 1e6:.1f} | {core} | "
                  f"{v['median_ms']:.2f} | {flops / v['median_ms'] / 1e6:.1f} | {j['vs_vendor']:.2f}× | {len(j['choices'])} | "
                  f"`{json.dumps(w['params'], sort_keys=True)}` |")
        ok = all(j["vs_vendor"] >= args.target for *_, j in rows)
        print(f"\ntarget (winner >= {args.target}x OpenBLAS everywhere): {'met' if ok else 'NOT met'}")
        return 0 if ok else 1
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
