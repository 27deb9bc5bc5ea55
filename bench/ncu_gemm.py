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
`--epilogue bias_gelu` the kernel adds a bias over N and applies the erf gelu, and the vendor
call is torch._addmm_activation(bias, A, B, use_gelu=True): cuBLASLt's own fused bias + gelu
(the tanh form), the baseline the suite compares with.

The summaries kept per step are in docs/gpu/ (ncu_*.txt).
"""
import argparse
import ctypes
import json
import os
import subprocess
import tempfile
import urllib.request

import torch


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
    ap.add_argument("--epilogue", choices=["none", "bias_gelu"], default="none")
    args = ap.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    dt = getattr(torch, args.dtype)
    bias_gelu = args.epilogue == "bias_gelu"
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
    work = tempfile.mkdtemp(prefix="kforge-ncu-")
    os.chmod(work, 0o755)  # the sandbox uid must reach the cache
    proc = subprocess.Popen([args.kforge, "serve", "--port", "0", "--cache-dir", os.path.join(work, "cache")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = proc.stdout.readline().split()[-1]
    try:
        body = {"backend": "cuda", "arch": "native", "template": "gemm",
                "inputs": [{"name": "A", "dtype": args.dtype, "sizes": [m, k]}, {"name": "B", "dtype": args.dtype, "sizes": [k, n]}],
                "output": {"name": "C", "dtype": args.dtype, "sizes": [m, n]}}
        if bias_gelu:
            body["inputs"].append({"name": "bias", "dtype": args.dtype, "sizes": [n]})
            body["epilogue"] = [{"op": "add", "input": 2}, {"op": "gelu"}]
        if args.params:
            body["params"] = json.loads(args.params)
        if args.options:
            body["options"] = json.loads(args.options)
        req = urllib.request.Request(url + "/kernels", json.dumps(body).encode(), {"Content-Type": "application/json"})
        j = json.load(urllib.request.urlopen(req, timeout=600))
        path = os.path.join(work, j["kernel_name"] + ".so")
        with open(path, "wb") as f:
            f.write(urllib.request.urlopen(url + j["artifact"]["url"]).read())
    finally:
        proc.terminate()
        proc.wait()
    print("# kernel", j["kernel_name"], json.dumps(j["template"]["params"]), flush=True)
    t = {"A": torch.randn(m, k, device="cuda", dtype=dt), "B": torch.randn(k, n, device="cuda", dtype=dt),
         "C": torch.empty(m, n, device="cuda", dtype=dt), "bias": torch.randn(n, device="cuda", dtype=dt)}
    fn = getattr(ctypes.CDLL(path), j["kernel_name"])

    def call_args(ws, ws_size=None):  # M is an argument where the kernel takes any M (no "value")
        argv = []
        for a in j["abi"]["args"]:
            if a["kind"] == "tensor": argv.append(ctypes.c_void_p(t[a["binds"]].data_ptr()))
            elif a["kind"] == "scalar": argv.append(ctypes.c_int64(a.get("value", m)))
            elif a["kind"] == "workspace": argv.append(ctypes.c_void_p(ws.data_ptr()) if ws is not None else None)
            elif a["kind"] == "workspace_size": argv.append(ws_size)
            else: argv.append(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        return argv
    size = ctypes.c_size_t(0)
    assert fn(*call_args(None, ctypes.byref(size))) == 0
    ws = torch.empty(max(1, size.value), device="cuda", dtype=torch.uint8)
    argv = call_args(ws)
    rc = fn(*argv)
    assert rc == 0, rc
    ms = timed(lambda: fn(*argv), args.calls)
    print(f"# {ms:.4f} ms a call, {args.calls} calls back to back")
    ref = t["A"].float() @ t["B"].float()
    if bias_gelu:
        ref = torch.nn.functional.gelu(ref + t["bias"].float())
    err = (t["C"].float() - ref).abs().max().item()
    print(f"# max abs error vs torch: {err:.3g}")


if __name__ == "__main__":
    main()
