#!/usr/bin/env python3
"""Runs the CUDA gemm cases on a real NVIDIA GPU through a real kforge service.

Starts `kforge serve` (the binary given by --kforge), submits each case over HTTP,
downloads the .so, calls it through ctypes on torch tensors laid out as the request
says (row/column-major views, batch strides, storage offsets) and compares the result
with a float64 torch reference of the same epilogue. Prints one line per case and a
summary; exits non-zero if any case fails. With --bench, also times a few tuning
choices at 4096^3 against torch.matmul (cuBLAS) with CUDA events.
"""
import argparse
import concurrent.futures
import ctypes
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import torch

DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
TOL = {"float32": (1e-4, 1e-4), "float16": (2e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}  # (rtol, atol per sqrt(K))


def start_server(kforge, cache):
    proc = subprocess.Popen([kforge, "serve", "--port", "0", "--cache-dir", cache],
                            stdout=subprocess.PIPE, stderr=open(os.path.join(cache, "..", "server.log"), "w"), text=True)
    line = proc.stdout.readline()
    assert line.startswith("listening on "), line
    return proc, line.split()[-1]


def post(url, path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as f:
            return f.status, json.load(f)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def meta(name, t, offset=0):
    return {"name": name, "dtype": str(t.dtype).replace("torch.", ""), "sizes": list(t.shape),
            "strides": list(t.stride()), "offset": offset}


def operand(rows, cols, dtype, transposed, batch=0):
    shape = ([batch] if batch else []) + ([cols, rows] if transposed else [rows, cols])
    t = torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)
    return t.transpose(-1, -2) if transposed else t


def epilogue_ref(v, ops, inputs):
    for op in ops:
        o = op["op"]
        if o == "add": v = v + inputs[op["input"]].double()
        elif o == "mul": v = v * inputs[op["input"]].double()
        elif o == "scale": v = v * op["value"]
        elif o == "relu": v = torch.relu(v)
        elif o == "gelu": v = torch.nn.functional.gelu(v, approximate=op.get("approximate", "none"))
        elif o == "silu": v = torch.nn.functional.silu(v)
        elif o == "sigmoid": v = torch.sigmoid(v)
        elif o == "tanh": v = torch.tanh(v)
        elif o == "cast": v = v.to(DT[op["dtype"]]).double()
    return v


class Kernel:
    def __init__(self, url, body, workdir):
        st, self.j = post(url, "/kernels", body)
        if st != 200:
            raise RuntimeError(f"HTTP {st}: {self.j.get('detail')} {json.dumps(self.j.get('errors'))} {self.j.get('log', '')[:2000]}")
        data = urllib.request.urlopen(url + self.j["artifact"]["url"]).read()
        # A file of its own per load: two cases may get the same kernel, and rewriting a
        # loaded .so would pull it from under the other.
        fd, path = tempfile.mkstemp(prefix=self.j["kernel_name"] + ".", suffix=".so", dir=workdir)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        self.fn = getattr(ctypes.CDLL(path), self.j["kernel_name"])
        self.fn.restype = ctypes.c_int

    def args(self, tensors, sizes, workspace_size=None, workspace=None):
        """The call's arguments in ABI order: a scalar the template fixed takes its value, one
        it left to run time (M) takes sizes[name]."""
        out = []
        for a in self.j["abi"]["args"]:
            if a["kind"] == "tensor": out.append(ctypes.c_void_p(tensors[a["binds"]].data_ptr()) if tensors else None)
            elif a["kind"] == "scalar": out.append(ctypes.c_int64(a["value"] if "value" in a else sizes[a["name"]]))
            elif a["kind"] == "workspace": out.append(ctypes.c_void_p(workspace.data_ptr()) if workspace is not None else None)
            elif a["kind"] == "workspace_size": out.append(workspace_size)
            else: out.append(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        return out

    def workspace_size(self, sizes):
        """The kernel's answer to the workspace query at these sizes (no tensor touched)."""
        size = ctypes.c_size_t(0)
        rc = self.fn(*self.args(None, sizes, ctypes.byref(size)))
        if rc != 0:
            raise RuntimeError(f"{self.j['kernel_name']} workspace query returned {rc}")
        if self.j["abi"].get("workspace_bytes") is not None and size.value != self.j["abi"]["workspace_bytes"]:
            raise RuntimeError(f"workspace query says {size.value} bytes, the manifest {self.j['abi']['workspace_bytes']}")
        return size.value

    def __call__(self, tensors, sizes=None):
        # The workspace the kernel asks for at these sizes (split-K's partial sums; the manifest
        # says the same where the sizes are fixed), filled with NaN so that a kernel that reads
        # what it did not write shows it.
        nbytes = self.workspace_size(sizes)
        workspace = None
        if nbytes:
            workspace = torch.full(((nbytes + 3) // 4,), float("nan"), device="cuda", dtype=torch.float32)
        rc = self.fn(*self.args(tensors, sizes, workspace=workspace))
        if rc != 0:
            raise RuntimeError(f"{self.j['kernel_name']} returned {rc}")


def run_case(url, workdir, dtype, M, N, K, ta, tb, ops=(), extra=(), batch=0, params=None, arch="sm_90", c_col=False):
    """With c_col, C is column-major (each batch's columns contiguous) and NaN-filled: an output
    the kernel leaves unwritten fails the comparison."""
    A = operand(M, K, DT[dtype], ta, batch)
    B = operand(K, N, DT[dtype], tb, batch)
    if c_col:
        C = torch.full(([batch] if batch else []) + [N, M], float("nan"), device="cuda", dtype=DT[dtype]).transpose(-1, -2)
    else:
        C = torch.empty(*(([batch] if batch else []) + [M, N]), device="cuda", dtype=DT[dtype])
    inputs = [A, B] + [e for _, e in extra]
    body = {"backend": "cuda", "arch": arch, "template": "gemm",
            "inputs": [meta("A", A), meta("B", B)] + [meta(n, e) for n, e in extra],
            "output": meta("C", C), "epilogue": list(ops)}
    if params: body["params"] = params
    k = Kernel(url, body, workdir)
    names = {"A": A, "B": B, "C": C}
    names.update({n: e for n, e in extra})
    k(names, {"M": M})
    torch.cuda.synchronize()
    ref = epilogue_ref(A.double() @ B.double(), ops, inputs)
    # A cast in the epilogue rounds to that dtype: judge at the coarsest dtype involved.
    coarsest = max([dtype] + [op["dtype"] for op in ops if op["op"] == "cast"], key=lambda d: TOL[d][0])
    rtol, atol = TOL[coarsest]
    atol *= math.sqrt(K)
    err = (C.double() - ref).abs()
    ok = bool((err <= atol + rtol * ref.abs()).all())
    return ok, float(err.max()), k.j


def run_views(url, workdir, dtype, A, B, arch, params=None, C=None):
    """Runs the kernel on A and B as the views they are (strides, storage offsets, base
    alignment) and compares with float64. torch's data_ptr() already points at a view's
    first element, so the TensorMeta offset (added by the kernel to the pointer it
    receives) is 0 here."""
    if C is None:
        C = torch.empty(*A.shape[:-1], B.shape[-1], device="cuda", dtype=DT[dtype])
    body = {"backend": "cuda", "arch": arch, "template": "gemm",
            "inputs": [meta("A", A), meta("B", B)], "output": meta("C", C)}
    if params: body["params"] = params
    k = Kernel(url, body, workdir)
    k({"A": A, "B": B, "C": C}, {"M": A.shape[-2]})
    torch.cuda.synchronize()
    ref = A.double() @ B.double()
    rtol, atol = TOL[dtype]
    err = (C.double() - ref).abs()
    return bool((err <= atol * math.sqrt(A.shape[-1]) + rtol * ref.abs()).all()), float(err.max()), k.j


def run_case_shared_b(url, workdir, dtype):
    """A [3,40,70] strided view at storage offset 5, B [70,56] shared by every batch."""
    store = torch.randn(5 + 3 * 40 * 72, device="cuda").to(DT[dtype])
    A = store[5:].view(3, 40, 72)[:, :, :70]
    B = torch.randn(70, 56, device="cuda").to(DT[dtype])
    return run_views(url, workdir, dtype, A, B, "sm_90")


def run_case_gemv_views(url, workdir, dtype, params):
    """gemv on B starting 2 bytes past a 16-byte boundary (storage element 1) with rows of 1001,
    and A as every other column of a wider matrix: B's first and last chunks lie partly outside it."""
    M, N, K = 3, 1001, 517
    store = torch.randn(1 + K * N, device="cuda").to(DT[dtype])
    B = store[1:].view(K, N)
    A = torch.randn(M, 2 * K, device="cuda").to(DT[dtype])[:, ::2]
    return run_views(url, workdir, dtype, A, B, "sm_90a", params)


def run_case_misaligned(url, workdir, dtype, params):
    """A starts 2 bytes past a 16-byte boundary (a view at element 1 of its storage): TMA
    cannot load it, so the sm_90a kernel must take its mma_sync path and still be right."""
    M, N, K = 136, 200, 264
    store = torch.randn(1 + M * K, device="cuda").to(DT[dtype])
    A = store[1:].view(M, K)
    B = torch.randn(K, N, device="cuda").to(DT[dtype])
    return run_views(url, workdir, dtype, A, B, "sm_90a", params)


def run_case_misaligned_c(url, workdir, dtype, params=None):
    """C starts 2 bytes past a 16-byte boundary, its rows 8-element aligned: the wgmma kernel
    stores whole 16-byte vectors, so such a C must take the mma_sync path and still be right
    (with swap_ab the wgmma kernel itself stores C^T one output at a time from its warps' buffers)."""
    M, N, K = 136, 200, 264
    A = torch.randn(M, K, device="cuda").to(DT[dtype])
    B = torch.randn(K, N, device="cuda").to(DT[dtype])
    C = torch.empty(1 + M * N, device="cuda", dtype=DT[dtype])[1:].view(M, N)
    return run_views(url, workdir, dtype, A, B, "sm_90a", params, C=C)


def run_case_strided_c(url, workdir, dtype, M, N, K, params, ld, col_major=False):
    """C as a view of rows `ld` elements long (16-byte aligned) holding N columns, B likewise; or
    with col_major C column-major, its columns `ld` long holding M rows (B contiguous). The wgmma kernel stores
    a C whose rows are its columns (swap_ab's C^T, or a column-major C) 16 bytes at a time through
    its warps' buffers; where the contiguous dimension (N swapped, M not) is no multiple of 8 the
    last vector of every column is stored one output at a time, and must stop at its end."""
    A = torch.randn(M, K, device="cuda").to(DT[dtype])
    B = torch.randn(K, N if col_major else ld, device="cuda").to(DT[dtype])[:, :N]
    # NaN everywhere: what the kernel leaves unwritten fails the comparison, and the padding
    # past each of C's columns must still be NaN after the call.
    store = torch.full((N, ld) if col_major else (M, ld), float("nan"), device="cuda", dtype=DT[dtype])
    C = store[:, :M].t() if col_major else store[:, :N]
    ok, err, j = run_views(url, workdir, dtype, A, B, "sm_90a", params, C=C)
    pad = store[:, M if col_major else N:]
    if not bool(pad.isnan().all()):
        return False, float("inf"), j
    # And it was the buffered transposed store that ran: its stmatrix .trans (STSM), which no
    # other store of the kernel issues, is in the machine code (a kernel that fell back to
    # storing from registers would pass the comparison too; sass_has_hgmma is the control).
    if not stsm_forms(sass_of(url, j, workdir)):
        raise AssertionError("no stmatrix (STSM) in the kernel's SASS: C^T was not stored through the warps' buffers")
    return ok, err, j


def stsm_forms(sass):
    """{SASS mnemonic: count} of the stmatrix stores (STSM) in a kernel's SASS."""
    forms = {}
    for w in sass.split():
        if w.startswith("STSM"):
            forms[w] = forms.get(w, 0) + 1
    return forms


def sass_of(url, j, workdir):
    """The SASS of a /kernels answer's .so: fetched into workdir (not loaded), cuobjdump on the GPU host."""
    path = os.path.join(workdir, j["key"][:16] + ".sass.so")
    with open(path, "wb") as f:
        f.write(urllib.request.urlopen(url + j["artifact"]["url"]).read())
    return subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True, check=True).stdout


def run_case_runtime_m(url, workdir, dtype, params, M0, Ms, N, K, ops=()):
    """A kernel built for M0 rows takes M as an argument (its ABI's M has no value): called on
    M rows for every M of Ms (tensors of the request's strides), it must agree with float64
    each time; a request for another M gets the same kernel from the cache, and the service
    benchmarks and verifies it at that request's M (the last two of Ms, which must not be M0:
    a request at M0 is the first one again, whose benchmark the service answers from its cache)."""
    if M0 in Ms[-2:]:
        raise ValueError(f"M0 = {M0} is one of the last two Ms, which must be benchmarked afresh")
    bias = torch.randn(N, device="cuda", dtype=torch.float32)

    def tensors(M):
        A = torch.randn(M, K, device="cuda").to(DT[dtype])
        B = torch.randn(K, N, device="cuda").to(DT[dtype])
        res = torch.randn(M, N, device="cuda").to(DT[dtype])
        return {"A": A, "B": B, "C": torch.empty(M, N, device="cuda", dtype=DT[dtype]), "bias": bias, "res": res}

    def body(M):
        t = tensors(M)
        b = {"backend": "cuda", "arch": "sm_90a", "template": "gemm", "params": params,
             "inputs": [meta(n, t[n]) for n in ("A", "B", "bias", "res")], "output": meta("C", t["C"]), "epilogue": list(ops)}
        return b
    k = Kernel(url, dict(body(M0), benchmark={"verify": True}), workdir)
    if k.j.get("benchmark", {}).get("status") != "ok" or not k.j["benchmark"].get("verify", {}).get("passed"):
        raise RuntimeError(f"the service's benchmark at M={M0}: {json.dumps(k.j.get('benchmark'))[:1500]}")
    if any(a["name"] == "M" and "value" in a for a in k.j["abi"]["args"]):
        raise RuntimeError(f"M is fixed in the ABI: {k.j['abi']['args']}")
    worst = 0.0
    for M in Ms:
        t = tensors(M)
        k(t, {"M": M})
        torch.cuda.synchronize()
        ref = epilogue_ref(t["A"].double() @ t["B"].double(), ops, [t["A"], t["B"], t["bias"], t["res"]])
        rtol, atol = TOL[dtype]
        err = (t["C"].double() - ref).abs()
        if not bool((err <= atol * math.sqrt(K) + rtol * ref.abs()).all()):
            raise RuntimeError(f"M={M}: max_abs_err {float(err.max()):.3g}")
        worst = max(worst, float(err.max()))
    # Two other M at once: the same kernel from the cache, each benchmarked on its own tensors
    # (not the M0 result stored in the entry they share, nor each other's: the runner's
    # workspace_bytes is the kernel's answer at the request's M).
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda M: (M, post(url, "/kernels", dict(body(M), benchmark={"verify": True}))), Ms[-2:]))
    for M, (st, j) in answers:
        if st != 200 or j["key"] != k.j["key"] or j["cache"] not in ("hit", "joined"):
            raise RuntimeError(f"M={M}: HTTP {st}, cache {j.get('cache')}, key {j.get('key')} vs {k.j['key']}")
        b = j.get("benchmark", {})
        if b.get("status") != "ok" or not b.get("verify", {}).get("passed") or b.get("cached"):
            raise RuntimeError(f"the service's benchmark at M={M}: {json.dumps(b)[:1500]}")
        if b.get("workspace_bytes") != k.workspace_size({"M": M}):
            raise RuntimeError(f"M={M}: benchmarked with {b.get('workspace_bytes')} workspace bytes, the kernel needs "
                               f"{k.workspace_size({'M': M})} there: another M's tensors")
    return True, worst, k.j


def vendor_fuses_epilogue(url, workdir):
    """The vendor time of a bias + gelu gemm is cuBLASLt's own fused epilogue; of a silu, the plain
    gemm, saying that the epilogue is not in it. Both timed interleaved with the kernel (as many
    rounds each), and the kernel verified."""
    def body(ops, extra):
        return {"backend": "cuda", "arch": "sm_90a", "template": "gemm",
                "inputs": [{"name": "A", "dtype": "float16", "sizes": [4, 256, 192]},
                           {"name": "B", "dtype": "float16", "sizes": [4, 192, 320]}] + extra,
                "output": {"name": "C", "dtype": "float16", "sizes": [4, 256, 320]}, "epilogue": ops,
                "benchmark": {"verify": True, "vendor": True, "budget_ms": 20}}
    st, fused = post(url, "/kernels", body([{"op": "add", "input": 2}, {"op": "gelu"}],
                                           [{"name": "bias", "dtype": "float16", "sizes": [320]}]))
    assert st == 200, fused
    v = fused["benchmark"]["vendor"]
    ok = (v.get("name") == "cublasLt+bias_gelu (tanh gelu)" and v.get("epilogue") == "fused" and v.get("median_ms", 0) > 0
          and v["asked_epilogue"]["ops"] == "bias_gelu" and fused["benchmark"]["verify"]["passed"])
    st, plain = post(url, "/kernels", body([{"op": "silu"}], []))
    assert st == 200, plain
    w = plain["benchmark"]["vendor"]
    ok = ok and w.get("name") == "cublas" and w.get("median_ms", 0) > 0 and w.get("asked_epilogue") is None
    ok = ok and all(x["vendor"].get("order") == "interleaved" and x["vendor"]["iters"] == x["iters"] >= 5
                    for x in (fused["benchmark"], plain["benchmark"]))
    if not ok:
        raise AssertionError(f"vendor of bias+gelu: {v}; of silu: {w}")
    return True, 0.0, fused


def gelu_accuracy(url, workdir, dtype, arch, form="erf", params=None):
    """The gelu of a tuned kernel (kf_gelu_erf, or kf_gelu_tanh for form "tanh") against its
    float64 value (x Phi(x); x / (1 + e^(-2u)) with u = sqrt(2 / pi) (x + 0.044715 x^3)) for every
    float16 value in [-16, 16] (as the dtype holds it) and inf, -inf, NaN, through a gemm that
    passes x on as x and -x (A's column 0 is x, B's row 0 alternately 1 and -1, the rest zeros), so
    that the wgmma kernel's pairs of adjacent outputs, which share one rcp with tanh
    (kf_gelu_tanh2), pair each value with its negation (columns) or the next value (rows of a
    swapped kernel's pairs; `params` pins one). Each output is the
    float64 value rounded to the output type, give or take 1.2e-5 of it (the function's own error:
    6.8e-6 and 9.3e-6 at most in float), so a gelu worse than that shows in the rounding of some of
    the 30,000 values. inf gives inf and NaN gives NaN; -inf gives 0, the limit, with erf (the erff
    formula: NaN) and NaN with tanh, as the tanhf formula does."""
    fn = {"erf": "kf_gelu_erf", "tanh": "kf_gelu_tanh"}[form]
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    x = bits[torch.isfinite(bits) & (bits.abs() <= 16)]
    x = torch.cat([x, torch.tensor([float("inf"), float("-inf"), float("nan")])]).cuda()
    M, N, K = x.numel(), 8, 16
    A = torch.zeros(M, K, device="cuda", dtype=DT[dtype])
    A[:, 0] = x.to(DT[dtype])
    B = torch.zeros(K, N, device="cuda", dtype=DT[dtype])
    B[0] = torch.tensor([1.0, -1.0] * (N // 2))
    C = torch.empty(M, N, device="cuda", dtype=DT[dtype])
    body = {"backend": "cuda", "arch": arch, "template": "gemm", "inputs": [meta("A", A), meta("B", B)],
            "output": meta("C", C), "epilogue": [{"op": "gelu", "approximate": "tanh" if form == "tanh" else "none"}]}
    if params:
        body["params"] = params
    k = Kernel(url, body, workdir)
    source = urllib.request.urlopen(url + k.j["source_url"]).read().decode()
    if f"{fn}(v)" not in source:
        raise AssertionError(f"the tuned kernel does not call {fn}")
    if k.j["template"]["params"].get("mma") == "wgmma" and form == "tanh" and "kf_gelu_tanh2(v0, v1)" not in source:
        raise AssertionError("the wgmma kernel's epilogue does not call kf_gelu_tanh2")
    k({"A": A, "B": B, "C": C}, {"M": M})
    torch.cuda.synchronize()
    out = C.double()
    xd = A[:, 0].double()[:, None] * B[0].double()  # each output's x as the gemm saw it (bfloat16 rounds some)
    if form == "tanh":
        ref = xd / (1 + torch.exp(-2 * math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
    else:
        ref = xd * 0.5 * torch.erfc(-xd / math.sqrt(2))
    finite = torch.isfinite(xd[:, 0])
    for col, (pos, neg) in ((0, (0, 1)), (1, (1, 0))):  # column 1 sees -inf, inf, NaN
        specials = out[~finite, col].tolist()
        if not (specials[pos] == float("inf") and (specials[neg] == 0 if form == "erf" else math.isnan(specials[neg]))
                and math.isnan(specials[2])):
            raise AssertionError(f"gelu of column {col}'s inf, -inf, nan = {specials}")
    # Where the ex2 falls below float's smallest normal it flushes to zero (erf: x < -13; tanh: the
    # rcp of 1 + 2^y for y > 126, x < -10, and kf_gelu_tanh2's 1 / (d0 d1) past 2^126): outputs
    # under 2^-124 (erf) or 2^-120 (tanh) may be 0.
    half_ulp = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24}[dtype]
    tiny = 2.0 ** -25 if dtype == "float16" else 2.0 ** (-120 if form == "tanh" else -124)
    xs, ys, refs = xd[finite], out[finite], ref[finite]
    err = (ys - refs).abs()
    bound = (half_ulp + 1.2e-5) * refs.abs() + tiny
    bad = err > bound
    if bad.any():
        i, j = (int(v) for v in bad.nonzero()[0])
        raise AssertionError(f"{int(bad.sum())} of {bad.numel()} values off, e.g. gelu({xs[i, j].item()!r}) = {ys[i, j].item()!r}, "
                             f"float64 {refs[i, j].item()!r}")
    return True, float((err / bound).max()), k.j  # the largest error as a fraction of its bound


# A cluster of two 128x128 tiles along N over N = 384: three columns of tiles, so the last
# cluster's second tile starts at column 384, past C. Its epilogue must still read nothing past
# its inputs (a bias over N, a column-major [M, N] input).
PHANTOM = {"M": 1000, "N": 384, "K": 1000, "ta": False, "tb": False, "arch": "sm_90a",
           "ops": [{"op": "add", "input": 2}, {"op": "gelu", "approximate": "tanh"}, {"op": "mul", "input": 3}],
           "params": {"block_m": 128, "block_n": 128, "block_k": 64, "warps": 12, "stages": 6, "mma": "wgmma", "cluster_n": 2}}


def phantom_case(url, workdir):
    extra = [("bias", torch.randn(PHANTOM["N"], device="cuda").half()),
             ("res", torch.randn(PHANTOM["N"], PHANTOM["M"], device="cuda").half().t())]
    return run_case(url, workdir, "float16", extra=extra, **PHANTOM)


def cluster_phantom_column(url, workdir):
    """PHANTOM's values against torch, then the same call in a child process under
    compute-sanitizer's memcheck, torch's caching allocator off so that each tensor is an
    allocation of its own: a read past the bias or the [M, N] input is an error (the clamp that
    kf_epilogue2's coordinates skip where every tile lies inside C skipped it here until the
    clusters were counted). Where the GPU host has no compute-sanitizer, the values only."""
    ok, err, j = phantom_case(url, workdir)
    cs = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not ok or not os.path.exists(cs):
        return ok, err, j
    r = subprocess.run([cs, "--tool", "memcheck", "--error-exitcode", "3", "--print-limit", "3", sys.executable,
                        os.path.abspath(__file__), "--phantom-child", url, workdir],
                       env={**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"compute-sanitizer exited {r.returncode}: {(r.stdout + r.stderr)[-800:]}")
    return True, err, j


def sass_has_hgmma(url, workdir):
    """The sm_90a default kernel's machine code issues HGMMA, and no stmatrix (cuobjdump on
    the GPU host)."""
    A = torch.randn(256, 256, device="cuda").half()
    body = {"backend": "cuda", "arch": "sm_90a", "template": "gemm",
            "inputs": [meta("A", A), meta("B", A)], "output": meta("C", A)}
    k = Kernel(url, body, workdir)
    sass = sass_of(url, k.j, workdir)
    n = sass.count("HGMMA")
    # A row-major C is stored without stmatrix: the control of the STSM that run_case_strided_c
    # requires of the transposed store.
    forms = stsm_forms(sass)
    if forms:
        raise AssertionError(f"stmatrix in a row-major C's kernel: {forms}")
    return n > 0, float(n), k.j


def bench(fn, iters=None, budget_ms=300):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); fn(); end.record(); torch.cuda.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    n = iters or max(5, min(200, int(budget_ms / once)))
    times = []
    flush = torch.empty(64 << 20, dtype=torch.int8, device="cuda")
    for _ in range(n):
        flush.zero_()  # evict L2 between runs, as Inductor's benchmarker does
        start.record(); fn(); end.record(); torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[0], times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kforge", required=True)
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only-wgmma", action="store_true", help="only the sm_90a cases (the wgmma and gemv kernels)")
    ap.add_argument("--match", default="", help="only the cases whose label contains this (or one of these, comma-separated)")
    args = ap.parse_args()
    torch.manual_seed(0)
    work = tempfile.mkdtemp(prefix="kforge-gpu-")
    # mkdtemp makes it 0700; as root, kforge runs compilers as the sandbox uid, which must reach the cache
    os.chmod(work, 0o755)
    os.makedirs(os.path.join(work, "cache"))
    proc, url = start_server(args.kforge, os.path.join(work, "cache"))
    print(f"# device: {torch.cuda.get_device_name()}  torch {torch.__version__}  server {url}", flush=True)
    passed = failed = 0
    cases = []

    def report(label, fn, **bound):
        # Cases run later on a thread pool: bind their arguments now, not at call time.
        cases.append((label, lambda: fn(**bound)))

    def run_one(label, fn):
        nonlocal passed, failed
        t0 = time.time()
        try:
            ok, err, j = fn()
            status = "PASS" if ok else "FAIL"
            detail = f"max_abs_err={err:.3g} kernel={j['kernel_name']} regs={[r.get('registers') for r in j['compile']['resources']]}"
        except Exception as e:  # noqa: BLE001 - report and go on
            ok, status, detail = False, "FAIL", str(e)[:3000]
        passed += ok
        failed += not ok
        print(f"{status} {label:58s} {detail} ({time.time() - t0:.1f}s)", flush=True)

    try:
        shapes = [(1, 1, 1), (127, 253, 61), (1024, 1024, 1024)] if not args.quick else [(127, 253, 61)]
        for dtype in ("float16", "bfloat16", "float32"):
            for layout in range(4):
                ta, tb = bool(layout // 2), bool(layout % 2)
                for M, N, K in shapes:
                    lab = f"{dtype} {'NT'[ta]}{'NT'[tb]} {M}x{N}x{K}"
                    report(lab, run_case, url=url, workdir=work, dtype=dtype, M=M, N=N, K=K, ta=ta, tb=tb)
        M, N, K = 200, 300, 520
        ops = [[{"op": "relu"}], [{"op": "gelu"}], [{"op": "gelu", "approximate": "tanh"}], [{"op": "silu"}],
               [{"op": "sigmoid"}], [{"op": "tanh"}], [{"op": "scale", "value": 0.125}],
               [{"op": "cast", "dtype": "bfloat16"}]]
        for dtype in ("float16", "bfloat16"):
            for op in ops:
                report(f"{dtype} epilogue {op[0]['op']}{'/tanh' if op[0].get('approximate') == 'tanh' else ''}",
                       run_case, url=url, workdir=work, dtype=dtype, M=M, N=N, K=K, ta=False, tb=False, ops=op)
            bias = torch.randn(N, device="cuda", dtype=torch.float32)
            rowb = torch.randn(M, 1, device="cuda", dtype=DT[dtype])
            res = torch.randn(M, N, device="cuda", dtype=DT[dtype])
            common = dict(url=url, workdir=work, dtype=dtype, M=M, N=N, K=K)
            report(f"{dtype} epilogue add bias[N]", run_case, **common, ta=False, tb=True,
                   ops=[{"op": "add", "input": 2}], extra=[("bias", bias)])
            report(f"{dtype} epilogue add rows[M,1]", run_case, **common, ta=True, tb=False,
                   ops=[{"op": "add", "input": 2}], extra=[("rowb", rowb)])
            report(f"{dtype} epilogue mul full", run_case, **common, ta=False, tb=False,
                   ops=[{"op": "mul", "input": 2}], extra=[("res", res)])
            report(f"{dtype} chain add+gelu+mul", run_case, **common, ta=True, tb=True,
                   ops=[{"op": "add", "input": 2}, {"op": "gelu"}, {"op": "mul", "input": 3}],
                   extra=[("bias", bias), ("res", res)])
            report(f"{dtype} batched 4x 96x80x72", run_case, url=url, workdir=work, dtype=dtype, M=96, N=80, K=72,
                   ta=False, tb=True, batch=4)
            report(f"{dtype} batched, B shared, A offset 5", run_case_shared_b, url=url, workdir=work, dtype=dtype)
        for params in ({"block_m": 64, "block_n": 64, "block_k": 32, "warps": 4, "stages": 2},
                       {"block_m": 128, "block_n": 256, "block_k": 64, "warps": 8, "stages": 3},
                       {"block_m": 64, "block_n": 128, "block_k": 16, "warps": 2, "stages": 1}):
            report(f"float16 params {params}", run_case, url=url, workdir=work, dtype="float16", M=333, N=517, K=259,
                   ta=False, tb=False, params=params)

        # Hopper: the warp-specialized TMA + wgmma kernel (sm_90a), every layout, ragged edges
        # in M, N and K, each default tiling, epilogues, batches and the misaligned fallback.
        for dtype in ("float16", "bfloat16"):
            for layout in range(4):
                ta, tb = bool(layout // 2), bool(layout % 2)
                for M, N, K in ((200, 264, 136), (8, 8, 8), (1024, 1024, 1024)):
                    report(f"wgmma {dtype} {'NT'[ta]}{'NT'[tb]} {M}x{N}x{K}", run_case, url=url, workdir=work, dtype=dtype,
                           M=M, N=N, K=K, ta=ta, tb=tb, arch="sm_90a")
            bias = torch.randn(264, device="cuda", dtype=torch.float32)
            res = torch.randn(200, 264, device="cuda", dtype=DT[dtype])
            report(f"wgmma {dtype} chain add+gelu+mul", run_case, url=url, workdir=work, dtype=dtype, M=200, N=264, K=136,
                   ta=True, tb=False, ops=[{"op": "add", "input": 2}, {"op": "gelu"}, {"op": "mul", "input": 3}],
                   extra=[("bias", bias), ("res", res)], arch="sm_90a")
            report(f"wgmma {dtype} batched 4x 96x80x72", run_case, url=url, workdir=work, dtype=dtype, M=96, N=80, K=72,
                   ta=False, tb=True, batch=4, arch="sm_90a")
            # C's rows 262 elements apart are not 16-byte aligned: the wgmma kernel without the staged
            # store ("mma": "wgmma" asks for it: a problem it cannot take is a 400, not mma_sync).
            bias262 = torch.randn(262, device="cuda", dtype=torch.float32)
            report(f"wgmma {dtype} NT add+gelu 200x262x136 (unstaged C)", run_case, url=url, workdir=work, dtype=dtype, M=200, N=262,
                   K=136, ta=False, tb=True, ops=[{"op": "add", "input": 2}, {"op": "gelu"}], extra=[("bias", bias262)], arch="sm_90a",
                   params={"mma": "wgmma"})
            report(f"wgmma {dtype} misaligned A -> mma_sync", run_case_misaligned, url=url, workdir=work, dtype=dtype, params=None)
            report(f"wgmma {dtype} misaligned C -> mma_sync", run_case_misaligned_c, url=url, workdir=work, dtype=dtype)
        tmpl_choices = []
        for bm, bn, w, st in ((128, 256, 12, 4), (128, 256, 12, 3), (256, 128, 12, 4), (128, 128, 12, 6), (128, 128, 8, 6),
                              (64, 256, 8, 5), (64, 128, 8, 8), (128, 64, 12, 8), (64, 64, 8, 8)):
            tmpl_choices.append({"block_m": bm, "block_n": bn, "block_k": 64, "warps": w, "stages": st, "mma": "wgmma"})
        for params in tmpl_choices:
            for layout in (0, 3):
                ta, tb = bool(layout // 2), bool(layout % 2)
                report(f"wgmma float16 {'NT'[ta]}{'NT'[tb]} 520x392x200 {params}", run_case, url=url, workdir=work, dtype="float16",
                       M=520, N=392, K=200, ta=ta, tb=tb, params=params, arch="sm_90a")
        # Split-K: K cut into parts whose partial sums a second kernel adds up before the
        # epilogue; ragged M, N and K, uneven parts (13 slices in 4 parts of 4 and 1), batches,
        # every layout, and the default that picks it for a skinny problem.
        for dtype in ("float16", "bfloat16"):
            for layout in range(4):
                ta, tb = bool(layout // 2), bool(layout % 2)
                for split in (2, 4):
                    report(f"wgmma {dtype} {'NT'[ta]}{'NT'[tb]} split_k {split} 72x392x800", run_case, url=url, workdir=work, dtype=dtype,
                           M=72, N=392, K=800, ta=ta, tb=tb, arch="sm_90a",
                           params={"block_m": 64, "block_n": 128, "block_k": 64, "warps": 8, "stages": 8, "split_k": split, "mma": "wgmma"})
            bias = torch.randn(390, device="cuda", dtype=torch.float32)
            report(f"wgmma {dtype} split_k 3 add+gelu 33x390x1000", run_case, url=url, workdir=work, dtype=dtype, M=33, N=390, K=1000,
                   ta=False, tb=True, ops=[{"op": "add", "input": 2}, {"op": "gelu"}], extra=[("bias", bias)], arch="sm_90a",
                   params={"block_m": 64, "block_n": 128, "block_k": 64, "warps": 8, "stages": 8, "split_k": 3, "mma": "wgmma"})
            report(f"wgmma {dtype} split_k 2 batched 3x 40x136x520", run_case, url=url, workdir=work, dtype=dtype, M=40, N=136, K=520,
                   ta=True, tb=False, batch=3, arch="sm_90a",
                   params={"block_m": 64, "block_n": 128, "block_k": 64, "warps": 8, "stages": 8, "split_k": 2, "mma": "wgmma"})
            report(f"wgmma {dtype} default 1x4096x4096 (split K)", run_case, url=url, workdir=work, dtype=dtype, M=1, N=4096, K=4096,
                   ta=False, tb=False, arch="sm_90a")
        # The tail split: the tiles past the last full wave cut into parts of K (wgmma.cuh's
        # tail_parts, for 132 SMs): 257 rows of 64x128 tiles (165: a wave and 33, in 4 parts),
        # every layout, an epilogue, a batch whose tail takes two rounds of parts (200 tiles:
        # 68 in 3 parts), parts capped by K's two slices, a K of one slice (no parts), 128x256
        # and 128x192 tiles (28 tail tiles in 4 parts, 11 in 8), bf16, and a kernel taking M at
        # run time whose tail changes with M (fewer tiles than SMs at M = 1: all of them cut).
        # The workspace is NaN-filled, so a slot read but not written shows.
        ts = {"block_m": 64, "block_n": 128, "block_k": 64, "warps": 8, "stages": 8, "split_k": 1, "tail_split": 1, "mma": "wgmma"}
        chain_ts = [{"op": "add", "input": 2}, {"op": "gelu"}, {"op": "mul", "input": 3}]
        gelu_bias = [{"op": "add", "input": 2}, {"op": "gelu", "approximate": "tanh"}]
        for dtype in ("float16", "bfloat16"):
            for layout in range(4):  # an M-major A needs M a multiple of 8 (TMA): 264 rows there
                ta, tb = bool(layout // 2), bool(layout % 2)
                m = 264 if ta else 257
                report(f"wgmma {dtype} {'NT'[ta]}{'NT'[tb]} tail_split {m}x4104x1000", run_case, url=url, workdir=work,
                       dtype=dtype, M=m, N=4104, K=1000, ta=ta, tb=tb, arch="sm_90a", params=ts)
            report(f"wgmma {dtype} tail_split add+gelu 257x4096x4096", run_case, url=url, workdir=work, dtype=dtype, M=257, N=4096,
                   K=4096, ta=False, tb=False, ops=gelu_bias,
                   extra=[("bias", torch.randn(4096, device="cuda", dtype=torch.float32))], arch="sm_90a", params=ts)
            report(f"wgmma {dtype} tail_split batched 5x 300x1000x520 (two rounds of parts)", run_case, url=url, workdir=work,
                   dtype=dtype, M=300, N=1000, K=520, ta=False, tb=True, batch=5, arch="sm_90a", params=ts)
            for k in (128, 64):
                report(f"wgmma {dtype} tail_split 1100x1000x{k} ({k // 64} K slices)", run_case, url=url, workdir=work, dtype=dtype,
                       M=1100, N=1000, K=k, ta=False, tb=False, arch="sm_90a", params=ts)
            report(f"wgmma {dtype} tail_split 128x256 2048x11008x4096", run_case, url=url, workdir=work, dtype=dtype, M=2048, N=11008,
                   K=4096, ta=False, tb=False, arch="sm_90a", params={**ts, "block_m": 128, "block_n": 256, "warps": 12, "stages": 4})
            report(f"wgmma {dtype} 128x192 3072x3072x3072", run_case, url=url, workdir=work, dtype=dtype, M=3072, N=3072, K=3072,
                   ta=False, tb=True, arch="sm_90a",
                   params={"block_m": 128, "block_n": 192, "block_k": 64, "warps": 12, "stages": 5, "split_k": 1, "mma": "wgmma"})
            report(f"wgmma {dtype} tail_split 128x192 4647x2048x7168 add+gelu", run_case, url=url, workdir=work, dtype=dtype, M=4647,
                   N=2048, K=7168, ta=False, tb=False, ops=gelu_bias,
                   extra=[("bias", torch.randn(2048, device="cuda", dtype=torch.float32))], arch="sm_90a",
                   params={**ts, "block_m": 128, "block_n": 192, "warps": 12, "stages": 5})
        report("wgmma float16 runtime M tail_split 64x128", run_case_runtime_m, url=url, workdir=work, dtype="float16", params=ts,
               M0=257, Ms=[1, 64, 300, 2049, 4224], N=4104, K=1000, ops=chain_ts)
        report("wgmma bfloat16 runtime M tail_split 128x256", run_case_runtime_m, url=url, workdir=work, dtype="bfloat16",
               params={**ts, "block_m": 128, "block_n": 256, "warps": 12, "stages": 4}, M0=257, Ms=[1, 2049, 4224], N=4104, K=1000,
               ops=chain_ts)
        # Clusters of two blocks on two tiles of a column, each multicasting half of B to both:
        # every layout (a K-major and an N-major B take different multicast paths), an odd
        # number of tile rows (the last pair's second tile lies past M), one consumer
        # warpgroup, 64-column tiles (one B panel: one block loads it for both), a batch, an
        # epilogue, split-K inside a cluster, and the 4096^3 default that picks clusters.
        c2 = {"block_k": 64, "split_k": 1, "cluster_m": 2, "mma": "wgmma"}
        wide = {**c2, "block_m": 128, "block_n": 256, "warps": 12, "stages": 4}
        for dtype in ("float16", "bfloat16"):
            for layout in range(4):
                ta, tb = bool(layout // 2), bool(layout % 2)
                report(f"wgmma {dtype} {'NT'[ta]}{'NT'[tb]} cluster_m 2 520x392x800", run_case, url=url, workdir=work, dtype=dtype,
                       M=520, N=392, K=800, ta=ta, tb=tb, arch="sm_90a", params=wide)
            report(f"wgmma {dtype} default 4096x4096x4096 (cluster_m 2)", run_case, url=url, workdir=work, dtype=dtype,
                   M=4096, N=4096, K=4096, ta=False, tb=False, arch="sm_90a")
        for tb in (False, True):
            report(f"wgmma float16 N{'NT'[tb]} cluster_m 2 one consumer 64x128 200x264x136", run_case, url=url, workdir=work,
                   dtype="float16", M=200, N=264, K=136, ta=False, tb=tb, arch="sm_90a",
                   params={**c2, "block_m": 64, "block_n": 128, "warps": 8, "stages": 8})
            report(f"wgmma float16 N{'NT'[tb]} cluster_m 2 128x64 tiles 300x200x136", run_case, url=url, workdir=work,
                   dtype="float16", M=300, N=200, K=136, ta=False, tb=tb, arch="sm_90a",
                   params={**c2, "block_m": 128, "block_n": 64, "warps": 12, "stages": 8})
        report("wgmma bfloat16 cluster_m 2 batched 3x 520x392x200", run_case, url=url, workdir=work, dtype="bfloat16",
               M=520, N=392, K=200, ta=False, tb=True, batch=3, arch="sm_90a", params=wide)
        bias = torch.randn(392, device="cuda", dtype=torch.float32)
        report("wgmma float16 cluster_m 2 add+gelu 520x392x800", run_case, url=url, workdir=work, dtype="float16",
               M=520, N=392, K=800, ta=True, tb=False, ops=[{"op": "add", "input": 2}, {"op": "gelu"}], extra=[("bias", bias)],
               arch="sm_90a", params=wide)
        report("wgmma float16 cluster_m 2 split_k 3 200x392x800", run_case, url=url, workdir=work, dtype="float16",
               M=200, N=392, K=800, ta=False, tb=False, arch="sm_90a",
               params={**c2, "block_m": 64, "block_n": 128, "warps": 8, "stages": 8, "split_k": 3})
        # mma_sync with K split (float partial sums added up by splitk_reduce), reading rows that
        # do not start on 16 bytes in place (their aligned blocks landed, then shifted in shared
        # memory): the search's choice where an operand would be copied for TMA and the problem
        # is memory-bound. B with N odd
        # and an epilogue, the decode gemv, an M-major A with M odd, a K-major B with K odd in a
        # batch, and M at run time (the workspace grows with M).
        ms = {"block_m": 64, "block_n": 128, "block_k": 32, "warps": 4, "stages": 3, "split_k": 4, "mma": "mma_sync"}
        for dtype in ("float16", "bfloat16"):
            report(f"mma_sync split_k 4 {dtype} B rows off 16 bytes add+gelu 65x6145x2150", run_case, url=url, workdir=work,
                   dtype=dtype, M=65, N=6145, K=2150, ta=False, tb=False, arch="sm_90a", params=ms,
                   ops=[{"op": "add", "input": 2}, {"op": "gelu", "approximate": "tanh"}],
                   extra=[("bias", torch.randn(6145, device="cuda", dtype=torch.float32))])
        report("mma_sync split_k 8 warps 8 bfloat16 B rows off 16 bytes 65x6145x2150", run_case, url=url, workdir=work,
               dtype="bfloat16", M=65, N=6145, K=2150, ta=False, tb=False, arch="sm_90a",
               params=dict(ms, block_m=128, block_k=64, warps=8, split_k=8))
        report("mma_sync split_k 8 float16 gemv 1x5121x20480", run_case, url=url, workdir=work, dtype="float16", M=1, N=5121,
               K=20480, ta=False, tb=False, arch="sm_90a", params=dict(ms, block_m=32, block_k=64, stages=2, split_k=8))
        report("mma_sync split_k 3 bfloat16 TN (A's rows of 257) 257x1000x777", run_case, url=url, workdir=work, dtype="bfloat16",
               M=257, N=1000, K=777, ta=True, tb=False, arch="sm_90a", params=dict(ms, split_k=3))
        report("mma_sync split_k 2 float16 NT (B's rows of 777) batched 3x 65x1001x777", run_case, url=url, workdir=work,
               dtype="float16", M=65, N=1001, K=777, ta=False, tb=True, batch=3, arch="sm_80", params=dict(ms, split_k=2))
        # A column-major C (and a swapped problem's C^T below): the partial sums lie along C's
        # columns and are added up along them, M = 65 ending in a short quad.
        report("mma_sync split_k 4 float16 column-major C add+gelu 65x1001x2150", run_case, url=url, workdir=work, dtype="float16",
               M=65, N=1001, K=2150, ta=False, tb=False, arch="sm_90a", params=ms, c_col=True,
               ops=[{"op": "add", "input": 2}, {"op": "gelu"}], extra=[("bias", torch.randn(1001, device="cuda", dtype=torch.float32))])
        report("mma_sync split_k 4 float16 runtime M (N odd)", run_case_runtime_m, url=url, workdir=work, dtype="float16",
               params=ms, M0=65, Ms=[1, 64, 300, 2049], N=2561, K=1000,
               ops=[{"op": "add", "input": 2}, {"op": "gelu"}, {"op": "mul", "input": 3}])
        # Operands whose strides TMA cannot take (a row of an odd length), copied into the
        # workspace first: A with K odd (its rows), B with N odd (and so C, stored without TMA),
        # an M-major A with M odd, a K-major B with K odd, both at once in a batch whose batch
        # strides are odd too, split-K beside the copies, an epilogue, the default parameters,
        # and a kernel taking M at run time whose copy of A follows M.
        pk = {"block_m": 64, "block_n": 128, "block_k": 64, "warps": 8, "stages": 8, "split_k": 1, "cluster_m": 1, "mma": "wgmma"}
        for dtype in ("float16", "bfloat16"):
            report(f"wgmma {dtype} packed A (K odd) 65x2560x6849", run_case, url=url, workdir=work, dtype=dtype, M=65, N=2560, K=6849,
                   ta=False, tb=False, arch="sm_90a", params=pk)
            report(f"wgmma {dtype} packed A split_k 3 65x2560x6849", run_case, url=url, workdir=work, dtype=dtype, M=65, N=2560,
                   K=6849, ta=False, tb=False, arch="sm_90a", params=dict(pk, split_k=3))
            report(f"wgmma {dtype} packed B (N odd) add+gelu 300x4097x1000", run_case, url=url, workdir=work, dtype=dtype, M=300,
                   N=4097, K=1000, ta=False, tb=False, ops=[{"op": "add", "input": 2}, {"op": "gelu", "approximate": "tanh"}],
                   extra=[("bias", torch.randn(4097, device="cuda", dtype=torch.float32))], arch="sm_90a",
                   params=dict(pk, block_m=128, block_n=192, warps=12, stages=5))
            report(f"wgmma {dtype} packed TN (M odd) 257x1000x520", run_case, url=url, workdir=work, dtype=dtype, M=257, N=1000,
                   K=520, ta=True, tb=False, arch="sm_90a", params=pk)
            report(f"wgmma {dtype} packed NT (K odd) 200x1000x777", run_case, url=url, workdir=work, dtype=dtype, M=200, N=1000,
                   K=777, ta=False, tb=True, arch="sm_90a", params=pk)
            report(f"wgmma {dtype} packed both batched 3x 65x1001x517", run_case, url=url, workdir=work, dtype=dtype, M=65, N=1001,
                   K=517, ta=False, tb=False, batch=3, arch="sm_90a", params=pk)
            report(f"wgmma {dtype} packed default params 3905x4097x4096", run_case, url=url, workdir=work, dtype=dtype, M=3905,
                   N=4097, K=4096, ta=False, tb=False, arch="sm_90a")
        report("wgmma float16 runtime M packed A 64x128", run_case_runtime_m, url=url, workdir=work, dtype="float16", params=pk,
               M0=257, Ms=[1, 65, 257, 1000, 2049], N=4104, K=1001, ops=[{"op": "add", "input": 2}, {"op": "mul", "input": 3}])
        # swap_ab: the kernel runs C^T = B^T A^T, M along wgmma's N in tiles of any multiple of
        # 8 rows: every layout whose A has unit K stride (NN, NT; TN takes 64-row multiples),
        # the last tile past M (258 rows in 136s, 257 in 88s), an epilogue over N (bias) and
        # over M and N (an [M, N] input: the epilogue reads (n, m) as its (m, n)), split-K, a
        # cluster (B^T's blocks share A^T), a batch, M = 1 (8-row tiles), a copied B^T (N odd),
        # a misaligned A (the mma_sync kernel, on the swapped problem too) and a misaligned C
        # (stored one output at a time from the warps' buffers: no TMA, no fallback needed).
        sw = {"block_m": 128, "block_n": 136, "block_k": 64, "warps": 12, "stages": 6, "split_k": 1, "cluster_m": 1, "swap_ab": 1,
              "mma": "wgmma"}
        chain_sw = [{"op": "add", "input": 2}, {"op": "gelu", "approximate": "tanh"}, {"op": "mul", "input": 3}]
        for dtype in ("float16", "bfloat16"):
            for tb in (False, True):
                report(f"wgmma {dtype} N{'NT'[tb]} swap_ab 128x136 258x1000x520", run_case, url=url, workdir=work, dtype=dtype, M=258,
                       N=1000, K=520, ta=False, tb=tb, arch="sm_90a", params=sw)
            report(f"wgmma {dtype} TN swap_ab 128x64 264x1000x520", run_case, url=url, workdir=work, dtype=dtype, M=264, N=1000, K=520,
                   ta=True, tb=False, arch="sm_90a", params=dict(sw, block_n=64))
            report(f"wgmma {dtype} swap_ab 128x88 bias+gelu*res 257x4096x4096", run_case, url=url, workdir=work, dtype=dtype, M=257,
                   N=4096, K=4096, ta=False, tb=False, ops=chain_sw, arch="sm_90a", params=dict(sw, block_n=88),
                   extra=[("bias", torch.randn(4096, device="cuda", dtype=torch.float32)),
                          ("res", torch.randn(257, 4096, device="cuda").to(DT[dtype]))])
            report(f"wgmma {dtype} swap_ab 128x136 split_k 2 bias+gelu 257x4096x4096", run_case, url=url, workdir=work, dtype=dtype,
                   M=257, N=4096, K=4096, ta=False, tb=False, ops=chain_sw[:2], arch="sm_90a", params=dict(sw, split_k=2),
                   extra=[("bias", torch.randn(4096, device="cuda", dtype=torch.float32))])
            # Split-K's and the tail split's partial sums of C^T lie along C's rows (tc::W_COLUMNS):
            # N = 1003 ends each row in a short quad and takes scalar loads, a batch's rows follow
            # each other, and the tail's slots are read along their columns.
            report(f"wgmma {dtype} swap_ab 128x136 split_k 3 bias+gelu 258x1003x2048", run_case, url=url, workdir=work, dtype=dtype,
                   M=258, N=1003, K=2048, ta=False, tb=False, ops=chain_sw[:2], arch="sm_90a", params=dict(sw, split_k=3),
                   extra=[("bias", torch.randn(1003, device="cuda", dtype=torch.float32))])
            report(f"wgmma {dtype} swap_ab 128x40 split_k 2 batched 3x 40x392x1040", run_case, url=url, workdir=work, dtype=dtype,
                   M=40, N=392, K=1040, ta=False, tb=True, batch=3, arch="sm_90a", params=dict(sw, block_n=40, split_k=2))
            report(f"wgmma {dtype} swap_ab 128x136 tail_split bias+gelu 258x1003x2048", run_case, url=url, workdir=work, dtype=dtype,
                   M=258, N=1003, K=2048, ta=False, tb=False, ops=chain_sw[:2], arch="sm_90a", params=dict(sw, tail_split=1),
                   extra=[("bias", torch.randn(1003, device="cuda", dtype=torch.float32))])
            for extra_params in ({"split_k": 2}, {"tail_split": 1}):
                report(f"wgmma {dtype} column-major C 128x128 {extra_params} 261x1000x1040", run_case, url=url, workdir=work,
                       dtype=dtype, M=261, N=1000, K=1040, ta=False, tb=False, arch="sm_90a", c_col=True,
                       params=dict(sw, block_n=128, swap_ab=0, **extra_params))
            report(f"wgmma {dtype} swap_ab 64x144 cluster_m 2 258x2000x520", run_case, url=url, workdir=work, dtype=dtype, M=258,
                   N=2000, K=520, ta=False, tb=False, arch="sm_90a", params=dict(sw, block_m=64, warps=8, block_n=144, stages=8, cluster_m=2))
            report(f"wgmma {dtype} swap_ab 128x40 batched 3x 40x392x520", run_case, url=url, workdir=work, dtype=dtype, M=40, N=392,
                   K=520, ta=False, tb=True, batch=3, arch="sm_90a", params=dict(sw, block_n=40))
            report(f"wgmma {dtype} swap_ab 128x8 split_k 4 1x4096x4096", run_case, url=url, workdir=work, dtype=dtype, M=1, N=4096,
                   K=4096, ta=False, tb=False, arch="sm_90a", params=dict(sw, block_n=8, split_k=4, stages=8))
            report(f"wgmma {dtype} swap_ab 64x8 copied B^T (N odd) 2x22017x1000", run_case, url=url, workdir=work, dtype=dtype, M=2,
                   N=22017, K=1000, ta=False, tb=False, arch="sm_90a", params=dict(sw, block_m=64, warps=8, block_n=8, stages=8))
            # Deep rings (the few-rows tilings: as many stages as fit, up to 16): the ring wraps
            # many times over a long K, holds more stages than a short K has slices, and a
            # second tile of M lies past its end.
            report(f"wgmma {dtype} swap_ab 64x72 ring 12 bias+gelu 65x5120x5120", run_case, url=url, workdir=work, dtype=dtype, M=65,
                   N=5120, K=5120, ta=False, tb=False, ops=chain_sw[:2], arch="sm_90a",
                   params=dict(sw, block_m=64, warps=8, block_n=72, stages=12),
                   extra=[("bias", torch.randn(5120, device="cuda", dtype=torch.float32))])
            report(f"wgmma {dtype} swap_ab 64x24 ring 16 40x2560x2592", run_case, url=url, workdir=work, dtype=dtype, M=40, N=2560,
                   K=2592, ta=False, tb=False, arch="sm_90a", params=dict(sw, block_m=64, warps=8, block_n=24, stages=16))
            report(f"wgmma {dtype} NT 64x64 ring 13 over 9 K slices 128x4096x520", run_case, url=url, workdir=work, dtype=dtype, M=128,
                   N=4096, K=520, ta=False, tb=True, arch="sm_90a", params=dict(sw, block_m=64, warps=8, block_n=64, stages=13, swap_ab=0))
            # Two consumers' 256-row tiles of N, two 64-row wgmma tiles a thread (up to 176
            # accumulators, past the launch's 168 registers: setmaxnreg's 232): M's last tile past
            # its end (8 x 152 = 1216 rows for 1204), split-K's partial sums, a batch with a K-major B.
            report(f"wgmma {dtype} swap_ab 256x152 bias+gelu 1204x8192x2048", run_case, url=url, workdir=work, dtype=dtype, M=1204,
                   N=8192, K=2048, ta=False, tb=False, ops=chain_sw[:2], arch="sm_90a", params=dict(sw, block_m=256, block_n=152, stages=4),
                   extra=[("bias", torch.randn(8192, device="cuda", dtype=torch.float32))])
            report(f"wgmma {dtype} swap_ab 256x176 split_k 2 bias+gelu*res 300x1000x1040", run_case, url=url, workdir=work, dtype=dtype,
                   M=300, N=1000, K=1040, ta=False, tb=False, ops=chain_sw, arch="sm_90a",
                   params=dict(sw, block_m=256, block_n=176, stages=3, split_k=2),
                   extra=[("bias", torch.randn(1000, device="cuda", dtype=torch.float32)),
                          ("res", torch.randn(300, 1000, device="cuda").to(DT[dtype]))])
            report(f"wgmma {dtype} NT swap_ab 256x104 batched 3x 100x1000x520", run_case, url=url, workdir=work, dtype=dtype, M=100,
                   N=1000, K=520, ta=False, tb=True, batch=3, arch="sm_90a", params=dict(sw, block_m=256, block_n=104, stages=4))
            report(f"wgmma {dtype} swap_ab misaligned A -> mma_sync", run_case_misaligned, url=url, workdir=work, dtype=dtype,
                   params=dict(sw, block_n=136))
            report(f"wgmma {dtype} swap_ab misaligned C", run_case_misaligned_c, url=url, workdir=work, dtype=dtype, params=sw)
            # The buffered C^T store's ragged last vector: N = 1003 of rows of 1008 (swapped, C^T's
            # columns are 1003 long), and a column-major C unswapped, its columns 264 and 258 long.
            report(f"wgmma {dtype} swap_ab staged C^T 128x136 N ragged 258x1003x520", run_case_strided_c, url=url, workdir=work,
                   dtype=dtype, M=258, N=1003, K=520, params=sw, ld=1008)
            for m_ in (264, 258):
                report(f"wgmma {dtype} staged C^T column-major C 128x128 {m_}x1000x520", run_case_strided_c, url=url, workdir=work,
                       dtype=dtype, M=m_, N=1000, K=520, params=dict(sw, block_n=128, swap_ab=0), ld=264, col_major=True)
        # gemv (decode, M <= 8): B's rows read in aligned 16-byte chunks whatever their length,
        # so each row's phase differs (N odd: all 8 phases), K in parts as a cluster's blocks
        # summed through distributed shared memory: N odd and even, the last block's columns past
        # N, K not a multiple of the 32 rows a block reads at once and parts left empty (K = 40 in
        # 8 parts of 32), M of 1 to 8, an epilogue over N, block_n 8 to 248, B starting 2 bytes
        # past 16 (its first and last chunks partly outside it), A with a stride of its own.
        gv = {"block_n": 56, "warps": 8, "stages": 8, "split_k": 1, "mma": "gemv"}
        for dtype in ("float16", "bfloat16"):
            for m_, n_, k_, extra_params in ((1, 1025, 2752, {"split_k": 8}), (1, 1024, 2752, {"split_k": 4}), (3, 5121, 1000, {"block_n": 120}),
                                             (8, 333, 40, {"split_k": 8, "stages": 4}), (2, 4097, 777, {"block_n": 248, "stages": 4, "split_k": 3}),
                                             (5, 100, 300, {"block_n": 8, "warps": 16, "stages": 2}), (1, 22017, 1000, {"block_n": 24, "split_k": 2}),
                                             (1, 1025, 2752, {"block_n": 24, "split_k": 7, "stages": 3})):
                report(f"gemv {dtype} {extra_params} {m_}x{n_}x{k_}", run_case, url=url, workdir=work, dtype=dtype, M=m_, N=n_, K=k_,
                       ta=False, tb=False, arch="sm_90a", params=dict(gv, **extra_params))
            report(f"gemv {dtype} split_k 4 bias+gelu 1x1025x2752", run_case, url=url, workdir=work, dtype=dtype, M=1, N=1025, K=2752,
                   ta=False, tb=False, ops=chain_sw[:2], arch="sm_90a", params=dict(gv, split_k=4),
                   extra=[("bias", torch.randn(1025, device="cuda", dtype=torch.float32))])
            report(f"gemv {dtype} misaligned B, strided A", run_case_gemv_views, url=url, workdir=work, dtype=dtype, params=dict(gv, split_k=3))
        # Clusters on a ragged M's rows of tiles, B read once and multicast to all, and 2-D
        # clusters (cluster_m x cluster_n neighbouring tiles), A multicast along a cluster's
        # rows as B is along its columns: every layout (a K-major B's share is block_n /
        # cluster_m rows, a K-major A's block_m / cluster_n, rounded up to 8-row atoms where they
        # do not divide, the last share overlapping the one before: 128 rows in three shares of
        # 48, at rows 0, 48 and 80; 64 in three of 24), the last cluster's tiles past M
        # (257 rows: 128 + 128 + 1) and past N (1032 columns: 9 tiles of 128 in 5 pairs),
        # 64-column panels fewer than the blocks (128 columns in clusters of three: one block
        # loads no B; an M-major A of one 64-row panel in clusters four wide: three blocks of a
        # row load no A), split-K, an epilogue, swapped (B^T's blocks share A^T and A^T's B^T)
        # and a kernel taking M at run time (one cluster row or several).
        clustered = [  # label, M (a column-major A's: a multiple of 8), N, K, params
            ("cluster_m 3 128x192 split_k 2", 257, 4104, 1000, {"cluster_m": 3, "block_m": 128, "block_n": 192, "warps": 12, "stages": 5, "split_k": 2}),
            ("cluster_m 4 64x256", 200, 1000, 520, {"cluster_m": 4, "block_m": 64, "block_n": 256, "warps": 8, "stages": 5}),
            ("cluster 2x2 128x128", 257, 1032, 1000, {"cluster_m": 2, "cluster_n": 2, "block_m": 128, "block_n": 128, "warps": 12, "stages": 6}),
            ("cluster 2x4 64x128", 200, 1032, 520, {"cluster_m": 2, "cluster_n": 4, "block_m": 64, "block_n": 128, "warps": 8, "stages": 8}),
            ("cluster 3x1 128x128", 257, 1032, 1000, {"cluster_m": 3, "block_m": 128, "block_n": 128, "warps": 12, "stages": 6}),
            ("cluster 1x3 64x128", 200, 1032, 520, {"cluster_n": 3, "block_m": 64, "block_n": 128, "warps": 8, "stages": 8})]
        for dtype in ("float16", "bfloat16"):
            for layout in range(4):
                ta, tb = bool(layout // 2), bool(layout % 2)
                for label, m0, n, k, p in clustered:
                    m = 264 if ta and m0 % 8 else m0
                    report(f"wgmma {dtype} {'NT'[ta]}{'NT'[tb]} {label} {m}x{n}x{k}", run_case, url=url, workdir=work,
                           dtype=dtype, M=m, N=n, K=k, ta=ta, tb=tb, arch="sm_90a", params={**c2, **p})
            for label, n, p in (("cluster_m 3 128x128", 4096, {"cluster_m": 3, "block_m": 128, "block_n": 128, "warps": 12, "stages": 6}),
                                ("cluster 1x2 128x256", 1032, {"cluster_n": 2, "block_m": 128, "block_n": 256, "warps": 12, "stages": 4})):
                report(f"wgmma {dtype} NN {label} 257x{n}x{n} add+gelu", run_case, url=url, workdir=work, dtype=dtype,
                       M=257, N=n, K=n, ta=False, tb=False, ops=gelu_bias, arch="sm_90a",
                       extra=[("bias", torch.randn(n, device="cuda", dtype=torch.float32))], params={**c2, **p})
            report(f"wgmma {dtype} NN cluster 2x2 128x128 split_k 3 257x1032x1000", run_case, url=url, workdir=work, dtype=dtype,
                   M=257, N=1032, K=1000, ta=False, tb=False, arch="sm_90a",
                   params={**c2, "cluster_m": 2, "cluster_n": 2, "block_m": 128, "block_n": 128, "warps": 12, "stages": 6, "split_k": 3})
            report(f"wgmma {dtype} swap_ab 128x144 cluster 2x2 258x2000x520", run_case, url=url, workdir=work, dtype=dtype, M=258,
                   N=2000, K=520, ta=False, tb=False, arch="sm_90a",
                   params=dict(sw, block_n=144, stages=5, cluster_m=2, cluster_n=2))
            # A^T's K-major rows in shares that are no multiple of 8: 88 in two (0-47, 40-87),
            # 72 in four of 24 (the last two the same rows).
            for label, m_, n, p in (("128x88 cluster 2x1", 961, 1536, dict(block_n=88, stages=7, cluster_m=2)),
                                    ("128x72 cluster 4x2", 1000, 1000, dict(block_n=72, stages=7, cluster_m=4, cluster_n=2))):
                report(f"wgmma {dtype} swap_ab {label} {m_}x{n}x1000", run_case, url=url, workdir=work, dtype=dtype, M=m_,
                       N=n, K=1000, ta=False, tb=False, arch="sm_90a", params=dict(sw, **p))
        for label, n, p in (("cluster_m 3 128x192", 4104, {"cluster_m": 3, "block_m": 128, "block_n": 192, "warps": 12, "stages": 5}),
                            ("cluster 2x2 128x128", 1032, {"cluster_m": 2, "cluster_n": 2, "block_m": 128, "block_n": 128, "warps": 12, "stages": 6})):
            report(f"wgmma float16 runtime M {label}", run_case_runtime_m, url=url, workdir=work, dtype="float16", params={**c2, **p},
                   M0=257, Ms=[1, 129, 257, 385, 2049], N=n, K=1000, ops=chain_ts)
        # 192-row tiles: three consumer warpgroups of 64 rows (16 warps), every layout, the last
        # tile row past M, an epilogue, a cut tail, split-K, a cluster (a K-major B's share of
        # 128 / 2 rows), swapped (192 rows of N by 176 of M: 513 rows in three tiles) and M at
        # run time.
        t3 = {"block_m": 192, "block_n": 192, "block_k": 64, "warps": 16, "stages": 4, "split_k": 1, "cluster_m": 1, "mma": "wgmma"}
        gelu_t = [{"op": "add", "input": 2}, {"op": "gelu", "approximate": "tanh"}]
        for dtype in ("float16", "bfloat16"):
            for layout in range(4):
                ta, tb = bool(layout // 2), bool(layout % 2)
                report(f"wgmma {dtype} {'NT'[ta]}{'NT'[tb]} 192-row 192x192 520x392x200", run_case, url=url, workdir=work, dtype=dtype,
                       M=520, N=392, K=200, ta=ta, tb=tb, arch="sm_90a", params=t3)
            report(f"wgmma {dtype} 192-row 192x192 tail_split add+gelu 3073x3072x1000", run_case, url=url, workdir=work, dtype=dtype,
                   M=3073, N=3072, K=1000, ta=False, tb=False, ops=gelu_t, arch="sm_90a",
                   extra=[("bias", torch.randn(3072, device="cuda", dtype=torch.float32))], params=dict(t3, tail_split=1))
            report(f"wgmma {dtype} NT 192-row 192x128 split_k 2 cluster_m 2 600x1000x520", run_case, url=url, workdir=work,
                   dtype=dtype, M=600, N=1000, K=520, ta=False, tb=True, arch="sm_90a", params=dict(t3, block_n=128, split_k=2, cluster_m=2))
            report(f"wgmma {dtype} 192-row swap_ab 192x176 add+gelu 513x7736x2560", run_case, url=url, workdir=work, dtype=dtype,
                   M=513, N=7736, K=2560, ta=False, tb=False, ops=gelu_t, arch="sm_90a",
                   extra=[("bias", torch.randn(7736, device="cuda", dtype=torch.float32))], params=dict(t3, block_n=176, swap_ab=1))
            # The search's one-wave tiles: few rows in 192-row tiles of N (2 rows in 8: four
            # accumulators a thread), and 256x96 swapped over a ragged M.
            report(f"wgmma {dtype} 192-row swap_ab 192x8 ring 8 add+gelu 2x13000x1000", run_case, url=url, workdir=work, dtype=dtype,
                   M=2, N=13000, K=1000, ta=False, tb=False, ops=gelu_t, arch="sm_90a",
                   extra=[("bias", torch.randn(13000, device="cuda", dtype=torch.float32))], params=dict(t3, block_n=8, stages=8, swap_ab=1))
            report(f"wgmma {dtype} swap_ab 256x96 add+gelu 283x4000x1000", run_case, url=url, workdir=work, dtype=dtype,
                   M=283, N=4000, K=1000, ta=False, tb=False, ops=gelu_t, arch="sm_90a", extra=[("bias", torch.randn(4000, device="cuda", dtype=torch.float32))],
                   params=dict(t3, block_m=256, block_n=96, warps=12, swap_ab=1))
            # B's rows off 128 bytes, where the search pairs 192x192 tiles (one B read for both):
            # N = 2600, 7 tile rows (the last pair's second past M); bf16 with a K-major B (K = 1000: its rows off too).
            kb = dtype == "bfloat16"
            report(f"wgmma {dtype} N{'NT'[kb]} 192-row 192x192 cluster_m 2 B rows off 128 bytes 1212x2600x1000", run_case, url=url,
                   workdir=work, dtype=dtype, M=1212, N=2600, K=1000, ta=False, tb=kb, arch="sm_90a", params=dict(t3, cluster_m=2))
        report("wgmma bfloat16 192-row runtime M 192x192", run_case_runtime_m, url=url, workdir=work, dtype="bfloat16", params=t3,
               M0=577, Ms=[1, 192, 193, 2049], N=392, K=800, ops=[{"op": "add", "input": 2}, {"op": "gelu"}, {"op": "mul", "input": 3}])
        # pingpong: the two consumer warpgroups take whole tiles in turns (every other unit of a
        # block), so every case has more units than blocks (2 to 4 a block, odd counts too: the
        # first warpgroup then runs one more): every layout, a ragged M and N, an epilogue, C
        # stored as pairs from registers (N = 1003), swapped (the staged C^T), split-K, a cut
        # tail (units of different lengths), clusters, a batch and M at run time.
        pp = {"block_m": 128, "block_n": 128, "block_k": 64, "warps": 12, "stages": 6, "split_k": 1, "cluster_m": 1, "mma": "wgmma", "pingpong": 1}
        for dtype in ("float16", "bfloat16"):
            for layout in range(4):
                ta, tb = bool(layout // 2), bool(layout % 2)
                m = 2056 if ta else 2049
                report(f"wgmma {dtype} {'NT'[ta]}{'NT'[tb]} pingpong 128x128 {m}x2056x520", run_case, url=url, workdir=work, dtype=dtype,
                       M=m, N=2056, K=520, ta=ta, tb=tb, arch="sm_90a", params=pp)
            report(f"wgmma {dtype} pingpong 64x128 add+gelu 1000x3000x1000", run_case, url=url, workdir=work, dtype=dtype,
                   M=1000, N=3000, K=1000, ta=False, tb=False, ops=gelu_t, arch="sm_90a",
                   extra=[("bias", torch.randn(3000, device="cuda", dtype=torch.float32))], params=dict(pp, block_m=64, stages=8))
            report(f"wgmma {dtype} pingpong 128x128 pairs from registers 2049x1003x520", run_case, url=url, workdir=work, dtype=dtype,
                   M=2049, N=1003, K=520, ta=False, tb=False, arch="sm_90a", params=pp)
            report(f"wgmma {dtype} pingpong swap_ab 128x168 add+gelu 2349x3584x1024", run_case, url=url, workdir=work, dtype=dtype,
                   M=2349, N=3584, K=1024, ta=False, tb=False, ops=gelu_t, arch="sm_90a",
                   extra=[("bias", torch.randn(3584, device="cuda", dtype=torch.float32))], params=dict(pp, block_n=168, stages=5, swap_ab=1))
            report(f"wgmma {dtype} pingpong swap_ab 64x72 140x3072x3072", run_case, url=url, workdir=work, dtype=dtype,
                   M=140, N=3072, K=3072, ta=False, tb=False, arch="sm_90a", params=dict(pp, block_m=64, block_n=72, stages=12, swap_ab=1))
            report(f"wgmma {dtype} pingpong split_k 2 1000x2056x1000", run_case, url=url, workdir=work, dtype=dtype,
                   M=1000, N=2056, K=1000, ta=False, tb=False, arch="sm_90a", params=dict(pp, split_k=2))
            report(f"wgmma {dtype} pingpong tail_split add+gelu 4647x2048x1000", run_case, url=url, workdir=work, dtype=dtype,
                   M=4647, N=2048, K=1000, ta=False, tb=False, ops=gelu_t, arch="sm_90a",
                   extra=[("bias", torch.randn(2048, device="cuda", dtype=torch.float32))], params=dict(pp, tail_split=1))
            report(f"wgmma {dtype} pingpong swap_ab 128x72 cluster 2x2 2000x2000x1000", run_case, url=url, workdir=work, dtype=dtype,
                   M=2000, N=2000, K=1000, ta=False, tb=False, arch="sm_90a",
                   params=dict(pp, block_n=72, stages=8, swap_ab=1, cluster_m=2, cluster_n=2))
            report(f"wgmma {dtype} TN pingpong cluster_m 2 128x128 2056x2056x520", run_case, url=url, workdir=work, dtype=dtype,
                   M=2056, N=2056, K=520, ta=True, tb=False, arch="sm_90a", params=dict(pp, cluster_m=2))
            report(f"wgmma {dtype} pingpong batched 5x 600x1000x520", run_case, url=url, workdir=work, dtype=dtype,
                   M=600, N=1000, K=520, ta=False, tb=False, batch=5, arch="sm_90a", params=pp)
        report("wgmma float16 pingpong runtime M 128x128", run_case_runtime_m, url=url, workdir=work, dtype="float16", params=pp,
               M0=2049, Ms=[1, 129, 2049, 4097, 300], N=2056, K=520, ops=chain_ts)
        # M as an argument: one kernel for every M (ragged, smaller and larger than the one it
        # was built for), with split-K (whose workspace grows with M), clusters (an odd number
        # of tile rows) and an epilogue with an [M, N] input.
        chain = [{"op": "add", "input": 2}, {"op": "gelu"}, {"op": "mul", "input": 3}]
        for dtype, params, M0, Ms in (
                ("float16", wide, 4096, [1, 17, 130, 520, 1000]),
                ("bfloat16", {"block_m": 128, "block_n": 128, "block_k": 64, "warps": 12, "stages": 6, "mma": "wgmma"}, 256, [1, 64, 255, 1031]),
                ("float16", {**c2, "block_m": 64, "block_n": 128, "warps": 8, "stages": 8, "split_k": 3, "cluster_m": 1}, 16, [1, 16, 65, 300])):
            report(f"wgmma {dtype} runtime M {params['block_m']}x{params['block_n']} c{params.get('cluster_m', 1)} "
                   f"s{params.get('split_k', 1)}", run_case_runtime_m, url=url, workdir=work, dtype=dtype, params=params,
                   M0=M0, Ms=Ms, N=392, K=800, ops=chain)
        report("wgmma sm_90a SASS has HGMMA", sass_has_hgmma, url=url, workdir=work)
        for dtype, arch in (("float16", "sm_90a"), ("bfloat16", "sm_90a"), ("float32", "sm_90"), ("float16", "sm_90")):
            for form in ("erf", "tanh"):
                report(f"{'wgmma ' if arch == 'sm_90a' else ''}{dtype} {arch} gelu{' tanh' if form == 'tanh' else ''} accuracy",
                       gelu_accuracy, url=url, workdir=work, dtype=dtype, arch=arch, form=form)
        # The wgmma kernel's pairs of outputs: columns (x beside -x) and, swapped, rows (x beside the next x).
        for label, p in (("128x64", {"block_m": 128, "block_n": 64, "block_k": 64, "warps": 12, "stages": 4, "mma": "wgmma"}),
                         ("swapped 64x64", {"block_m": 64, "block_n": 64, "block_k": 64, "warps": 8, "stages": 4, "mma": "wgmma", "swap_ab": 1})):
            report(f"wgmma float16 sm_90a gelu tanh accuracy, {label}", gelu_accuracy, url=url, workdir=work, dtype="float16", arch="sm_90a",
                   form="tanh", params=p)
        report("wgmma cluster 1x2 past N 1000x384x1000 bias+gelu*res reads nothing past its inputs (memcheck)", cluster_phantom_column,
               url=url, workdir=work)
        report("wgmma vendor time fuses cuBLASLt's bias+gelu", vendor_fuses_epilogue, url=url, workdir=work)
        if args.only_wgmma:
            cases[:] = [c for c in cases if c[0].startswith(("wgmma", "gemv"))]
        if args.match:
            cases[:] = [c for c in cases if any(m in c[0] for m in args.match.split(","))]

        # The cases compile concurrently (the service runs one nvcc per request thread).
        with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
            list(pool.map(lambda c: run_one(*c), cases))

        if args.bench:
            print("# bench: min/median ms over an L2-flushed loop; TFLOP/s from the median", flush=True)
            for dtype, (M, N, K) in (("float16", (4096, 4096, 4096)), ("bfloat16", (4096, 4096, 4096)),
                                     ("float16", (8192, 128, 8192)), ("bfloat16", (8192, 128, 8192))):
                A = torch.randn(M, K, device="cuda", dtype=DT[dtype])
                B = torch.randn(K, N, device="cuda", dtype=DT[dtype])
                C = torch.empty(M, N, device="cuda", dtype=DT[dtype])
                flops = 2 * M * N * K
                vmin, vmed = bench(lambda: torch.matmul(A, B, out=C))
                print(f"cublas   {dtype} {M}x{N}x{K}: min {vmin:.3f} med {vmed:.3f} ms  {flops / vmed / 1e9:.1f} TFLOP/s", flush=True)
                tmpl = json.load(urllib.request.urlopen(url + "/templates/gemm"))
                choices = tmpl["backends"]["cuda"]["default_choices"]

                def build(choice):
                    body = {"backend": "cuda", "arch": "sm_90", "template": "gemm", "params": choice,
                            "inputs": [meta("A", A), meta("B", B)], "output": meta("C", C)}
                    try:
                        return Kernel(url, body, work)
                    except RuntimeError as e:
                        return e
                with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
                    kernels = list(pool.map(build, choices))
                for choice, k in zip(choices, kernels):
                    if isinstance(k, Exception):
                        print(f"kforge   {dtype} {choice}: {str(k)[:200]}", flush=True)
                        continue
                    names = {"A": A, "B": B, "C": C}
                    kmin, kmed = bench(lambda: k(names))
                    print(f"kforge   {dtype} {M}x{N}x{K} {choice}: min {kmin:.3f} med {kmed:.3f} ms  "
                          f"{flops / kmed / 1e9:.1f} TFLOP/s  vs_cublas {vmed / kmed:.2f}", flush=True)
    finally:
        proc.terminate()
        proc.wait()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--phantom-child":  # cluster_phantom_column's child: the call alone
        sys.exit(0 if phantom_case(sys.argv[2], sys.argv[3])[0] else 1)
    sys.exit(main())
