#!/usr/bin/env python3
"""Kernel variants against each other and against cuBLAS, interleaved in one process.

Builds each arm's gemm through a kforge service (`--arm NAME='{"params": {...}, "options":
{...}}'`, e.g. a temporary `#ifndef` define of the template), checks each against torch in
float, then times them round by round: every round calls each arm once and torch.mm (cuBLAS,
or with `--epilogue bias_gelu[_tanh]` torch._addmm_activation's fused bias + gelu, cuBLASLt's, and
torch.mm, the plain gemm a fused kernel would replace) once, in an order
that rotates from round to round, each call after the L2 flush the runner does (a 256 MiB
memset) and timed with CUDA events. So the arms share the GPU's clocks, temperature and
neighbours, and no arm always follows the same one (the runner times its choices one after
another, where a drift in clocks during the run lands on whichever is timed last).

    python3 bench/gemm_ab.py --kforge .device/bundle/bin/kforge --shape 4096x4096x4096 --dtype float16 \\
        --arm base='{"params": {"mma": "wgmma"}}' \\
        --arm g16='{"params": {"mma": "wgmma"}, "options": {"defines": {"KF_GROUP_M": 16}}}'

Prints the device, then per arm min / median / p90 over the rounds and cuBLAS median / arm
median. A result worth keeping goes into a commit message or docs/BENCHMARKS.md.
"""
import argparse
import concurrent.futures
import json
import statistics
import subprocess

import torch

from kforge_gemm import Service, build, gemm_body


def device_line():
    p = torch.cuda.get_device_properties(0)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        smi = "nvidia-smi unavailable"
    return f"# device: {p.name}, {p.multi_processor_count} SMs, CUDA {torch.version.cuda}, torch {torch.__version__}; driver, SM clock, max: {smi}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kforge", required=True)
    ap.add_argument("--shape", default="4096x4096x4096", help="MxNxK")
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--epilogue", choices=["none", "bias_gelu", "bias_gelu_tanh"], default="none",
                    help="bias_gelu (_tanh): kforge's bias + erf (tanh) gelu against cuBLASLt's fused bias + tanh gelu "
                         "(as bench/ncu_gemm.py) and the plain gemm")
    ap.add_argument("--arm", action="append", required=True, help='NAME={"params": {...}, "options": {...}}')
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--flush", choices=["zero", "fill"], default="zero",
                    help="zero_() the flush buffer before each call, as Inductor's and Triton's benchmarkers do, or fill_() it with "
                         "a changing nonzero byte")
    ap.add_argument("--order", choices=["interleaved", "blocked"], default="interleaved",
                    help="blocked: all rounds of one arm, then the next (as the runner timed a kernel, then the vendor, before 2026-11-25)")
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    dt = getattr(torch, args.dtype)
    bias_gelu = args.epilogue != "none"
    torch.manual_seed(0)
    t = {"A": torch.randn(m, k, device="cuda", dtype=dt), "B": torch.randn(k, n, device="cuda", dtype=dt),
         "C": torch.empty(m, n, device="cuda", dtype=dt), "bias": torch.randn(n, device="cuda", dtype=dt)}
    ref = t["A"].float() @ t["B"].float()
    if bias_gelu:
        ref = torch.nn.functional.gelu(ref + t["bias"].float(), approximate="tanh" if args.epilogue.endswith("_tanh") else "none")
    print(device_line())
    print(f"# {args.dtype} {args.shape} epilogue {args.epilogue}, {args.rounds} rounds, {args.order}, "
          f"a 256 MiB {args.flush}_() before each call")

    calls = {}
    arms = {name: json.loads(arm) if arm else {} for name, _, arm in (spec.partition("=") for spec in args.arm)}
    with Service(args.kforge) as service, concurrent.futures.ThreadPoolExecutor(len(arms)) as pool:
        # the service compiles the arms at once; each is then checked in the order given
        built = {name: pool.submit(build, service, gemm_body(m, n, k, args.dtype, args.epilogue, arm.get("params"), arm.get("options")), t, m)
                 for name, arm in arms.items()}
        for name, arm in arms.items():
            j, call = built[name].result()
            t["C"].zero_()
            call()
            torch.cuda.synchronize()
            err = (t["C"].float() - ref).abs().max().item()
            print(f"# arm {name}: {j['kernel_name']} {json.dumps(j['template']['params'])} options {json.dumps(arm.get('options', {}))}; "
                  f"max abs error vs torch {err:.3g}", flush=True)
            calls[name] = call
    vendor = "torch._addmm_activation(use_gelu)" if bias_gelu else "torch.mm"
    calls["torch.mm"] = lambda: torch.mm(t["A"], t["B"])
    if bias_gelu:
        calls[vendor] = lambda: torch._addmm_activation(t["bias"], t["A"], t["B"], use_gelu=True)

    flush = torch.empty(256 << 20, device="cuda", dtype=torch.uint8)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    names = list(calls)
    times = {name: [] for name in names}
    for _ in range(10):
        for name in names:
            calls[name]()
    if args.order == "interleaved":  # round r calls the arms from the r-th on
        order = [names[(r + i) % len(names)] for r in range(args.rounds) for i in range(len(names))]
    else:
        order = [name for name in names for _ in range(args.rounds)]
    for r, name in enumerate(order):
        if args.flush == "zero":
            flush.zero_()
        else:
            flush.fill_(1 + r % 255)
        start.record()
        calls[name]()
        end.record()
        end.synchronize()
        times[name].append(start.elapsed_time(end))

    bases = [vendor] + (["torch.mm"] if bias_gelu else [])  # with an epilogue, also against the plain gemm
    print(f"| arm | min (ms) | median (ms) | p90 (ms) | runs | " + " | ".join(f"{b} median / arm median" for b in bases) + " |")
    print("|---|---|---|---|---|" + "---|" * len(bases))
    for name in names:
        v = sorted(times[name])
        med, p90 = statistics.median(v), v[min(len(v) - 1, (len(v) * 9 + 9) // 10 - 1)]
        ratios = " | ".join(f"{statistics.median(times[b]) / med:.3f}" for b in bases)
        print(f"| {name} | {v[0]:.4f} | {med:.4f} | {p90:.4f} | {len(v)} | {ratios} |")


if __name__ == "__main__":
    main()
