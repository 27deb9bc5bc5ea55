#!/usr/bin/env python3
"""Autotunes the CUDA gemm through a real kforge service on an NVIDIA GPU: float16 and
bfloat16 at 4096^3 and at the skinny 8192x128x8192, default choices, verification against
the reference rendering and cuBLAS timed in the same runner. Prints the ranked choices and a
markdown table; exits 1 if a winner fails verification.
Usage: tests/gpu/cuda_autotune.py --kforge .bundle/bin/kforge
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
    ap.add_argument("--kforge", required=True)
    ap.add_argument("--budget-ms", type=float, default=100)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kforge-autotune-")
    # mkdtemp makes it 0700; as root, kforge runs compilers as the sandbox uid, which must reach the cache
    os.chmod(work, 0o755)
    log_path = os.path.join(work, "server.log")
    proc = subprocess.Popen([args.kforge, "serve", "--port", "0", "--cache-dir", os.path.join(work, "cache")],
                            stdout=subprocess.PIPE, stderr=open(log_path, "w"), text=True)
    url = proc.stdout.readline().split()[-1]
    rows, bad = [], 0
    try:
        tc = json.load(urllib.request.urlopen(url + "/toolchains"))
        print("# device:", json.dumps(tc["cuda"]["device"]), flush=True)
        for dtype in ("float16", "bfloat16"):
            for M, N, K in ((4096, 4096, 4096), (8192, 128, 8192)):
                body = {"backend": "cuda", "arch": "native", "template": "gemm", "choices": "default",
                        "inputs": [{"name": "A", "dtype": dtype, "sizes": [M, K]}, {"name": "B", "dtype": dtype, "sizes": [K, N]}],
                        "output": {"name": "C", "dtype": dtype, "sizes": [M, N]},
                        "benchmark": {"verify": True, "vendor": True, "budget_ms": args.budget_ms}}
                req = urllib.request.Request(url + "/autotune", json.dumps(body).encode(), {"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=1800) as f:
                        j = json.load(f)
                except urllib.error.HTTPError as e:
                    print("HTTP", e.code, e.read()[:2000], flush=True)
                    bad += 1
                    continue
                flops = 2 * M * N * K
                print(f"## {dtype} {M}x{N}x{K}: compile {j['compile_seconds']:.1f}s, benchmark {j['benchmark_seconds']:.1f}s", flush=True)
                for c in j["choices"]:
                    b = c.get("benchmark", {})
                    v = b.get("verify", {})
                    extra = f"{c['median_ms']:.4f} ms {flops / c['median_ms'] / 1e9:.0f} TFLOP/s verify max_abs_err={v.get('max_abs_err')}" \
                        if c["status"] == "ok" else f"{c['status']}: {c.get('error', {}).get('reason', '')[:300]}"
                    print(f"  #{c['rank']} {json.dumps(c['params'], sort_keys=True)} {extra}", flush=True)
                w = j.get("winner")
                v = j.get("vendor", {})
                if not w:
                    print("  no winner:", j.get("winner_reason"), flush=True)
                    bad += 1
                    continue
                rows.append((dtype, (M, N, K), w, v, j.get("vs_vendor")))
        print()
        print("| dtype | M×N×K | winner (ms) | winner TFLOP/s | cuBLAS (ms) | cuBLAS TFLOP/s | winner / cuBLAS | winner params |")
        print("|---|---|---|---|---|---|---|---|")
        for dtype, (M, N, K), w, v, ratio in rows:
            flops = 2 * M * N * K
            print(f"| {dtype} | {M}×{N}×{K} | {w['median_ms']:.4f} | {flops / w['median_ms'] / 1e9:.0f} | {v.get('median_ms', float('nan')):.4f} | "
                  f"{flops / v['median_ms'] / 1e9:.0f} | {ratio:.2f}× | `{json.dumps(w['params'], sort_keys=True)}` |")
    finally:
        proc.terminate()
        proc.wait()
        print("\n# server log (AUTOTUNE lines)")
        for line in open(log_path):
            if line.startswith("AUTOTUNE") or line.startswith("  "):
                print(line.rstrip())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
