#!/usr/bin/env python3
"""The Python call's and the generated wrapper's tensor checks with real torch CUDA tensors
(issue 40, item 1): a float16 gemm that takes M at run time is called through
kforge.Kernel and through its <name>_wrapper.py at two values of M, each result compared
with torch.matmul; then each wrong tensor (too few rows, a transposed view, float32, a CPU
tensor, a 64-row tensor for M = 128) must be a ValueError naming the argument, and the
output must stay untouched. CPU-side, clients/python/tests/test_call_checks.py covers the
same with numpy and a torch stand-in.

    python3 tests/gpu/call_checks.py --kforge build/bin/kforge
"""
import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
import kforge  # noqa: E402

N = K = 256


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kforge", required=True)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="kforge-call-checks-")
    os.chmod(root, 0o755)  # mkdtemp makes it 0700; as root, kforge compiles as the sandbox uid, which must reach the cache
    log = os.path.join(root, "server.log")
    proc = subprocess.Popen([args.kforge, "serve", "--port", "0", "--cache-dir", os.path.join(root, "cache")],
                            stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    line = proc.stdout.readline().split()
    if not line:  # it exited before saying where it listens
        proc.wait()
        print(f"{args.kforge} serve exited with {proc.returncode} before listening:\n{open(log).read()[-3000:]}")
        return 1
    url = line[-1]
    failures = []
    try:
        client = kforge.Client(url, cache_dir=os.path.join(root, "client"))
        t = lambda name, rows, cols: {"name": name, "dtype": "float16", "sizes": [rows, cols], "strides": [cols, 1]}
        k = client.compile(backend="cuda", arch="native", template="gemm",
                           inputs=[t("a", 512, K), t("b", K, N)], output=t("c", 512, N))
        sizes = {a.binds: a.sizes for a in k.abi.args if a.kind == "tensor"}
        print(f"{k.name}: layouts {sizes}")
        if sizes.get("a") != ("M", K):
            failures.append(f"A's layout {sizes.get('a')} does not name M: not a run-time-M kernel")
        where = os.path.join(root, "wrapper")
        os.makedirs(where)
        shutil.copy(k.path(), os.path.join(where, f"{k.name}.so"))
        path = os.path.join(where, f"{k.name}_wrapper.py")
        open(path, "w").write(k.wrapper)
        spec = importlib.util.spec_from_file_location("w", path)
        w = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(w)
        wrapped = getattr(w, k.name)

        for name, call in [("Kernel.__call__", lambda a, b, c, M: k(a, b, c, M)),
                           ("the wrapper", lambda a, b, c, M: wrapped(a, b, c, M,
                                                                     stream=torch.cuda.current_stream().cuda_stream))]:
            for M in (128, 300):
                a = torch.randn(M, K, device="cuda", dtype=torch.float16)
                b = torch.randn(K, N, device="cuda", dtype=torch.float16)
                c = torch.zeros(M, N, device="cuda", dtype=torch.float16)
                call(a, b, c, M)
                torch.cuda.synchronize()
                err = (c.float() - a.float() @ b.float()).abs().max().item()
                print(f"{name}: M={M} max abs err {err:.3g}")
                if not err < 0.5:
                    failures.append(f"{name}: M={M}: max abs err {err}")
            M = 128
            a = torch.randn(M, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            c = torch.zeros(M, N, device="cuda", dtype=torch.float16)
            for what, bad, arg in [("too few rows", (a[:64], b, c, M), "argument a"),
                                   ("a transposed view", (a, b.t().contiguous().t(), c, M), "argument b"),
                                   ("float32", (a.float(), b, c, M), "argument a"),
                                   ("a CPU tensor", (a, b, c.cpu(), M), "argument c"),
                                   ("M says 64", (a, b, c, 64), "argument a")]:
                try:
                    call(*bad)
                    failures.append(f"{name}: {what}: the call ran")
                except ValueError as e:
                    ok = arg in str(e)
                    print(f"{name}: {what}: {'refused' if ok else 'WRONG ARGUMENT NAMED'}: {e}")
                    if not ok:
                        failures.append(f"{name}: {what}: {e}")
            torch.cuda.synchronize()
            if c.abs().sum().item() != 0:
                failures.append(f"{name}: a refused call wrote the output")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print(f"FAIL {f}")
    print(f"call_checks: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
