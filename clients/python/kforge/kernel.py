"""A compiled kernel: its manifest, its files in the local cache, and a ctypes call.

``Kernel(...)(x, y, n)`` calls the exported function as the manifest's ``abi``
says (see :mod:`kforge.abi`): tensors by address (numpy arrays, torch tensors,
anything with ``.data_ptr()``), scalars by C type, then the workspace, asked of
the kernel itself and allocated here unless given, and the stream.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .abi import Abi, Arg
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
        needed = self._query_workspace({a.name: v for a, v in bound if a.kind == "scalar"})
        ws_addr, ws_buffer = self._workspace(needed, workspace, tensors)  # alive until we return
        stream_handle = self._stream(stream, tensors)
        call: List[Any] = []
        for a in self.abi.args:
            if a.kind == "tensor":
                call.append(ctypes.c_void_p(self._tensor_address(a, by_name[a.name])))
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

    def _tensor_address(self, arg: Arg, v: Any) -> int:
        what = f"{self.name} argument {arg.binds or arg.name}"
        if _numpy_array(v):
            if self.backend != "cpu":
                raise TypeError(f"{what}: a numpy array is host memory; a {self.backend} "
                                f"kernel needs device memory")
            if not v.flags.c_contiguous:
                raise ValueError(f"{what}: the numpy array is not C-contiguous "
                                 f"(use numpy.ascontiguousarray)")
            if not arg.const and not v.flags.writeable:
                raise ValueError(f"{what}: the kernel writes it, but the array is read-only")
            self._check_dtype(what, arg, str(v.dtype))
        elif _torch_tensor(v):
            on_device = v.device.type != "cpu"
            if on_device != (self.backend != "cpu"):
                raise TypeError(f"{what}: a tensor on {v.device} cannot go to a "
                                f"{self.backend} kernel")
            self._check_dtype(what, arg, str(v.dtype).replace("torch.", ""))
        return _address(v, what)

    @staticmethod
    def _check_dtype(what: str, arg: Arg, dtype: str) -> None:
        if arg.dtype and dtype != arg.dtype:
            raise TypeError(f"{what}: the kernel takes {arg.dtype}, not {dtype}")

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
