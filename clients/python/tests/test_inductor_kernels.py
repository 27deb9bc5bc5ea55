"""kforge's gemm as a choice of Inductor's matmul autotuning (``install(kernels=True)``), without
torch: :mod:`kforge.gemm` driven through stand-ins of what it touches in Inductor.

The stand-ins keep the protocol :class:`kforge.gemm.Integration` uses, read from torch 2.11's
``torch/_inductor/kernel/mm.py`` and ``select_algorithm.py``: IR nodes answer ``get_size()``,
``get_stride()``, ``get_dtype()``; the output layout has ``size``, ``stride``, ``dtype``,
``device``; ATen's addmm choice carries ``kwargs`` with ``alpha`` and ``beta``; an
``ExternKernelChoice`` is ``bind(input_nodes, layout, **kwargs)``. At run time the generated
code passes tensors (``data_ptr()``, ``stride()``, ``shape``) and ``out=``; the kernel function
is a ctypes callback with the kernel's real ABI, so the call goes through ctypes as a loaded
``.so`` would. The kernels themselves are compiled by nvcc on a real ``kforge serve`` (nothing
runs here: the GPU host runs ``bench/inductor_kernels.py``).
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import kforge
from kforge import gemm
from kforge.gemm import Integration, Launch, Operand, Unsupported, problem
from support import Server

F16, BF16 = "float16", "bfloat16"


def row(rows: int, cols: int, dtype: str = F16) -> Operand:
    return Operand((rows, cols), (cols, 1), dtype)


def col(rows: int, cols: int, dtype: str = F16) -> Operand:
    """A .t() view: [rows, cols] with unit stride down the rows."""
    return Operand((rows, cols), (1, rows), dtype)


# --- the request ------------------------------------------------------------------------


def test_mm_maps_to_a_template_request_with_inductors_strides():
    p = problem("mm", [row(128, 64), col(64, 256)], row(128, 256), arch="sm_90a")
    assert p.request() == {
        "backend": "cuda", "arch": "sm_90a", "template": "gemm",
        "inputs": [{"name": "A", "dtype": F16, "sizes": [128, 64], "strides": [64, 1]},
                   {"name": "B", "dtype": F16, "sizes": [64, 256], "strides": [1, 64]}],
        "output": {"name": "C", "dtype": F16, "sizes": [128, 256], "strides": [256, 1]}}
    assert p.signature == "64,1|1,64|256,1"


def test_addmm_takes_inductors_expanded_bias_as_a_vector_and_a_full_bias_as_it_is():
    # tuned_addmm's inp_expanded: the [N] bias seen as [M, N] with strides (0, 1).
    p = problem("addmm", [Operand((128, 256), (0, 1), BF16), col(128, 64, BF16), row(64, 256, BF16)],
                row(128, 256, BF16), arch="sm_80")
    req = p.request()
    assert req["inputs"][2] == {"name": "bias", "dtype": BF16, "sizes": [256], "strides": [1]}
    assert req["inputs"][0]["strides"] == [1, 128]  # A transposed
    assert req["epilogue"] == [{"op": "add", "input": 2}]
    assert p.signature == "0,1|1,128|256,1|256,1"  # Inductor's arguments, not the request's
    full = problem("addmm", [row(128, 256, BF16), row(128, 64, BF16), row(64, 256, BF16)], row(128, 256, BF16),
                   arch="sm_80")
    assert full.request()["inputs"][2]["sizes"] == [128, 256]


@pytest.mark.parametrize("act, op", [("relu", {"op": "relu"}), ("gelu", {"op": "gelu"}),
                                     ("gelu_tanh", {"op": "gelu", "approximate": "tanh"}), ("silu", {"op": "silu"})])
def test_the_fused_form_puts_the_activation_after_the_bias(act, op):
    p = problem("addmm_act", [Operand((256,), (1,), F16), row(16, 64), row(64, 256)], row(16, 256),
                arch="sm_90a", act=act)
    assert p.request()["epilogue"] == [{"op": "add", "input": 2}, op]
    assert p.request()["inputs"][2]["sizes"] == [256]


def test_bmm_keeps_the_batch_and_its_strides():
    a = Operand((8, 128, 64), (128 * 64, 64, 1), F16)
    b = Operand((8, 64, 32), (64 * 32, 1, 64), F16)  # each batch transposed
    req = problem("bmm", [a, b], Operand((8, 128, 32), (128 * 32, 32, 1), F16), arch="sm_90a").request()
    assert req["inputs"][1]["strides"] == [2048, 1, 64] and req["output"]["sizes"] == [8, 128, 32]


def test_the_arch_follows_the_device():
    assert gemm.arch_for((9, 0)) == "sm_90a"  # the wgmma kernel needs Hopper's arch-specific target
    assert gemm.arch_for((8, 0)) == "sm_80" and gemm.arch_for((8, 9)) == "sm_89"
    assert gemm.arch_for((12, 0)) == "sm_120"
    with pytest.raises(Unsupported, match="sm_80 or newer"):
        gemm.arch_for((7, 5))


# --- what kforge refuses ------------------------------------------------------------------


class Symbol:
    """A sympy Symbol as far as static_ints sees one: no int() of it."""

    free_symbols = {"s0"}

    def __int__(self) -> int:
        raise TypeError("cannot determine truth value of Relational")


@pytest.mark.parametrize("form, args, out, kw, reason", [
    ("mm", [row(64, 64, "float32"), row(64, 64, "float32")], row(64, 64, "float32"), {}, "dtype"),
    ("mm", [row(64, 64, "int8"), row(64, 64, "int8")], row(64, 64, "int32"), {}, "dtype"),
    ("mm", [row(64, 64, F16), row(64, 64, BF16)], row(64, 64, F16), {}, "dtype"),
    # a view with stride 2 in K: neither dim is unit-stride
    ("mm", [Operand((64, 64), (128, 2), F16), row(64, 64)], row(64, 64), {}, "layout"),
    # K = 1001: rows 2002 bytes apart, not 16-byte multiples (TMA cannot load them)
    ("mm", [row(64, 1001), row(1001, 64)], row(64, 64), {}, "layout"),
    ("mm", [row(64, 64), row(64, 64)], Operand((64, 64), (1, 64), F16), {}, "layout"),  # column-major C
    ("bmm", [Operand((4, 64, 64), (0, 64, 1), F16), Operand((4, 64, 64), (4096, 64, 1), F16)],
     Operand((4, 64, 64), (4096, 64, 1), F16), {}, "layout"),  # a broadcast batch
    ("addmm", [Operand((64, 64), (1, 0), F16), row(64, 64), row(64, 64)], row(64, 64), {}, "layout"),  # per-row bias
    ("addmm", [Operand((64, 64), (0, 1), F16), row(64, 64), row(64, 64)], row(64, 64), {"alpha": 2}, "scalars"),
    ("addmm", [Operand((64, 64), (0, 1), F16), row(64, 64), row(64, 64)], row(64, 64), {"beta": 0.5}, "scalars"),
    ("addmm_act", [Operand((64,), (2,), F16), row(64, 64), row(64, 64)], row(64, 64), {"act": "relu"}, "layout"),
    ("addmm_act", [Operand((64,), (1,), F16), row(64, 64), row(64, 64)], row(64, 64), {"act": "softplus"}, "epilogue"),
    ("addmm", [Operand((64, 64), (0, 1), F16), row(64, 64), row(64, 64)], row(64, 64), {"act": "relu"}, "epilogue"),
    ("mm", [row(64, 32), row(64, 64)], row(64, 64), {}, "shape"),
    ("mm", [Operand((2, 64, 64), (4096, 64, 1), F16), row(64, 64)], row(64, 64), {}, "rank"),
    ("baddbmm", [row(64, 64), row(64, 64)], row(64, 64), {}, "form"),
])
def test_problems_kforge_cannot_take_are_refused_with_a_reason(form, args, out, kw, reason):
    with pytest.raises(Unsupported) as e:
        problem(form, args, out, arch="sm_90a", **kw)
    assert e.value.reason == reason


def test_a_symbolic_size_is_refused():
    assert gemm.static_ints([3, 4], "sizes") == (3, 4)
    with pytest.raises(Unsupported) as e:
        gemm.static_ints([Symbol(), 64], "sizes")
    assert e.value.reason == "dynamic"


def test_fused_kernel_replaces_the_pattern_only_where_it_is_fastest():
    assert gemm.fused_wins(0.9, {"aten": 1.0, "cublaslt": 0.95})
    assert not gemm.fused_wins(0.96, {"aten": 1.0, "cublaslt": 0.95})
    assert not gemm.fused_wins(0.95, {"aten": 0.95})  # a tie keeps Inductor's way
    assert not gemm.fused_wins(0.99, {"aten": 1.0}, margin=0.02)
    assert not gemm.fused_wins(float("nan"), {"aten": 1.0})


def test_aten_ops_are_matched_by_name_not_by_identity():
    """The graph Inductor's post-grad passes get holds copies of aten ops (every node's
    ``meta["original_aten"]`` its own object, and an OpOverload compares by identity: torch
    2.11 on the H100), so the epilogue pass compares ops by name; by identity it found no
    decomposed gelu and fused nothing."""
    from kforge.inductor import _same_op

    class Op:  # an OpOverload's copy: an object of its own with the same name
        def __init__(self, name: str) -> None:
            self.name = name

        def __str__(self) -> str:
            return self.name

    gelu, copy = Op("aten.gelu.default"), Op("aten.gelu.default")
    assert gelu != copy and _same_op(gelu, copy)
    assert not _same_op(gelu, Op("aten.gelu.tanh")) and not _same_op(gelu, Op("aten.relu.default"))
    assert not _same_op(gelu, None) and not _same_op(None, gelu) and _same_op(None, None)


def test_the_check_against_aten_allows_the_dtypes_rounding_and_no_more():
    assert gemm.within_tolerance(0.0039, 2.0, F16)  # 1 ulp of 2.0 in float16 is 0.00195
    assert not gemm.within_tolerance(0.02, 2.0, F16)
    assert gemm.within_tolerance(0.02, 2.0, BF16)
    assert not gemm.within_tolerance(float("nan"), 2.0, BF16)


# --- Inductor's choice interface (stand-ins) ----------------------------------------------


class Node:
    """An Inductor IR node: what mm_args hands to autotune_select_algorithm."""

    def __init__(self, op: Operand) -> None:
        self.op = op

    def get_size(self):
        return list(self.op.sizes)

    def get_stride(self):
        return list(self.op.strides)

    def get_dtype(self):
        return f"torch.{self.op.dtype}"


class Device:
    type = "cuda"


class Layout:
    """Inductor's FixedLayout of the output."""

    def __init__(self, op: Operand) -> None:
        self.size, self.stride, self.dtype, self.device = list(op.sizes), list(op.strides), f"torch.{op.dtype}", Device()


class AtenChoice:
    """tuned_addmm's ATen choice: its kwargs carry alpha and beta."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class ExternChoice:
    """ExternKernelChoice("kforge_gemm"): bind() makes the caller Inductor times."""

    def __init__(self) -> None:
        self.bound: List[Dict[str, Any]] = []

    def bind(self, input_nodes, layout, ordered_kwargs_for_cpp_kernel=(), **kwargs):
        self.bound.append({"input_nodes": input_nodes, "layout": layout, "kwargs": kwargs})
        return ("kforge caller", kwargs["kernel"])


class NoServer:
    """A client that must not be used: refusals are decided before any request."""

    url = "http://nowhere.invalid"

    def __getattr__(self, name):
        raise AssertionError(f"the client was used ({name}) for a problem kforge refuses")


def integration(client: Any, tmp_path: Path, tuning: str = "default", **kw: Any) -> Integration:
    defaults = dict(arch_of=lambda layout: "sm_90a", verify=None, stream_of=lambda out: 0,
                    alloc=lambda n, out: None, fallback=lambda *a: None)
    defaults.update(kw)
    return Integration(gemm.GemmKernels(client, tuning=tuning), **defaults)


def test_unsupported_autotunes_are_left_alone_without_asking_the_server(tmp_path):
    integ = integration(NoServer(), tmp_path)
    extern = ExternChoice()
    f32 = [Node(row(64, 64, "float32")), Node(row(64, 64, "float32"))]
    assert integ.offer("mm", ["triton"], f32, Layout(row(64, 64, "float32")), extern) == ["triton"]
    # addmm whose alpha is not 1, and one without an ATen choice to read alpha/beta from
    nodes = [Node(Operand((64, 64), (0, 1), F16)), Node(row(64, 64)), Node(row(64, 64))]
    aten = AtenChoice(alpha=2, beta=1)
    assert integ.offer("addmm", [aten], nodes, Layout(row(64, 64)), extern) == [aten]
    assert integ.offer("addmm", ["triton"], nodes, Layout(row(64, 64)), extern) == ["triton"]
    assert integ.offer("int_mm", [], [Node(row(64, 64, "int8"))] * 2, Layout(row(64, 64, "int32")), extern) == []
    assert integ.offer("mm", [], [Node(Operand((Symbol(), 64), (64, 1), F16)), Node(row(64, 64))],
                       Layout(row(64, 64)), extern) == []
    assert extern.bound == []
    assert integ.stats.refused == {"dtype": 1, "scalars": 2, "dynamic": 1}
    assert integ.stats.offered == {}


@pytest.fixture(scope="module")
def cuda_server(tmp_path_factory: pytest.TempPathFactory):
    s = Server(tmp_path_factory.mktemp("gemm-server"))
    client = kforge.Client(s.url, retries=1, timeout=600)
    t = client.toolchains()["cuda"]
    if not t.get("available"):
        s.stop()
        pytest.skip(f"cuda unavailable: {t.get('reason')}")
    yield s
    s.stop()


def test_offer_compiles_the_problem_on_kforge_and_binds_its_key(cuda_server, tmp_path):
    client = kforge.Client(cuda_server.url, cache_dir=tmp_path / "cache", timeout=600, retries=1)
    verified: List[Any] = []
    integ = integration(client, tmp_path, verify=lambda prob, launch: verified.append((prob, launch)),
                        launcher=lambda kernel, form: Launch(kernel, form, fn=lambda *a: 0))
    extern = ExternChoice()
    # Inductor's addmm of y = x @ W.t() + b, bf16: W is a .t() view, the bias expanded.
    nodes = [Node(Operand((32, 256), (0, 1), BF16)), Node(row(32, 128, BF16)), Node(col(128, 256, BF16))]
    choices = integ.offer("addmm", [AtenChoice(alpha=1, beta=1), "triton"], nodes, Layout(row(32, 256, BF16)), extern)
    (bound,) = extern.bound
    kw = bound["kwargs"]
    assert len(choices) == 3 and choices[1] == "triton" and choices[2] == ("kforge caller", kw["kernel"])
    assert kw["form"] == "addmm" and kw["act"] == "" and kw["strides"] == "0,1|128,1|1,128|256,1"
    assert bound["input_nodes"] == tuple(nodes)
    # The server built what the problem says, for the device's arch.
    manifest = client.kernel(kw["kernel"]).manifest
    assert manifest["archs"] == ["sm_90a"]
    t = manifest["template"]
    assert [i["sizes"] for i in t["inputs"]] == [[32, 128], [128, 256], [256]]
    assert t["inputs"][1]["strides"] == [1, 128] and t["epilogue"] == [{"op": "add", "input": 2}]
    # Checked once before it was offered; the same problem again asks nothing new.
    assert len(verified) == 1 and verified[0][0].form == "addmm"
    requests = client.stats["requests"]
    integ.offer("addmm", [AtenChoice(alpha=1, beta=1)], nodes, Layout(row(32, 256, BF16)), extern)
    assert client.stats["requests"] == requests and len(verified) == 1
    assert integ.stats.offered == {"addmm": 2} and integ.stats.verified == 1


def test_a_kernel_that_fails_its_check_against_aten_is_not_offered(cuda_server, tmp_path):
    client = kforge.Client(cuda_server.url, cache_dir=tmp_path / "cache", timeout=600, retries=1)

    def disagree(prob, launch):
        raise Unsupported("verify", "differs from ATen")

    integ = integration(client, tmp_path, verify=disagree,
                        launcher=lambda kernel, form: Launch(kernel, form, fn=lambda *a: 0))
    extern = ExternChoice()
    assert integ.offer("mm", ["aten"], [Node(row(16, 64)), Node(row(64, 128))], Layout(row(16, 128)), extern) == ["aten"]
    assert extern.bound == [] and integ.stats.verify_failed == 1 and integ.stats.refused == {"verify": 1}


def test_autotune_on_a_server_without_a_gpu_falls_back_to_the_default_parameters(cuda_server, tmp_path):
    client = kforge.Client(cuda_server.url, cache_dir=tmp_path / "cache", timeout=600, retries=1)
    kernels = gemm.GemmKernels(client, tuning="autotune")
    prob = problem("addmm_act", [Operand((128,), (1,), F16), row(1, 64), row(64, 128)], row(1, 128),
                   arch="sm_90a", act="gelu_tanh")
    kernel = kernels.kernel_for(prob)  # POST /autotune: every choice compiled, none timed
    assert kernel.manifest["template"]["epilogue"][1] == {"op": "gelu", "approximate": "tanh"}
    assert kernel.path().exists()
    jobs = [j for j in client.jobs(limit=50)["jobs"] if j.get("kind") == "autotune"]
    assert jobs, "no autotune was asked for"


class FakeTensor:
    def __init__(self, ptr: int, sizes, strides, dtype: str = F16) -> None:
        self.ptr, self.shape, self._strides, self.dtype = ptr, tuple(sizes), tuple(strides), dtype

    def data_ptr(self) -> int:
        return self.ptr

    def stride(self):
        return self._strides


class Recorder:
    """A ctypes function with the kernel's ABI that records each call (a query answers ``need``)."""

    def __init__(self, kernel: kforge.Kernel, need: int = 0) -> None:
        self.calls: List[Dict[str, Any]] = []
        names = [a.name for a in kernel.abi.args]
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, *kernel.abi.argtypes())

        def record(*values):
            call = dict(zip(names, values))
            if call["workspace_size"]:
                call["workspace_size"][0] = need
                self.calls.append({"query": call["M"]})
                return 0
            self.calls.append(call)
            return 0

        self.fn = proto(record)


def compiled(cuda_server, tmp_path, prob) -> kforge.Kernel:
    client = kforge.Client(cuda_server.url, cache_dir=tmp_path / "cache", timeout=600, retries=1)
    return gemm.GemmKernels(client, tuning="default").kernel_for(prob)


def dead_client(tmp_path) -> kforge.Client:
    """The same local cache, no server (a port nothing listens on)."""
    return kforge.Client("http://127.0.0.1:9", cache_dir=tmp_path / "cache", retries=0, timeout=2)


def test_a_run_passes_pointers_by_the_abi_m_the_stream_and_an_allocated_workspace(cuda_server, tmp_path):
    prob = problem("addmm", [Operand((64, 256), (0, 1), F16), row(64, 128), row(128, 256)], row(64, 256), arch="sm_90a")
    kernel = compiled(cuda_server, tmp_path, prob)
    # A split-K kernel's workspace grows with M: its manifest says null, the kernel answers.
    manifest = dict(kernel.manifest, abi=dict(kernel.manifest["abi"], workspace_bytes=None))
    (tmp_path / "cache" / "manifests" / f"{kernel.key}.json").write_text(json.dumps(manifest))
    rec = Recorder(kernel, need=4096)
    allocated: List[int] = []

    class Buffer:
        def data_ptr(self):
            return 0x7000

    def alloc(n, out):
        allocated.append(n)
        return Buffer()

    integ = integration(dead_client(tmp_path), tmp_path, stream_of=lambda out: 0xABC, alloc=alloc,
                        launcher=lambda k, form: Launch(k, form, fn=rec.fn))
    bias, a, b = FakeTensor(0x1000, (64, 256), (0, 1)), FakeTensor(0x2000, (64, 128), (128, 1)), \
        FakeTensor(0x3000, (128, 256), (256, 1))
    out = FakeTensor(0x4000, (64, 256), (256, 1))
    integ.run(bias, a, b, out=out, kernel=kernel.key, form="addmm", strides=prob.signature)
    query, call = rec.calls
    assert query == {"query": 64} and allocated == [4096]
    assert (call["in_ptr0"], call["in_ptr1"], call["in_ptr2"], call["out_ptr0"]) == (0x2000, 0x3000, 0x1000, 0x4000)
    assert (call["M"], call["N"], call["K"], call["batch"]) == (64, 256, 128, 1)  # M from the output: run-time M
    assert call["workspace"] == 0x7000 and call["stream"] == 0xABC and not call["workspace_size"]
    # The same M again asks nothing; another M asks the kernel again.
    integ.run(bias, a, b, out=out, kernel=kernel.key, form="addmm", strides=prob.signature)
    out2 = FakeTensor(0x4000, (32, 256), (256, 1))
    integ.run(FakeTensor(0x1000, (32, 256), (0, 1)), FakeTensor(0x2000, (32, 128), (128, 1)), b, out=out2,
              kernel=kernel.key, form="addmm", strides=prob.signature)
    assert [c.get("query") for c in rec.calls] == [64, None, None, 32, None]
    assert rec.calls[-1]["M"] == 32 and allocated == [4096] * 3
    assert integ.stats.runs == 3 and integ.stats.runtime_fallbacks == 0


def test_a_kernel_without_a_workspace_gets_none_and_allocates_nothing(cuda_server, tmp_path):
    prob = problem("mm", [row(16, 64), row(64, 128)], row(16, 128), arch="sm_90a")
    kernel = compiled(cuda_server, tmp_path, prob)
    assert kernel.abi.workspace_bytes == 0
    rec = Recorder(kernel)
    launch = Launch(kernel, "mm", fn=rec.fn)
    launch([FakeTensor(0x10, (16, 64), (64, 1)), FakeTensor(0x20, (64, 128), (128, 1))],
           FakeTensor(0x30, (16, 128), (128, 1)), 0, lambda n: pytest.fail("allocated"))
    (call,) = rec.calls
    assert call["workspace"] is None and call["stream"] is None and call["M"] == 16


def test_other_strides_at_run_time_run_aten_instead(cuda_server, tmp_path):
    prob = problem("mm", [row(16, 64), row(64, 128)], row(16, 128), arch="sm_90a")
    kernel = compiled(cuda_server, tmp_path, prob)
    rec = Recorder(kernel)
    fallbacks: List[Any] = []
    integ = integration(dead_client(tmp_path), tmp_path, fallback=lambda *a: fallbacks.append(a),
                        launcher=lambda k, form: Launch(k, form, fn=rec.fn))
    a_t = FakeTensor(0x10, (16, 64), (1, 16))  # A transposed: the kernel was built for row-major A
    integ.run(a_t, FakeTensor(0x20, (64, 128), (128, 1)), out=FakeTensor(0x30, (16, 128), (128, 1)),
              kernel=kernel.key, form="mm", strides=prob.signature)
    assert rec.calls == [] and len(fallbacks) == 1 and fallbacks[0][0] == "mm"
    assert integ.stats.runtime_fallbacks == 1


def test_a_new_process_finds_the_kernel_by_key_without_the_server(cuda_server, tmp_path):
    """What a graph loaded from Inductor's FX graph cache does: only the key is in its code."""
    prob = problem("addmm_act", [Operand((128,), (1,), BF16), row(32, 64, BF16), row(64, 128, BF16)],
                   row(32, 128, BF16), arch="sm_90a", act="relu")
    kernel = compiled(cuda_server, tmp_path, prob)
    assert (tmp_path / "cache" / "manifests" / f"{kernel.key}.json").exists()
    dead = dead_client(tmp_path)
    later = gemm.GemmKernels(dead)
    found = later.by_key(kernel.key)
    assert found.abi == kernel.abi and found.path() == kernel.path()  # no request: the server is gone
    assert dead.stats["requests"] == 0 and later.stats.runtime_loads == 1
    rec = Recorder(found)
    integ = Integration(later, arch_of=lambda l: "sm_90a", verify=None, stream_of=lambda o: 5,
                        alloc=lambda n, o: None, fallback=lambda *a: pytest.fail("fell back"),
                        launcher=lambda k, form: Launch(k, form, fn=rec.fn))
    integ.run(FakeTensor(0x1, (128,), (1,), BF16), FakeTensor(0x2, (32, 64), (64, 1), BF16),
              FakeTensor(0x3, (64, 128), (128, 1), BF16), out=FakeTensor(0x4, (32, 128), (128, 1), BF16),
              kernel=kernel.key, form="addmm_act", act="relu", strides=prob.signature)
    assert rec.calls[0]["in_ptr2"] == 0x1 and rec.calls[0]["stream"] == 5


def test_an_unknown_kernel_with_no_server_runs_aten_and_says_so(tmp_path, caplog):
    dead = dead_client(tmp_path)
    fallbacks: List[Any] = []
    integ = Integration(gemm.GemmKernels(dead), arch_of=lambda l: "sm_90a", verify=None, stream_of=lambda o: 0,
                        alloc=lambda n, o: None, fallback=lambda *a: fallbacks.append(a))
    t = FakeTensor(0x1, (16, 16), (16, 1))
    with caplog.at_level("WARNING", logger="kforge.inductor"):
        integ.run(t, t, out=t, kernel="ab" * 32, form="mm", strides="16,1|16,1|16,1")
        integ.run(t, t, out=t, kernel="ab" * 32, form="mm", strides="16,1|16,1|16,1")
    assert len(fallbacks) == 2 and integ.stats.runtime_fallbacks == 2
    assert sum("cannot be loaded" in r.message for r in caplog.records if r.levelname == "WARNING") == 1


def test_a_manifest_on_disk_for_another_key_is_not_trusted(cuda_server, tmp_path):
    prob = problem("mm", [row(16, 64), row(64, 128)], row(16, 128), arch="sm_90a")
    kernel = compiled(cuda_server, tmp_path, prob)
    forged = tmp_path / "cache" / "manifests" / ("cd" * 32 + ".json")
    forged.write_text(json.dumps(kernel.manifest))
    with pytest.raises(kforge.KforgeError, match="names"):
        gemm.GemmKernels(dead_client(tmp_path)).by_key("cd" * 32)
    with pytest.raises(ValueError):
        gemm.GemmKernels(NoServer()).by_key("../etc/passwd")


class StandInHook:
    """kforge.inductor.Hook as Integration uses it: blocked() and failed()."""

    def __init__(self, blocked=None) -> None:
        self._blocked = blocked
        self.failures: List[BaseException] = []

    def blocked(self):
        return self._blocked

    def failed(self, e, seconds):
        self.failures.append(e)
        return "unreachable", str(e)


def test_an_open_breaker_leaves_inductors_choices_without_a_request(tmp_path):
    integ = integration(NoServer(), tmp_path, hook=StandInHook(("breaker_open", "kforge is down")))
    extern = ExternChoice()
    assert integ.offer("mm", ["aten"], [Node(row(16, 64)), Node(row(64, 128))], Layout(row(16, 128)), extern) == ["aten"]
    assert extern.bound == [] and integ.stats.refused == {"server_down": 1}


def test_a_server_that_is_gone_costs_one_failure_and_keeps_inductors_choices(tmp_path):
    hook = StandInHook()
    integ = integration(dead_client(tmp_path), tmp_path, hook=hook)
    extern = ExternChoice()
    assert integ.offer("mm", ["aten"], [Node(row(16, 64)), Node(row(64, 128))], Layout(row(16, 128)), extern) == ["aten"]
    assert extern.bound == [] and integ.stats.refused == {"error": 1}
    assert len(hook.failures) == 1 and isinstance(hook.failures[0], kforge.ConnectionFailed)
