"""kforge's gemm as a choice in PyTorch Inductor's matmul autotuning: the part that needs no torch.

:mod:`kforge.inductor` (``install(kernels=True)``) holds the torch side; everything it decides
is decided here, on plain values, so the tests can drive it with stand-ins:

- :func:`problem` maps one of Inductor's matmuls (the operands in Inductor's argument order,
  as sizes, strides and dtype names, and the output) to a :class:`Problem`, or raises
  :class:`Unsupported` naming why kforge's gemm cannot take it (a dtype, a layout, a
  dynamic size, alpha/beta). :meth:`Problem.request` is the template-mode request.
- :class:`GemmKernels` gets the kernel of a problem from the server (``POST /autotune`` with
  the default choices: the server's own ranking, cached there; then ``GET /kernels/{key}``),
  keeps its manifest on disk beside the client's artifact cache, and finds a kernel again by
  its key alone in a process that never asked for it (a graph loaded from Inductor's FX graph
  cache).
- :class:`Launch` calls a kernel with Inductor's arguments: tensors by the ABI's ``binds``,
  the run-time M, the workspace (asked of the kernel, allocated by the caller's allocator)
  and the caller's stream.
- :class:`Integration` is what Inductor sees: :meth:`Integration.offer` adds the kforge choice
  to a list of choices (or leaves the list alone), :meth:`Integration.run` is the call the
  generated code makes.

Nothing here raises out of :meth:`Integration.offer`: a problem kforge cannot take, a server
that is down or refuses, a kernel that fails its check against ATen, each leaves Inductor's
own choices as they were and is counted in :class:`KernelStats`.
"""

from __future__ import annotations

import ctypes
import json
import logging
import operator
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .cache import atomic_write
from .errors import KforgeError
from .kernel import Kernel

log = logging.getLogger("kforge.inductor")

#: Inductor's argument order per form; "C" (the output) follows. addmm's bias is Inductor's
#: ``inp_expanded`` ([M, N], a stride-0 view of a [N] bias); addmm_act's is the [N] bias itself.
FORMS: Dict[str, Tuple[str, ...]] = {"mm": ("A", "B"), "addmm": ("bias", "A", "B"),
                                     "bmm": ("A", "B"), "addmm_act": ("bias", "A", "B")}
#: Inductor's autotune names that kforge serves, and the form each is.
AUTOTUNED = {"mm": "mm", "addmm": "addmm", "bmm": "bmm"}
DTYPES = ("float16", "bfloat16")
ACTIVATIONS: Dict[str, Dict[str, Any]] = {
    "relu": {"op": "relu"}, "gelu": {"op": "gelu"}, "gelu_tanh": {"op": "gelu", "approximate": "tanh"},
    "silu": {"op": "silu"}}
#: A kernel agrees with ATen when max |kforge - ATen| <= TOLERANCE * max |ATen|: four units in
#: the last place of the largest output (both round once to the dtype; K-long float32 sums
#: differ far less). A wrong layout or epilogue is off by O(1).
TOLERANCE = {"float16": 4 * 2.0 ** -11, "bfloat16": 4 * 2.0 ** -8}
_KEY = re.compile(r"[0-9a-f]{64}")


class Unsupported(ValueError):
    """kforge's gemm does not take this problem; ``reason`` is a short label for the counts."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Operand:
    """One tensor as Inductor describes it: sizes, strides (elements) and torch's dtype name."""

    sizes: Tuple[int, ...]
    strides: Tuple[int, ...]
    dtype: str

    def meta(self, name: str) -> Dict[str, Any]:
        return {"name": name, "dtype": self.dtype, "sizes": list(self.sizes), "strides": list(self.strides)}


def dtype_name(dtype: Any) -> str:
    """``torch.float16`` (or the string ``float16``) as kforge names it: ``float16``."""
    return str(dtype).replace("torch.", "")


def static_ints(values: Sequence[Any], what: str) -> Tuple[int, ...]:
    """Sizes or strides as ints; a symbolic one (a sympy Symbol, an unbacked size) is refused:
    kforge's kernels are keyed per concrete shape."""
    out = []
    for v in values:
        if type(v).__name__ == "SymInt":  # torch's symbolic int: int() would specialize it
            raise Unsupported("dynamic", f"{what} {list(values)} is not static")
        try:
            out.append(operator.index(v) if not hasattr(v, "free_symbols") else int(v))
        except (TypeError, ValueError):
            raise Unsupported("dynamic", f"{what} {list(values)} is not static") from None
    return tuple(out)


def operand_of(node: Any) -> Operand:
    """An Operand from anything with Inductor's IR accessors (get_size, get_stride, get_dtype)."""
    return Operand(static_ints(node.get_size(), "sizes"), static_ints(node.get_stride(), "strides"),
                   dtype_name(node.get_dtype()))


def arch_for(capability: Tuple[int, int]) -> str:
    """The kforge arch of a CUDA device: Hopper's arch-specific target (the wgmma kernel needs
    it), else ``sm_<major><minor>``; below sm_80 kforge's 16-bit gemm does not exist."""
    major, minor = capability
    if major < 8:
        raise Unsupported("arch", f"compute capability {major}.{minor}: kforge's 16-bit gemm needs sm_80 or newer")
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def _loadable(op: Operand, name: str) -> None:
    """A unit stride in one of the last two dims and 16-byte multiples for the others: what the
    tensor-core kernels load with TMA (and what the default autotune search takes)."""
    rows, cols = op.sizes[-2:]
    rs, cs = op.strides[-2:]
    row_major = cs == 1 and (rows == 1 or (rs >= cols and rs % 8 == 0))
    col_major = rs == 1 and (cols == 1 or (cs >= rows and cs % 8 == 0))
    if not (row_major or col_major):
        raise Unsupported("layout", f"{name} strides {list(op.strides)} for sizes {list(op.sizes)}: kforge's gemm "
                          "needs a unit stride in one of the last two dims and 16-byte multiples for the other")
    if len(op.sizes) == 3 and (op.strides[0] <= 0 or op.strides[0] % 8):
        raise Unsupported("layout", f"{name} batch stride {op.strides[0]}: a positive multiple of 8 elements")


def _bias(op: Operand, m: int, n: int, batched: bool) -> Operand:
    """The request's bias for Inductor's bias argument: a [N] vector (Inductor's [M, N] view
    with strides (0, 1), or the vector itself) or a full row-major [M, N] matrix."""
    if batched:
        raise Unsupported("layout", "a batched bias")
    if op.sizes == (n,) and op.strides == (1,):
        return op
    if op.sizes == (m, n) and op.strides == (0, 1):
        return Operand((n,), (1,), op.dtype)
    if op.sizes == (m, n) and op.strides[1] == 1 and (m == 1 or (op.strides[0] >= n and op.strides[0] % 8 == 0)):
        return op
    raise Unsupported("layout", f"bias sizes {list(op.sizes)} strides {list(op.strides)}: kforge adds a [N] "
                      "bias or a row-major [M, N] matrix")


@dataclass(frozen=True)
class Problem:
    """One matmul kforge can take: ``args`` are Inductor's arguments (its order, its strides),
    ``a``, ``b``, ``bias`` the request's operands, ``act`` the activation after the bias."""

    form: str
    args: Tuple[Operand, ...]
    out: Operand
    a: Operand
    b: Operand
    bias: Optional[Operand]
    act: str
    arch: str

    def request(self) -> Dict[str, Any]:
        """The template-mode request (``POST /kernels``; ``/autotune`` adds ``choices``)."""
        inputs = [self.a.meta("A"), self.b.meta("B")]
        epilogue: List[Dict[str, Any]] = []
        if self.bias is not None:
            inputs.append(self.bias.meta("bias"))
            epilogue.append({"op": "add", "input": 2})
        if self.act:
            epilogue.append(dict(ACTIVATIONS[self.act]))
        req: Dict[str, Any] = {"backend": "cuda", "arch": self.arch, "template": "gemm", "inputs": inputs,
                               "output": self.out.meta("C")}
        if epilogue:
            req["epilogue"] = epilogue
        return req

    @property
    def signature(self) -> str:
        """The strides of Inductor's arguments and the output, as the generated call carries
        them (``strides=``): the kernel bakes them in, so a call with others must not run it."""
        return signature_of(a.strides for a in (*self.args, self.out))


def signature_of(strides: Any) -> str:
    return "|".join(",".join(str(int(s)) for s in st) for st in strides)


def problem(form: str, args: Sequence[Operand], out: Operand, *, arch: str, act: str = "",
            alpha: Any = 1, beta: Any = 1) -> Problem:
    """The Problem for Inductor's ``form`` on ``args`` (its argument order, FORMS) into ``out``,
    or :class:`Unsupported` naming why kforge's gemm cannot take it."""
    if form not in FORMS:
        raise Unsupported("form", f"{form} is not one of {sorted(FORMS)}")
    if len(args) != len(FORMS[form]):
        raise Unsupported("form", f"{form} takes {len(FORMS[form])} arguments, got {len(args)}")
    if (act != "") != (form == "addmm_act") or (act and act not in ACTIVATIONS):
        raise Unsupported("epilogue", f"activation {act!r} with {form} (addmm_act takes one of {sorted(ACTIVATIONS)})")
    if alpha != 1 or beta != 1:
        raise Unsupported("scalars", f"alpha={alpha}, beta={beta}: kforge adds the bias as it is")
    named = dict(zip(FORMS[form], args))
    a, b = named["A"], named["B"]
    dtypes = {op.dtype for op in (*args, out)}
    if len(dtypes) != 1 or a.dtype not in DTYPES:
        raise Unsupported("dtype", f"dtypes {sorted(dtypes)}: kforge serves float16 or bfloat16, the same throughout")
    rank = 3 if form == "bmm" else 2
    if len(a.sizes) != rank or len(b.sizes) != rank or len(out.sizes) != rank:
        raise Unsupported("rank", f"{form} with operands of rank {len(a.sizes)}, {len(b.sizes)} -> {len(out.sizes)}")
    *ba, m, k = a.sizes
    *bb, k2, n = b.sizes
    if k != k2 or tuple(out.sizes) != (*ba, m, n) or ba != bb or min(m, n, k, *ba) < 1:
        raise Unsupported("shape", f"A {list(a.sizes)} B {list(b.sizes)} C {list(out.sizes)}")
    _loadable(a, "A")
    _loadable(b, "B")
    rows, cols = out.strides[-2:]
    if cols != 1 or not (m == 1 or (rows >= n and rows % 8 == 0)) or (rank == 3 and out.strides[0] % 8):
        raise Unsupported("layout", f"C strides {list(out.strides)}: a row-major output with 16-byte rows")
    bias = _bias(named["bias"], m, n, rank == 3) if "bias" in named else None
    return Problem(form, tuple(args), out, a, b, bias, act, arch)


@dataclass
class KernelStats:
    """What ``install(kernels=True)`` did, and what it cost (seconds are wall time)."""

    offered: Dict[str, int] = field(default_factory=dict)    # kforge choices added, by form
    refused: Dict[str, int] = field(default_factory=dict)    # matmuls left alone, by reason
    server_seconds: float = 0.0        # time in kforge requests at compile time (autotune, manifest, artifact)
    verified: int = 0                  # kernels that agreed with ATen
    verify_failed: int = 0             # ... that did not (never offered)
    fused: int = 0                     # bias + activation patterns replaced by kforge's fused kernel
    fused_kept: int = 0                # ... left to Inductor (kforge's kernel was not the fastest)
    fused_timings: List[Dict[str, Any]] = field(default_factory=list)  # each fused decision's times (ms)
    runs: int = 0                      # kernel calls at run time (benchmarks included)
    runtime_loads: int = 0             # kernels found by key at run time (a graph from the FX graph cache)
    runtime_fallbacks: int = 0         # calls that ran ATen instead (strides unlike the kernel's, no kernel)
    last_error: str = ""


class GemmKernels:
    """The kernel of each Problem, from a kforge server; kernels by key for run time.

    ``tuning="autotune"``: ``POST /autotune`` with ``"choices": "default"`` (the server's
    ranking, cached on the server: a warm answer is milliseconds), then the winner's manifest.
    A server without a device to time on answers no winner: the template's default parameters
    are compiled instead (``POST /kernels``). ``tuning="default"``: only that.
    ``benchmark`` is the autotune's ``benchmark`` object (default ``{"verify": true}``).
    Manifests are kept in ``<client cache>/manifests/<key>.json``.
    """

    def __init__(self, client: Any, tuning: str = "autotune", benchmark: Optional[Dict[str, Any]] = None,
                 stats: Optional[KernelStats] = None) -> None:
        if tuning not in ("autotune", "default"):
            raise ValueError(f"tuning={tuning!r}: 'autotune' or 'default'")
        self.client = client
        self.tuning = tuning
        self.benchmark = dict(benchmark) if benchmark is not None else {"verify": True}
        self.stats = stats if stats is not None else KernelStats()
        self._by_request: Dict[str, Kernel] = {}
        self._by_key: Dict[str, Kernel] = {}
        self._lock = threading.Lock()

    @property
    def manifest_dir(self) -> Path:
        return Path(self.client.cache.root) / "manifests"

    def kernel_for(self, prob: Problem) -> Kernel:
        """The kernel for ``prob`` with its ``.so`` in the local cache (KforgeError, OSError)."""
        req = prob.request()
        memo = json.dumps(req, sort_keys=True)
        with self._lock:
            if memo in self._by_request:
                return self._by_request[memo]
        t0 = time.monotonic()
        try:
            kernel = self._fetch(req)
            kernel.path()
        finally:
            self.stats.server_seconds += time.monotonic() - t0
        self._remember(kernel)
        with self._lock:
            self._by_request[memo] = kernel
        return kernel

    def _fetch(self, req: Dict[str, Any]) -> Kernel:
        if self.tuning == "autotune":
            answer = self.client.autotune_request(dict(req, choices="default", benchmark=self.benchmark))
            winner = answer.get("winner")
            if winner:
                return self.client.kernel(winner["key"])
            statuses = {c.get("status") for c in answer.get("choices", [])}
            if statuses != {"compiled"}:  # something failed: not a server without a device
                raise Unsupported("autotune", f"no winner: {answer.get('winner_reason', 'no choice ran')}")
            log.info("kforge: %s has no device to autotune on; using the template's default parameters",
                     self.client.url)
        return self.client.compile_request(req)

    def by_key(self, key: str) -> Kernel:
        """Kernel ``key`` from memory, the local manifest, or ``GET /kernels/{key}``."""
        with self._lock:
            if key in self._by_key:
                return self._by_key[key]
        if not _KEY.fullmatch(key):
            raise ValueError(f"not a kernel key: {key!r}")
        path = self.manifest_dir / f"{key}.json"
        try:
            kernel = Kernel(self.client, json.loads(path.read_text()))
        except (OSError, ValueError, KeyError):
            kernel = self.client.kernel(key)
            self._remember(kernel)
        if kernel.key != key:
            raise KforgeError(f"the manifest of {key} names {kernel.key}")
        with self._lock:
            self._by_key[key] = kernel
        self.stats.runtime_loads += 1
        return kernel

    def _remember(self, kernel: Kernel) -> None:
        with self._lock:
            self._by_key[kernel.key] = kernel
        body = {k: v for k, v in kernel.manifest.items() if k not in ("cache", "phases_ms", "miss_reason")}
        try:
            atomic_write(self.manifest_dir / f"{kernel.key}.json", json.dumps(body).encode(), 0o644)
        except OSError as e:  # the kernel still runs in this process
            log.warning("kforge: cannot keep the manifest of %s: %s", kernel.key, e)


class Launch:
    """A kernel bound to one form's arguments, for repeated calls.

    ``fn`` is the loaded function (default: ``kernel.load()``). A call passes each tensor's
    ``data_ptr()`` where the ABI binds its name, the output's M where the ABI's M has no fixed
    value, a workspace of the size the kernel asks for (its manifest's ``workspace_bytes``, or
    the kernel's own answer to the query for that M, remembered) from ``alloc(nbytes)``, kept
    alive until the kernel returns, and ``stream``.
    """

    def __init__(self, kernel: Kernel, form: str, fn: Any = None) -> None:
        self.kernel = kernel
        self.fn = fn if fn is not None else kernel.load()
        names = FORMS[form] + ("C",)
        self.plan: List[Tuple[str, Any]] = []
        for a in kernel.abi.args:
            if a.kind == "tensor":
                if a.binds not in names:
                    raise Unsupported("abi", f"{kernel.name} takes tensor {a.binds!r}; {form} has {names}")
                self.plan.append(("tensor", names.index(a.binds)))
            elif a.kind == "scalar":
                if a.value is None and a.name != "M":
                    raise Unsupported("abi", f"{kernel.name}: scalar {a.name} has no value")
                self.plan.append(("scalar", a.value))
            else:
                self.plan.append((a.kind, None))
        self.fixed_workspace = kernel.abi.workspace_bytes
        self._workspace: Dict[int, int] = {}

    def workspace_bytes(self, m: int) -> int:
        if self.fixed_workspace is not None:
            return int(self.fixed_workspace)
        if m not in self._workspace:
            size = ctypes.c_size_t(0)
            call = [m if kind == "scalar" and v is None else v if kind == "scalar" else
                    ctypes.byref(size) if kind == "workspace_size" else None for kind, v in self.plan]
            rc = self.fn(*call)
            if rc != 0:
                raise RuntimeError(f"{self.kernel.name}: the workspace query returned {rc}")
            self._workspace[m] = size.value
        return self._workspace[m]

    def __call__(self, args: Sequence[Any], out: Any, stream: int, alloc: Callable[[int], Any]) -> None:
        m = int(out.shape[-2])
        ptrs = [t.data_ptr() for t in args] + [out.data_ptr()]
        need = self.workspace_bytes(m)
        ws = alloc(need) if need else None  # alive until the kernel has been launched
        call: List[Any] = []
        for kind, v in self.plan:
            if kind == "tensor":
                call.append(ptrs[v])
            elif kind == "scalar":
                call.append(m if v is None else v)
            elif kind == "workspace":
                call.append(ws.data_ptr() if ws is not None else None)
            elif kind == "stream":
                call.append(stream or None)
            else:  # workspace_size: NULL, a run
                call.append(None)
        rc = self.fn(*call)
        if rc != 0:
            raise RuntimeError(f"{self.kernel.name} returned {rc}")


def fused_wins(kforge_ms: float, others_ms: Dict[str, float], margin: float = 0.0) -> bool:
    """Whether the fused kernel replaces the pattern: faster than every other way, by ``margin``."""
    best = min((t for t in others_ms.values() if t == t), default=float("inf"))
    return kforge_ms == kforge_ms and kforge_ms < best * (1.0 - margin)


def within_tolerance(max_abs_err: float, max_abs_ref: float, dtype: str) -> bool:
    return max_abs_err == max_abs_err and max_abs_err <= TOLERANCE[dtype] * max(max_abs_ref, 1e-6)


class Integration:
    """The kforge choice in Inductor's autotuning and the call the generated code makes.

    Torch enters through the callables: ``arch_of(layout)`` (the device's kforge arch),
    ``verify(problem, launch)`` (runs the kernel beside ATen on random data; raises
    :class:`Unsupported` when they disagree), ``stream_of(out)`` (the current stream's
    handle), ``alloc(nbytes, out)`` (a device buffer with ``data_ptr()``) and ``fallback(form,
    act, args, out)`` (ATen into ``out``). ``hook`` is the :class:`kforge.inductor.Hook`
    whose breaker and failure accounting a server error goes through (None: logged only).
    """

    def __init__(self, kernels: GemmKernels, *, arch_of: Callable[[Any], str],
                 verify: Optional[Callable[[Problem, Launch], None]], stream_of: Callable[[Any], int],
                 alloc: Callable[[int, Any], Any], fallback: Callable[[str, str, Sequence[Any], Any], None],
                 hook: Any = None, forms: Sequence[str] = ("mm", "addmm", "bmm"),
                 launcher: Callable[[Kernel, str], Launch] = Launch) -> None:
        self.kernels = kernels
        self.stats = kernels.stats
        self.arch_of, self.verify = arch_of, verify
        self.stream_of, self.alloc, self.fallback = stream_of, alloc, fallback
        self.hook = hook
        self.forms = tuple(forms)
        self.launcher = launcher
        self._launches: Dict[Tuple[str, str], Launch] = {}
        self._verified: Dict[str, bool] = {}
        self._strides: Dict[str, Tuple[Tuple[int, ...], ...]] = {}  # a strides= signature, parsed
        self._warned: set = set()
        self._lock = threading.Lock()

    def _count(self, table: Dict[str, int], name: str) -> None:
        with self._lock:
            table[name] = table.get(name, 0) + 1

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        with self._lock:
            first = key not in self._warned
            self._warned.add(key)
        log.log(logging.WARNING if first else logging.DEBUG, msg, *args)

    # --- compile time -------------------------------------------------------------------

    def prepare(self, prob: Problem) -> Tuple[Kernel, Launch]:
        """The verified kernel of ``prob`` and its launch (Unsupported, KforgeError, OSError)."""
        kernel = self.kernels.kernel_for(prob)
        launch = self.launch(kernel.key, prob.form, kernel)
        if self.verify is not None and kernel.key + prob.form + prob.signature not in self._verified:
            try:
                self.verify(prob, launch)
            except Unsupported:
                self.stats.verify_failed += 1
                raise
            self.stats.verified += 1
            self._verified[kernel.key + prob.form + prob.signature] = True
        return kernel, launch

    def describe(self, name: str, choices: Sequence[Any], input_nodes: Sequence[Any], layout: Any) -> Problem:
        """The Problem of an Inductor autotune (``name``, its choices, inputs and output layout)."""
        form = AUTOTUNED.get(name)
        if form is None or form not in self.forms:
            raise Unsupported("op", f"{name} is not one of {[k for k, v in AUTOTUNED.items() if v in self.forms]}")
        alpha = beta = 1
        if form == "addmm":
            # tuned_addmm's ATen choices carry alpha and beta (extern_kernels.addmm(..., alpha=, beta=)).
            scalars = [c.kwargs for c in choices if isinstance(getattr(c, "kwargs", None), dict)
                       and "alpha" in c.kwargs and "beta" in c.kwargs]
            if not scalars:
                raise Unsupported("scalars", "addmm without an ATen choice: alpha and beta unknown")
            alpha, beta = scalars[0]["alpha"], scalars[0]["beta"]
        device = getattr(layout, "device", None)
        if getattr(device, "type", "cuda") != "cuda":
            raise Unsupported("device", f"{device}: kforge's gemm runs on CUDA")
        out = Operand(static_ints(layout.size, "output sizes"), static_ints(layout.stride, "output strides"),
                      dtype_name(layout.dtype))
        return problem(form, [operand_of(n) for n in input_nodes], out, arch=self.arch_of(layout),
                       alpha=alpha, beta=beta)

    def offer(self, name: str, choices: Sequence[Any], input_nodes: Sequence[Any], layout: Any,
              extern_choice: Any) -> List[Any]:
        """``choices`` plus kforge's (``extern_choice.bind(input_nodes, layout, kernel=, form=,
        act=, strides=)``) where kforge takes the problem; else ``choices`` unchanged. (Not
        ``layout=``: that is bind()'s own parameter.)"""
        choices = list(choices)
        if AUTOTUNED.get(name) not in self.forms:
            return choices
        try:
            prob = self.describe(name, choices, input_nodes, layout)
            if self.hook is not None and self.hook.blocked() is not None:
                raise Unsupported("server_down", self.hook.blocked()[1])
            kernel, _ = self.prepare(prob)
        except Unsupported as e:
            self._count(self.stats.refused, e.reason)
            log.debug("kforge: %s left to Inductor: %s", name, e)
            return choices
        except (KforgeError, OSError, RuntimeError) as e:
            self._server_failed(name, e)
            return choices
        self._count(self.stats.offered, prob.form)
        return choices + [extern_choice.bind(tuple(input_nodes), layout, kernel=kernel.key, form=prob.form,
                                             act=prob.act, strides=prob.signature)]

    def _server_failed(self, what: str, e: BaseException) -> None:
        self._count(self.stats.refused, "error")
        self.stats.last_error = f"{type(e).__name__}: {e}"
        if self.hook is not None and isinstance(e, (KforgeError, OSError)):
            self.hook.failed(e, 0.0)
        self._warn_once(f"{type(e).__name__}:{e}", "kforge: no kforge choice for %s: %s", what, e)

    # --- run time -----------------------------------------------------------------------

    def launch(self, key: str, form: str, kernel: Optional[Kernel] = None) -> Launch:
        with self._lock:
            found = self._launches.get((key, form))
        if found is None:
            found = self.launcher(kernel or self.kernels.by_key(key), form)
            with self._lock:
                self._launches[(key, form)] = found
        return found

    def run(self, *args: Any, out: Any, kernel: str, form: str, act: str = "", strides: str = "") -> None:
        """What the generated code calls: kernel ``kernel`` on ``args`` (Inductor's order) into
        ``out`` on the current stream; ATen instead (counted, warned once) when the tensors'
        strides are not the ones the kernel was built for or the kernel cannot be had."""
        self.stats.runs += 1
        expected = self._strides.get(strides)
        if expected is None:
            expected = self._strides[strides] = tuple(
                tuple(int(x) for x in part.split(",") if x != "") for part in strides.split("|")) if strides else ()
        if expected and expected != tuple(tuple(t.stride()) for t in (*args, out)):
            self.stats.runtime_fallbacks += 1
            self._warn_once("layout" + kernel, "kforge: %s was built for strides %s, called with %s: ATen runs "
                            "instead", kernel, strides, signature_of(t.stride() for t in (*args, out)))
            self.fallback(form, act, args, out)
            return
        try:
            launch = self.launch(kernel, form)
        except (KforgeError, OSError, ValueError, Unsupported) as e:
            self.stats.runtime_fallbacks += 1
            self.stats.last_error = f"{type(e).__name__}: {e}"
            self._warn_once("load" + kernel, "kforge: kernel %s cannot be loaded (%s): ATen runs instead", kernel, e)
            self.fallback(form, act, args, out)
            return
        launch(args, out, self.stream_of(out), lambda n: self.alloc(n, out))
