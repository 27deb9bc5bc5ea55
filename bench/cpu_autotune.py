#!/usr/bin/env python3
"""Autotunes the cpu gemm (float32) at 1024^3 and 2048^3 over the template's default
choices through a real kforge service, and prints the winner's time beside OpenBLAS's
sgemm, both measured by the cpu runner in the same run (same buffers, same L2 flush,
same timing loop). Usage: bench/cpu_autotune.py [--kforge build/bin/kforge] [--budget-ms 300]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kforge", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "kforge"))
    ap.add_argument("--budget-ms", type=float, default=300)
    ap.add_argument("--sizes", default="1024,2048")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kforge-bench-")
    log = open(os.path.join(work, "server.log"), "w")
    proc = subprocess.Popen([args.kforge, "serve", "--port", "0", "--cache-dir", os.path.join(work, "cache")],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    url = proc.stdout.readline().split()[-1]
    rows = []
    try:
        for s in map(int, args.sizes.split(",")):
            body = {"backend": "cpu", "template": "gemm", "choices": "default",
                    "inputs": [{"name": "A", "dtype": "float32", "sizes": [s, s]},
                               {"name": "B", "dtype": "float32", "sizes": [s, s]}],
                    "output": {"name": "C", "dtype": "float32", "sizes": [s, s]},
                    "benchmark": {"verify": True, "vendor": True, "budget_ms": args.budget_ms}}
            req = urllib.request.Request(url + "/autotune", json.dumps(body).encode(), {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=3600) as f:
                j = json.load(f)
            w, v = j["winner"], j["vendor"]
            flops = 2 * s ** 3
            rows.append((s, w, v, j))
            print(f"{s}^3  winner {w['kernel_name']} {w['median_ms']:.2f} ms ({flops / w['median_ms'] / 1e6:.1f} GFLOP/s)"
                  f"  openblas {v['median_ms']:.2f} ms ({flops / v['median_ms'] / 1e6:.1f} GFLOP/s)"
                  f"  winner/openblas throughput {j['vs_vendor']:.2f}x  verified={w['benchmark']['verify']['passed']}"
                  f"  params={json.dumps(w['params'], sort_keys=True)}", flush=True)
        print()
        print(f"device: {rows[0][3]['device']['name']} ({rows[0][3]['device']['threads']} threads); vendor: {rows[0][2]['name']}")
        print("| size | winner (ms) | winner GFLOP/s | OpenBLAS sgemm (ms) | OpenBLAS GFLOP/s | winner / OpenBLAS | choices | winner params |")
        print("|---|---|---|---|---|---|---|---|")
        for s, w, v, j in rows:
            flops = 2 * s ** 3
            print(f"| {s}³ | {w['median_ms']:.2f} | {flops / w['median_ms'] / 1e6:.1f} | {v['median_ms']:.2f} | "
                  f"{flops / v['median_ms'] / 1e6:.1f} | {j['vs_vendor']:.2f}× | {len(j['choices'])} | "
                  f"`{json.dumps(w['params'], sort_keys=True)}` |")
        ok = all(j["vs_vendor"] >= 0.8 for _, _, _, j in rows)
        print(f"\ntarget (winner >= 0.8x OpenBLAS at every size): {'met' if ok else 'NOT met'}")
        return 0 if ok else 1
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
