#!/usr/bin/env python3
"""One kforge gemm kernel, called from this process so that Nsight Compute can profile it.

Asks a kforge service (started here, like bench/cuda_suite.py) for the gemm with the given
tuning parameters, loads the .so and calls it `--calls` times on torch tensors (and prints the mean time a call). Run it under
ncu on the GPU host, e.g.:

    ncu --target-processes application-only -k regex:gemm_wgmma --launch-skip 1 --launch-count 1 \\
        --section SpeedOfLight --section LaunchStats --section Occupancy \\
        python3 bench/ncu_gemm.py --kforge .device/bundle/bin/kforge --shape 4096x4096x4096 --params '{"mma": "wgmma"}'

With --vendor it calls torch.mm instead, so that cuBLAS's kernel is profiled the same way
(`-k regex:"gemm|nvjet|xmma"`: its name says its tile, cluster and schedule). With
`--epilogue bias_gelu` (`bias_gelu_tanh`) the kernel adds a bias over N and applies the erf (tanh)
gelu, and the vendor call is torch._addmm_activation(bias, A, B, use_gelu=True): cuBLASLt's own
fused bias + gelu (the tanh form), the baseline the suite compares with.

With `--set full` and `-o REPORT`, `ncu -i REPORT --page source --csv --print-source sass`
exports the SASS with each instruction's executions and stall samples; bench/ncu_source.py sums
that up per block (a main loop's instructions per K slice against cuBLAS's).

The profiles taken so far are summed up in the commits that "What was tried" in
docs/BENCHMARKS.md names.
"""
import argparse
import json

import torch

from kforge_gemm import Service, build, gemm_body


def timed(call, calls):
    """Mean milliseconds of `calls` back-to-back calls (no cache flush between them: the
    steady state, at the clocks the GPU holds under that load)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / max(calls, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kforge", help="the kforge binary (not needed with --vendor)")
    ap.add_argument("--shape", default="4096x4096x4096", help="MxNxK")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--params", default="", help="tuning parameters (JSON); the template's defaults if empty")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--options", default="", help="compile options (JSON), e.g. {\"defines\": {\"X\": \"1\"}}")
    ap.add_argument("--vendor", action="store_true", help="profile torch.mm (cuBLAS) on the same shape instead")
    ap.add_argument("--epilogue", choices=["none", "bias_gelu", "bias_gelu_tanh"], default="none")
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    dt = getattr(torch, args.dtype)
    bias_gelu = args.epilogue != "none"
    if args.vendor:
        a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt)
        bias = torch.randn(n, device="cuda", dtype=dt)
        call = (lambda: torch._addmm_activation(bias, a, b, use_gelu=True)) if bias_gelu else (lambda: torch.mm(a, b))
        ms = timed(call, args.calls)
        name = "torch._addmm_activation(use_gelu)" if bias_gelu else "torch.mm"
        print(f"# {name} {args.dtype} {args.shape}: {ms:.4f} ms a call, {args.calls} calls back to back")
        return
    if not args.kforge:
        ap.error("--kforge is required (or --vendor)")
    t = {"A": torch.randn(m, k, device="cuda", dtype=dt), "B": torch.randn(k, n, device="cuda", dtype=dt),
         "C": torch.empty(m, n, device="cuda", dtype=dt), "bias": torch.randn(n, device="cuda", dtype=dt)}
    body = gemm_body(m, n, k, args.dtype, args.epilogue, json.loads(args.params) if args.params else None,
                     json.loads(args.options) if args.options else None)
    with Service(args.kforge) as service:
        j, call = build(service, body, t, m)
    print("# kernel", j["kernel_name"], json.dumps(j["template"]["params"]), flush=True)
    call()
    ms = timed(call, args.calls)
    print(f"# {ms:.4f} ms a call, {args.calls} calls back to back")
    ref = t["A"].float() @ t["B"].float()
    if bias_gelu:
        ref = torch.nn.functional.gelu(ref + t["bias"].float(), approximate="tanh" if args.epilogue.endswith("_tanh") else "none")
    err = (t["C"].float() - ref).abs().max().item()
    print(f"# max abs error vs torch: {err:.3g}")


if __name__ == "__main__":
    main()
