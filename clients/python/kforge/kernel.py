"""A compiled kernel: its manifest, its files in the local cache, and a ctypes call.

``Kernel(...)(x, y, n)`` calls the exported function as the manifest's ``abi``
says (see :mod:`kforge.abi`): tensors by address (numpy arrays, torch tensors),
each checked first against the ABI — dtype, device, and for template kernels the
sizes and strides the kernel was built for — so a wrong array is a ValueError
naming the argument, never a read out of bounds; scalars by C type, then the
workspace, asked of the kernel itself and allocated here unless given, and the stream.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .abi import Abi, Arg, View, check_tensor
from .errors import NotFound

if TYPE_CHECKING:
    from .client import Client


def _numpy_array(v: Any) -> bool:
    np = sys.modules.get("numpy")  # an ndarray exists only if numpy was imported
    return np is not None and isinstance(v, np.ndarray)


def _torch_tensor(v: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def _address(v: Any, what: str) -> int:
    """The address of a buffer: a numpy array, anything with ``.data_ptr()``, a ctypes array."""
    if _numpy_array(v):
        return int(v.ctypes.data)
    if hasattr(v, "data_ptr"):
        return int(v.data_ptr())
    if isinstance(v, ctypes.Array):
        return ctypes.addressof(v)
    raise TypeError(f"{what}: expected a numpy array, a tensor with .data_ptr() or a ctypes "
                    f"array, not {type(v).__name__}")


def _view(v: Any, what: str) -> View:
    """What a call needs to know of a buffer: numpy arrays and torch tensors (or anything
    shaped like one: ``data_ptr()``, ``stride()``, ``shape``, ``dtype``, ``device``) say it
    all; a ctypes array only its address and size (checked against what the kernel touches
    where the ABI knows it). Anything else says too little to be checked: TypeError."""
    if _numpy_array(v):
        item = v.dtype.itemsize
        if any(s % item for s in v.strides):
            raise ValueError(f"{what}: its byte strides {v.strides} are not whole elements")
        return View(address=int(v.ctypes.data), dtype=str(v.dtype), device="cpu",
                    shape=tuple(v.shape), strides=tuple(s // item for s in v.strides),
                    contiguous=bool(v.flags.c_contiguous), readonly=not v.flags.writeable,
                    nbytes=int(v.nbytes))
    if _torch_tensor(v) or (hasattr(v, "data_ptr") and callable(getattr(v, "stride", None))):
        device = getattr(v.device, "type", str(v.device))
        return View(address=int(v.data_ptr()), dtype=str(v.dtype).replace("torch.", ""),
                    device=device, shape=tuple(v.shape), strides=tuple(v.stride()),
                    contiguous=bool(v.is_contiguous()), readonly=False,
                    nbytes=int(v.numel() * v.element_size()))
    if isinstance(v, ctypes.Array):
        return View(address=ctypes.addressof(v), dtype=None, device="cpu", shape=None,
                    strides=None, contiguous=True, readonly=False, nbytes=ctypes.sizeof(v))
    raise TypeError(f"{what}: expected a numpy array, a torch tensor or a ctypes array, "
                    f"not {type(v).__name__}")


def _nbytes(v: Any) -> Optional[int]:
    if isinstance(v, ctypes.Array):
        return ctypes.sizeof(v)
    n = getattr(v, "nbytes", None)
    return int(n) if isinstance(n, int) else None


class Kernel:
    """One kernel as the server describes it (the manifest of ``POST /kernels``).

    Attributes: ``key``, ``name`` (the exported symbol), ``backend``, ``archs``,
    ``cache`` (``hit``/``miss``/``joined`` for a compile, None for a lookup),
    ``abi`` and ``manifest`` (the whole answer).
    """

    def __init__(self, client: "Client", manifest: Mapping[str, Any]) -> None:
        self._client = client
        self.manifest: Dict[str, Any] = dict(manifest)
        self.key: str = manifest["key"]
        self.name: str = manifest["kernel_name"]
        self.backend: str = manifest["backend"]
        self.archs: List[str] = list(manifest.get("archs", []))
        self.cache: Optional[str] = manifest.get("cache")
        self.abi = Abi.from_json(manifest["abi"])
        self._fn: Any = None
        self._workspace_sizes: Dict[Tuple[Any, ...], int] = {}

    def __repr__(self) -> str:
        return f"<kforge.Kernel {self.name} {self.backend} {'+'.join(self.archs)[:40]}>"

    @property
    def wrapper(self) -> str:
        """The server's standalone Python wrapper (save it as ``<name>_wrapper.py``)."""
        return str(self.manifest.get("wrapper", {}).get("python", ""))

    def path(self) -> Path:
        """The ``.so`` in the local cache, downloaded only if the cache lacks that sha256."""
        art = self.manifest["artifact"]
        return self._client._file(self.key, "artifact", art["url"], art["sha256"])

    def object_path(self) -> Path:
        """The ``.o`` (built with ``options={"aot": True}``) in the local cache."""
        obj = self.manifest.get("object")
        if not obj:
            raise NotFound(f"kernel {self.key} has no object file (compile it with "
                           f"options={{'aot': True}})", status=None)
        return self._client._file(self.key, "object", obj["url"], obj["sha256"])

    def source(self) -> str:
        """The source as compiled (``KERNEL_NAME`` replaced by the kernel's name)."""
        return self._client._text(self.manifest.get("source_url", f"/kernels/{self.key}/source"))

    def log(self) -> str:
        """The compiler's command lines and output."""
        return self._client._text(self.manifest.get("log_url", f"/kernels/{self.key}/log"))

    def load(self) -> Any:
        """Loads the ``.so`` with ctypes (once) and returns the typed function."""
        if self._fn is None:
            # dlopen needs no particular file name: the cache file (named by its hash) is
            # loaded in place, so the verified bytes are the ones that run.
            fn = getattr(ctypes.CDLL(str(self.path())), self.abi.symbol)
            fn.restype = ctypes.c_int32
            fn.argtypes = self.abi.argtypes()
            self._fn = fn
        return self._fn

    def workspace_size(self, *scalars: Any) -> int:
        """Workspace bytes the kernel needs for these scalars (fixed ones may be left out).

        Asks the kernel itself (a call with ``workspace_size`` non-null, no tensor
        touched), as the server's wrapper does; answers are remembered per scalars.
        """
        args = [a for a in self.abi.params if a.kind == "scalar"]
        if len(scalars) > len(args):
            raise TypeError(f"{self.name}_workspace_size takes at most {len(args)} scalars "
                            f"({', '.join(a.name for a in args)}), got {len(scalars)}")
        values = list(scalars) + [a.value for a in args[len(scalars):]]
        missing = [a.name for a, v in zip(args, values) if v is None]
        if missing:
            raise TypeError(f"{self.name}_workspace_size: missing scalar(s) {', '.join(missing)}")
        return self._query_workspace(dict(zip((a.name for a in args), values)))

    def _query_workspace(self, scalars: Mapping[str, Any]) -> int:
        memo = tuple(scalars.values())
        if memo not in self._workspace_sizes:
            size = ctypes.c_size_t(0)
            call = []
            for a in self.abi.args:
                if a.kind == "scalar":
                    call.append(a.convert_scalar(scalars[a.name]))
                elif a.kind == "workspace_size":
                    call.append(ctypes.byref(size))
                else:
                    call.append(None)
            rc = self.load()(*call)
            if rc != 0:
                raise RuntimeError(f"{self.name} workspace query returned {rc}")
            self._workspace_sizes[memo] = size.value
        return self._workspace_sizes[memo]

    def __call__(self, *values: Any, workspace: Any = None, stream: Any = None) -> None:
        """Runs the kernel on ``values`` (its tensors and scalars in ABI order).

        Trailing scalars that a template fixed (M, N, K, batch) may be left out.
        ``workspace`` defaults to a buffer of the size the kernel asks for;
        ``stream`` to NULL, or torch's current stream for CUDA tensors.
        Raises RuntimeError when the kernel returns non-zero.
        """
        bound = self.abi.bind(values)
        tensors = [v for a, v in bound if a.kind == "tensor"]
        by_name = {a.name: v for a, v in bound}
        scalars = {a.name: v for a, v in bound if a.kind == "scalar"}
        # Every tensor is checked before anything runs, the workspace query included.
        addresses = {a.name: self._tensor_address(a, v, scalars)
                     for a, v in bound if a.kind == "tensor"}
        needed = self._query_workspace({a.name: v for a, v in bound if a.kind == "scalar"})
        ws_addr, ws_buffer = self._workspace(needed, workspace, tensors)  # alive until we return
        stream_handle = self._stream(stream, tensors)
        call: List[Any] = []
        for a in self.abi.args:
            if a.kind == "tensor":
                call.append(ctypes.c_void_p(addresses[a.name]))
            elif a.kind == "scalar":
                call.append(a.convert_scalar(by_name[a.name]))
            elif a.kind == "workspace":
                call.append(ctypes.c_void_p(ws_addr) if ws_addr else None)
            elif a.kind == "stream":
                call.append(ctypes.c_void_p(stream_handle) if stream_handle else None)
            else:  # workspace_size: NULL, this is a run, not a query
                call.append(None)
        rc = self.load()(*call)
        if rc != 0:
            raise RuntimeError(f"{self.name} returned {rc}")

    def _tensor_address(self, arg: Arg, v: Any, scalars: Mapping[str, Any]) -> int:
        """``v``'s address, once it is checked to be what the ABI says ``arg`` takes (dtype,
        device, sizes and strides: :func:`kforge.abi.check_tensor`); ValueError otherwise."""
        what = f"{self.name} argument {arg.binds or arg.name}"
        view = _view(v, what)
        check_tensor(what, arg, view, "cpu" if self.backend == "cpu" else "cuda", scalars)
        return view.address

    def _workspace(self, needed: int, given: Any, tensors: Sequence[Any]) -> Tuple[int, Any]:
        """The workspace's address (0: none) and the object that keeps it alive."""
        if given is not None:
            n = _nbytes(given)
            if n is not None and n < needed:
                raise ValueError(f"{self.name}: workspace of {n} bytes; the kernel needs {needed}")
            return _address(given, f"{self.name} workspace"), given
        if needed == 0:
            return 0, None
        if self.backend == "cpu":
            host = (ctypes.c_uint8 * needed)()
            return ctypes.addressof(host), host
        device = next((t for t in tensors if _torch_tensor(t)), None)
        if device is None:
            raise ValueError(f"{self.name} needs a {needed}-byte device workspace: pass "
                             f"workspace= (or torch tensors, to allocate it on their device)")
        import torch

        buf = torch.empty(needed, dtype=torch.uint8, device=device.device)
        return buf.data_ptr(), buf

    def _stream(self, stream: Any, tensors: Sequence[Any]) -> Optional[int]:
        if stream is not None:
            return int(getattr(stream, "cuda_stream", stream))
        if self.backend == "cpu":
            return None
        device = next((t for t in tensors if _torch_tensor(t) and t.is_cuda), None)
        if device is None:
            return None
        import torch

        return int(torch.cuda.current_stream(device.device).cuda_stream)
