"""A kernel call checks every tensor against the ABI before it runs (issue 40, item 1).

A 64x64 gemm called with 8x8 arrays used to read and write out of bounds (garbage, then a
segfault); now the client's call and the server's generated wrapper both refuse it with a
ValueError naming the argument: dtype, device, sizes, element strides, a storage offset.
The wrapper takes numpy arrays as well as torch tensors. torch is not installed here:
``TorchLike`` stands in for a tensor with exactly the attributes a call reads.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

import kforge
from kforge.abi import Arg, View, check_tensor
from support import DOUBLE_SOURCE, run_python

N = 64


def tensor(name: str, sizes=(N, N), strides=(N, 1), offset: int = 0) -> Dict[str, Any]:
    return {"name": name, "dtype": "float32", "sizes": list(sizes), "strides": list(strides),
            "offset": offset}


GEMM: Dict[str, Any] = dict(backend="cpu", template="gemm", inputs=[tensor("a"), tensor("b")],
                            output=tensor("c"))


class TorchLike:
    """What a kernel call reads of a torch tensor, over a numpy array: ``data_ptr()``,
    ``stride()`` in elements, ``shape``, ``dtype`` (``torch.float32``), ``device.type``,
    ``is_contiguous()``, ``numel()``, ``element_size()``."""

    class _Device:
        def __init__(self, kind: str) -> None:
            self.type = kind

        def __str__(self) -> str:
            return self.type

    def __init__(self, array: np.ndarray, device: str = "cpu") -> None:
        self.array = array
        self.shape = array.shape
        self.dtype = f"torch.{array.dtype}"
        self.device = self._Device(device)

    def data_ptr(self) -> int:
        return int(self.array.ctypes.data)

    def stride(self):
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def is_contiguous(self) -> bool:
        return bool(self.array.flags.c_contiguous)

    def numel(self) -> int:
        return int(self.array.size)

    def element_size(self) -> int:
        return int(self.array.itemsize)


def operands(rng_seed: int = 0):
    rng = np.random.default_rng(rng_seed)
    a = rng.standard_normal((N, N), dtype=np.float32)
    b = rng.standard_normal((N, N), dtype=np.float32)
    return a, b, np.zeros((N, N), dtype=np.float32)


def test_the_reported_crash_is_a_value_error(server, tmp_path: Path) -> None:
    # The case, in its own interpreter: without the check it dies with SIGSEGV.
    code = f"""
import numpy as np, kforge
k = kforge.Client({server.url!r}, cache_dir={str(tmp_path / 'c')!r}).compile(**{GEMM!r})
small = [np.ones((8, 8), np.float32) for _ in range(3)]
try:
    k(*small)
except ValueError as e:
    print("refused:", e)
"""
    r = run_python(code, env={})
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "refused: cpu_gemm_" in r.stdout and "argument a has shape [8, 8]" in r.stdout, r.stdout
    assert "built for [64, 64]" in r.stdout


@pytest.mark.parametrize("case, make, message", [
    ("shape", lambda a, b, c: (a[:8, :8], b, c), r"argument a has shape \[8, 8\]; the kernel was built for \[64, 64\]"),
    ("output shape", lambda a, b, c: (a, b, c[:, :32]), r"argument c has shape \[64, 32\]"),
    ("strides", lambda a, b, c: (a, b.T, c), r"argument b has strides \[1, 64\]; the kernel was built for \[64, 1\]"),
    ("dtype", lambda a, b, c: (a.astype(np.float64), b, c), r"argument a is float64; the kernel takes float32"),
    ("read-only output", lambda a, b, c: (a, b, np.broadcast_to(c, c.shape)), r"argument c: the kernel writes it"),
    ("device", lambda a, b, c: (TorchLike(a, "cuda"), b, c), r"argument a is on cuda; the kernel takes tensors on cpu"),
])
def test_the_call_checks_each_tensor(client: kforge.Client, case: str, make, message: str) -> None:
    k = client.compile(**GEMM)
    a, b, c = operands()
    with pytest.raises(ValueError, match=message):
        k(*make(a, b, c))
    assert not c.any(), f"{case}: the kernel ran"


def test_numpy_and_torch_tensors_both_run(client: kforge.Client) -> None:
    k = client.compile(**GEMM)
    a, b, c = operands(1)
    k(TorchLike(a), TorchLike(b), TorchLike(c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    # A size-1 dimension's stride says nothing: a [64, 1] column takes any stride there.
    column = client.compile(backend="cpu", template="gemm", inputs=[tensor("a"), tensor("b", (N, 1), (1, 1))],
                            output=tensor("c", (N, 1), (1, 1)))
    bcol = np.ascontiguousarray(b[:, :1])
    out = np.zeros((N, 1), np.float32)
    column(a, bcol, out)
    np.testing.assert_allclose(out, a @ bcol, rtol=1e-4, atol=1e-4)


def test_a_storage_offset_takes_the_whole_storage(client: kforge.Client) -> None:
    k = client.compile(backend="cpu", template="gemm", inputs=[tensor("a", offset=N), tensor("b")],
                       output=tensor("c"))
    a, b, c = operands(2)
    storage = np.concatenate([np.full(N, 99, np.float32), a.ravel()])
    k(storage, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"argument a: .* from element 64 on; pass its whole storage "
                                         r"\(a contiguous buffer of at least 4160 elements\)"):
        k(a, b, c)
    with pytest.raises(ValueError, match="at least 4160 elements"):
        k(storage[:-1], b, c)


def test_source_mode_checks_dtype_and_density(client: kforge.Client) -> None:
    k = client.compile(DOUBLE_SOURCE, backend="cpu")
    x = np.arange(8, dtype=np.float32)
    y = np.zeros_like(x)
    k(TorchLike(x), TorchLike(y), 8)
    np.testing.assert_array_equal(y, 2 * x)
    with pytest.raises(ValueError, match="argument y is not contiguous"):
        k(x, TorchLike(np.zeros(16, np.float32)[::2]), 8)
    with pytest.raises(ValueError, match="argument x is int32"):
        k(TorchLike(np.arange(8, dtype=np.int32)), y, 8)


def test_a_size_named_by_a_scalar_is_read_from_the_call() -> None:
    # A cuda gemm that takes M at run time names it in its layouts (gemm_test.cpp checks the
    # server's side); the check reads M from the call's own scalars.
    arg = Arg(name="in_ptr0", kind="tensor", ctype="const half*", binds="A", dtype="float16",
              const=True, sizes=("M", 4096), strides=(4096, 1))

    def view(rows: int) -> View:
        return View(address=1, dtype="float16", device="cuda", shape=(rows, 4096),
                    strides=(4096, 1), contiguous=True, readonly=False, nbytes=rows * 4096 * 2)

    check_tensor("A", arg, view(100), "cuda", {"M": 100})
    with pytest.raises(ValueError, match=r"A has shape \[100, 4096\]; the kernel was built for \[99, 4096\]"):
        check_tensor("A", arg, view(100), "cuda", {"M": 99})
    with pytest.raises(TypeError, match="scalar argument M, which is missing"):
        check_tensor("A", arg, view(100), "cuda", {})


def load_wrapper(k: kforge.Kernel, where: Path):
    """The server's wrapper saved as ``kforge submit`` saves it, beside the artifact."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy(k.path(), where / f"{k.name}.so")
    path = where / f"{k.name}_wrapper.py"
    path.write_text(k.wrapper)
    spec = importlib.util.spec_from_file_location(f"{k.name}_wrapper", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_wrapper_checks_and_takes_numpy_and_torch(client: kforge.Client,
                                                                 tmp_path: Path) -> None:
    k = client.compile(**GEMM)
    w = load_wrapper(k, tmp_path)
    call = getattr(w, k.name)
    a, b, c = operands(3)
    call(a, b, c)  # numpy arrays: no .data_ptr()
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    c[:] = 0
    call(TorchLike(a), TorchLike(b), TorchLike(c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    c[:] = 0
    for bad, message in [
        ((a[:8, :8], b, c), r"argument a has shape \[8, 8\]; the kernel was built for \[64, 64\]"),
        ((a, b.T, c), r"argument b has strides \[1, 64\]"),
        ((a, b, c.astype(np.float16)), r"argument c is float16; the kernel takes float32"),
        ((a, b, np.broadcast_to(c, c.shape)), r"argument c: the kernel writes it"),
        ((TorchLike(a, "cuda"), b, c), r"argument a is on cuda; a cpu kernel takes tensors on cpu"),
    ]:
        with pytest.raises(ValueError, match=message):
            call(*bad)
    with pytest.raises(TypeError, match="expected a torch tensor or a numpy array, not list"):
        call(a.tolist(), b, c)
    assert not c.any(), "a refused call ran the kernel"

    source = client.compile(DOUBLE_SOURCE, backend="cpu")
    double = getattr(load_wrapper(source, tmp_path / "source"), source.name)
    x = np.arange(16, dtype=np.float32)
    y = np.zeros_like(x)
    double(x, y, 16)
    np.testing.assert_array_equal(y, 2 * x)
    with pytest.raises(ValueError, match="argument y is not contiguous"):
        double(x, np.zeros(32, np.float32)[::2], 16)
