"""A kforge gemm kernel called from Python on torch tensors: the part bench/ncu_gemm.py and
bench/gemm_ab.py share.

`Service` starts a kforge service (like bench/cuda_suite.py); `build` asks it for one gemm
(`POST /kernels`), downloads the .so and returns a callable that runs the kernel on the given
tensors on torch's current stream.
"""
import ctypes
import json
import os
import subprocess
import tempfile
import urllib.request

import torch


class Service:
    """`kforge serve` on a free port with its cache in a new directory, for a `with` block."""

    def __init__(self, kforge):
        self.work = tempfile.mkdtemp(prefix="kforge-bench-")
        os.chmod(self.work, 0o755)  # the sandbox uid must reach the cache
        self.proc = subprocess.Popen([kforge, "serve", "--port", "0", "--cache-dir", os.path.join(self.work, "cache")],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().split()
        if not line:  # it exited before saying where it listens
            self.proc.wait()
            raise RuntimeError(f"{kforge} serve exited with {self.proc.returncode} before listening")
        self.url = line[-1]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()


# The epilogues a bench asks for by name: bias over N, then gelu in its erf or tanh form.
EPILOGUES = {"none": [], "bias_gelu": [{"op": "add", "input": 2}, {"op": "gelu"}],
             "bias_gelu_tanh": [{"op": "add", "input": 2}, {"op": "gelu", "approximate": "tanh"}]}


def gemm_body(m, n, k, dtype, epilogue="none", params=None, options=None):
    """The template request for C[m, n] = A[m, k] B[k, n], with the epilogue EPILOGUES names."""
    body = {"backend": "cuda", "arch": "native", "template": "gemm",
            "inputs": [{"name": "A", "dtype": dtype, "sizes": [m, k]}, {"name": "B", "dtype": dtype, "sizes": [k, n]}],
            "output": {"name": "C", "dtype": dtype, "sizes": [m, n]}}
    if epilogue != "none":
        body["inputs"].append({"name": "bias", "dtype": dtype, "sizes": [n]})
        body["epilogue"] = EPILOGUES[epilogue]
    if params:
        body["params"] = params
    if options:
        body["options"] = options
    return body


def build(service, body, tensors, m):
    """Compiles `body` through `service` and binds the kernel to `tensors` (by the ABI's names,
    M = m where the kernel takes M as an argument). Returns (response, call)."""
    req = urllib.request.Request(service.url + "/kernels", json.dumps(body).encode(), {"Content-Type": "application/json"})
    j = json.load(urllib.request.urlopen(req, timeout=600))
    path = os.path.join(service.work, j["kernel_name"] + ".so")
    with open(path, "wb") as f:
        f.write(urllib.request.urlopen(service.url + j["artifact"]["url"]).read())
    fn = getattr(ctypes.CDLL(path), j["kernel_name"])

    def call_args(ws, ws_size=None):  # M is an argument where the kernel takes any M (no "value")
        argv = []
        for a in j["abi"]["args"]:
            if a["kind"] == "tensor": argv.append(ctypes.c_void_p(tensors[a["binds"]].data_ptr()))
            elif a["kind"] == "scalar": argv.append(ctypes.c_int64(a.get("value", m)))
            elif a["kind"] == "workspace": argv.append(ctypes.c_void_p(ws.data_ptr()) if ws is not None else None)
            elif a["kind"] == "workspace_size": argv.append(ws_size)
            else: argv.append(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        return argv
    size = ctypes.c_size_t(0)
    assert fn(*call_args(None, ctypes.byref(size))) == 0
    ws = torch.empty(max(1, size.value), device="cuda", dtype=torch.uint8)
    argv = call_args(ws)

    def call():
        rc = fn(*argv)
        assert rc == 0, f"{j['kernel_name']} returned {rc}"
    return j, call
