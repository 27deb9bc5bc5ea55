"""The kernel ABI as the manifest's ``abi`` object describes it, and how to call it.

Every kforge kernel is ``int name(tensors..., scalars..., size_t* workspace_size,
uint8_t* workspace, <stream> stream)``. Tensors travel as ``void*`` (an array's
address), scalars by their C type, and a call with ``workspace_size`` non-null is
a query: the kernel writes the workspace it needs there and touches no tensor.
The mapping from C types to ctypes mirrors the server's generated Python wrapper
(``core/build/wrapper.cpp``), so this client and that wrapper call a kernel alike.
"""

from __future__ import annotations

import ctypes
import operator
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

# Integer C types by name, after "const"/"__restrict__" are dropped (as the wrapper does);
# any other non-pointer type not listed here is passed as int32, as the wrapper does.
_CTYPES: Dict[str, Any] = {
    "int64_t": ctypes.c_int64, "long": ctypes.c_int64, "long long": ctypes.c_int64,
    "ptrdiff_t": ctypes.c_int64, "index_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t,
    "uint32_t": ctypes.c_uint32, "unsigned": ctypes.c_uint32, "unsigned int": ctypes.c_uint32,
    "uint8_t": ctypes.c_uint8, "int8_t": ctypes.c_int8, "int16_t": ctypes.c_int16,
    "uint16_t": ctypes.c_uint16, "bool": ctypes.c_bool,
    "float": ctypes.c_float, "double": ctypes.c_double,
}


def scalar_ctype(ctype: str) -> Any:
    """The ctypes type a scalar of C type ``ctype`` is passed as."""
    t = ctype
    for prefix in ("const ", "__restrict__ ", "__restrict "):
        if t.startswith(prefix):
            t = t[len(prefix):]
    return _CTYPES.get(t, ctypes.c_int32)


@dataclass(frozen=True)
class Arg:
    """One parameter: ``kind`` is tensor, scalar, workspace_size, workspace or stream."""

    name: str
    kind: str
    ctype: str
    binds: Optional[str] = None  # tensor: the TensorMeta name it takes
    dtype: Optional[str] = None  # tensor: element type, when known
    const: bool = False  # tensor: read-only
    value: Optional[int] = None  # scalar: fixed by a template (the kernel's shape)
    # tensor of a template kernel: what a call must pass. A size is a number or the name of
    # the scalar that gives it at run time (a gemm's "M"); strides and offset in elements.
    # None in source mode, whose kernels take their sizes at run time.
    sizes: Optional[Tuple[Union[int, str], ...]] = None
    strides: Optional[Tuple[int, ...]] = None
    offset: int = 0

    @property
    def argtype(self) -> Any:
        if self.kind == "scalar":
            return scalar_ctype(self.ctype)
        if self.kind == "workspace_size":
            return ctypes.POINTER(ctypes.c_size_t)
        return ctypes.c_void_p

    def convert_scalar(self, v: Any) -> Any:
        """``v`` as this scalar's ctype; an integer type takes integers only (no silent truncation)."""
        ct = self.argtype
        if ct in (ctypes.c_float, ctypes.c_double):
            return ct(float(v))
        if ct is ctypes.c_bool:
            return ct(bool(v))
        try:
            return ct(operator.index(v))
        except TypeError:
            raise TypeError(f"scalar {self.name} ({self.ctype}) takes an integer, "
                            f"not {type(v).__name__}") from None


@dataclass(frozen=True)
class Abi:
    """The manifest's ``abi``: the exported symbol and its parameters in order."""

    symbol: str
    signature: str
    args: Tuple[Arg, ...]
    workspace_bytes: Optional[int]

    @classmethod
    def from_json(cls, j: Mapping[str, Any]) -> "Abi":
        args = tuple(
            Arg(name=a["name"], kind=a["kind"], ctype=a["ctype"], binds=a.get("binds"),
                dtype=a.get("dtype"), const=bool(a.get("const", False)), value=a.get("value"),
                sizes=tuple(a["sizes"]) if a.get("sizes") is not None else None,
                strides=tuple(a["strides"]) if a.get("strides") is not None else None,
                offset=int(a.get("offset") or 0))
            for a in j["args"])
        kinds = [a.kind for a in args]
        if kinds[-3:] != ["workspace_size", "workspace", "stream"]:
            raise ValueError(f"{j.get('symbol')}: the ABI must end in workspace_size, workspace, "
                             f"stream; got {kinds}")
        return cls(symbol=j["symbol"], signature=j.get("signature", j["symbol"]), args=args,
                   workspace_bytes=j.get("workspace_bytes"))

    @property
    def params(self) -> List[Arg]:
        """What a caller passes, in order: the tensors and scalars."""
        return [a for a in self.args if a.kind in ("tensor", "scalar")]

    @property
    def required(self) -> int:
        """How many leading params must be given: trailing scalars with a fixed value may be left out."""
        params = self.params
        n = len(params)
        while n and params[n - 1].kind == "scalar" and params[n - 1].value is not None:
            n -= 1
        return n

    def argtypes(self) -> List[Any]:
        return [a.argtype for a in self.args]

    def bind(self, values: Sequence[Any]) -> List[Tuple[Arg, Any]]:
        """Pairs each param with the caller's value (or its fixed value); checks the count."""
        params = self.params
        if not self.required <= len(values) <= len(params):
            want = (f"{len(params)}" if self.required == len(params)
                    else f"{self.required} to {len(params)}")
            raise TypeError(f"{self.symbol} takes {want} arguments "
                            f"({', '.join(a.binds or a.name for a in params)}), "
                            f"got {len(values)}; signature: {self.signature}")
        return [(a, values[i] if i < len(values) else a.value) for i, a in enumerate(params)]


ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
            "int8": 1, "int32": 4, "int64": 8, "uint8": 1}


@dataclass(frozen=True)
class View:
    """What a buffer passed as a tensor is, as far as a kernel call cares."""

    address: int
    dtype: Optional[str]  # torch's and numpy's name ("float32"); None: a ctypes array
    device: str  # "cpu", or torch's device type ("cuda" for CUDA and ROCm alike)
    shape: Optional[Tuple[int, ...]]  # None: a flat buffer (a ctypes array)
    strides: Optional[Tuple[int, ...]]  # elements
    contiguous: bool
    readonly: bool
    nbytes: Optional[int]


def check_tensor(what: str, arg: Arg, v: View, device: str, scalars: Mapping[str, Any]) -> None:
    """Raises ValueError (naming ``what``) unless ``v`` is what ``arg`` takes: its dtype, on
    ``device``, and, where the ABI has the tensor's layout, its sizes (a named size from
    ``scalars``) and element strides. Where the kernel adds a storage offset, ``v`` must be the
    whole storage: contiguous, holding every element the kernel touches. Mirrors the checks of
    the server's generated wrapper (core/build/wrapper.cpp)."""
    if v.device != device:
        raise ValueError(f"{what} is on {v.device}; the kernel takes tensors on {device}")
    if arg.dtype and v.dtype is not None and v.dtype != arg.dtype:
        raise ValueError(f"{what} is {v.dtype}; the kernel takes {arg.dtype}")
    if not arg.const and v.readonly:
        raise ValueError(f"{what}: the kernel writes it, but the array is read-only")
    if arg.sizes is None or arg.strides is None:
        if not v.contiguous:
            raise ValueError(f"{what} is not contiguous (strides {list(v.strides or ())}): "
                             f"the kernel takes a dense array (numpy.ascontiguousarray, "
                             f"tensor.contiguous())")
        return
    sizes = []
    for d in arg.sizes:
        if isinstance(d, str):
            n = scalars.get(d)
            if not isinstance(n, int) or isinstance(n, bool):
                raise TypeError(f"{what}: its size {d} is the scalar argument {d}, which is missing")
            sizes.append(n)
        else:
            sizes.append(int(d))
    need = arg.offset + 1 + sum((n - 1) * s for n, s in zip(sizes, arg.strides))
    if any(n == 0 for n in sizes):
        need = arg.offset
    if v.shape is None or arg.offset:
        item = ITEMSIZE.get(arg.dtype or "", 1)
        have = (v.nbytes // item if v.nbytes is not None else
                _numel(v.shape) if v.shape is not None else 0)
        if not v.contiguous or have < need:
            raise ValueError(f"{what}: the kernel reads it as a {sizes} tensor with strides "
                             f"{list(arg.strides)} from element {arg.offset} on; pass its whole "
                             f"storage (a contiguous buffer of at least {need} elements), not "
                             + (f"shape {list(v.shape)}" if v.shape is not None
                                else f"{have} elements"))
        return
    if tuple(v.shape) != tuple(sizes):
        raise ValueError(f"{what} has shape {list(v.shape)}; the kernel was built for {sizes}")
    strides = v.strides or ()
    if any(n > 1 and e != s for n, e, s in zip(sizes, strides, arg.strides)):
        raise ValueError(f"{what} has strides {list(strides)}; the kernel was built for "
                         f"{list(arg.strides)}")


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n

