"""Make PyTorch Inductor compile its CUDA (CUTLASS) and ROCm (CK) template kernels on kforge.

    import kforge.inductor
    kforge.inductor.install("http://kforge:8080")
    torch.compile(model, mode="max-autotune")

``install()`` replaces ``CUDACodeCache.compile`` and ``ROCmCodeCache.compile`` in
``torch._inductor.codecache``. Inductor calls them (from thread pools, several at once) with a
rendered source and the extension it wants; the replacement sends the source to kforge in
source mode — the exported ``cutlass_<hash>`` name as ``export_name``, Inductor's ``-D``
switches as ``options.defines``, its ``-I<cutlass_dir>/...`` as ``options.includes`` of the
server's header library — and puts the ``.o`` *and* the ``.so`` where Inductor's own
``write()`` says they go. Benchmark subprocesses (``autotune_in_subproc``) recompute the same
paths, find both files and run no compiler. A compile error is raised as Inductor's
``CUDACompileError``, so the choice is timed as infinite exactly as after a local failure.

When kforge cannot be reached the hook falls back to Inductor's own compile (``fallback=True``,
the default) or raises ``CUDACompileError`` (``fallback=False``). ``uninstall()`` restores
Inductor. ``stats()`` counts what went where.

The torch-free part (:class:`Hook`) maps an Inductor command line to a kforge request and
writes the outputs; ``patch()`` installs it on any class with Inductor's codecache contract.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .cache import atomic_write
from .client import Client
from .errors import CompileError, KforgeError

log = logging.getLogger("kforge.inductor")

#: torch versions whose codecache contract this hook was checked against (major.minor).
SUPPORTED_TORCH = ("2.11",)

_EXPORT = re.compile(r"\bPT_EXPORT\s+int\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_OPT_LEVEL = re.compile(r"^-O([0-3s])$")

# Flags of Inductor's command lines that change nothing kforge does not already do itself:
# the language standard, PIC, warnings, symbol visibility (the exported function is
# PT_EXPORT either way), the link step, the host libraries' paths, and ROCm's LLVM tuning
# switches (kforge's hipcc line has none: they are dropped, not reproduced).
_IGNORED = (
    "-std=c++17", "--expt-relaxed-constexpr", "-w", "-c", "-shared", "-fPIC", "-fno-gpu-rdc",
    "-x", "hip", "-t=0", "-lcuda", "-lcudart", "-lamdhip64", "-lpthread", "-lstdc++",
)
_IGNORED_PREFIXES = (
    "-Xcompiler", "-L", "-Xlinker", "-t=", "-include", "-mllvm", "-amdgpu-", "-enable-post-misched",
    "--save-temps", "-fvisibility=", "-fno-strict-aliasing", "-W",
)


class UnsupportedCommand(ValueError):
    """An Inductor command line the hook cannot express as a kforge request."""


@dataclass
class Stats:
    remote: int = 0           # compiles answered by kforge
    remote_miss: int = 0      # ... of which kforge compiled (the rest were hits or renames)
    local_hits: int = 0       # both outputs were already in Inductor's cache
    fallbacks: int = 0        # compiled by Inductor itself (kforge unreachable or unsupported)
    errors: int = 0           # compile errors reported by kforge
    seconds: float = 0.0      # wall time spent in kforge requests
    by_cache: Dict[str, int] = field(default_factory=dict)


@dataclass
class Request:
    """What an Inductor compile becomes on kforge."""

    backend: str
    arch: List[str]
    export_name: str
    options: Dict[str, Any]


class Hook:
    """Maps Inductor compiles onto kforge requests and writes their outputs.

    ``libraries`` maps a library name on the server (``kforge serve --library NAME=PATH``) to
    the directory Inductor knows it by here (``config.cutlass.cutlass_dir``); an ``-I`` inside
    one becomes ``NAME/<relative dir>``. A ``-I`` anywhere else cannot travel: the compile
    is refused (and falls back) rather than silently built without it, except for the
    toolkit's own include directories, which the server's compiler has.
    """

    def __init__(self, client: Client, libraries: Dict[str, str], fallback: bool = True,
                 toolkit_dirs: Sequence[str] = ()) -> None:
        self.client = client
        self.libraries = {name: os.path.realpath(path) for name, path in libraries.items() if path}
        self.fallback = fallback
        self.toolkit_dirs = [os.path.realpath(d) for d in toolkit_dirs if d]
        self.stats = Stats()
        self._lock = threading.Lock()

    def request_for(self, backend: str, source: str, command: str) -> Request:
        """The kforge request for Inductor's ``command`` (the compile line it would run)."""
        names = _EXPORT.findall(source)
        if len(set(names)) != 1:
            raise UnsupportedCommand(f"the source exports {sorted(set(names)) or 'nothing'}; "
                                     "kforge needs exactly one PT_EXPORT int <name>(...)")
        opts: Dict[str, Any] = {"aot": True, "defines": {}, "includes": []}
        archs: List[str] = []
        args = shlex.split(command)[1:]  # argv[0] is the local compiler
        i = 0
        while i < len(args):
            a = args[i]
            i += 1
            if a.startswith("-gencode"):
                spec = a.split("=", 1)[1] if "=" in a else args[i]
                i += 0 if "=" in a else 1
                m = re.search(r"arch=compute_(\w+)", spec)
                if not m:
                    raise UnsupportedCommand(f"cannot read the arch of {a} {spec}")
                archs.append("sm_" + m.group(1))
            elif a.startswith("--offload-arch="):
                archs.append(a.split("=", 1)[1])
            elif a.startswith("-D"):
                name, _, value = a[2:].partition("=")
                opts["defines"][name] = value if value else None
            elif a.startswith("-I"):
                path = a[2:] or args[i]
                i += 0 if a[2:] else 1
                opts["includes"].extend(self._include(path))
            elif _OPT_LEVEL.match(a):
                opts["opt_level"] = a[1:]
            elif a in ("--use_fast_math", "-ffast-math"):
                opts["fast_math"] = True
            elif a in ("-lineinfo", "-g"):
                opts["debug_info"] = True
            elif a in ("-o", "-x", "-include", "-mllvm", "-Xlinker", "-Xcompiler") and i < len(args):
                i += 1  # a flag with a separate value that kforge does not need: the output
                # (kforge names its own), host compiler/linker/LLVM tuning, the HIP wrapper
                # header hipcc includes anyway
            elif a in _IGNORED or a.startswith(_IGNORED_PREFIXES):
                pass
            elif not a.startswith("-"):
                pass  # the input file(s)
            else:
                raise UnsupportedCommand(f"kforge has no equivalent of `{a}`")
        if not archs:
            raise UnsupportedCommand("the command names no GPU arch")
        if not opts["defines"]:
            del opts["defines"]
        if not opts["includes"]:
            del opts["includes"]
        return Request(backend, archs, names[0], opts)

    def _include(self, path: str) -> List[str]:
        real = os.path.realpath(path)
        for name, root in self.libraries.items():
            if real == root or real.startswith(root + os.sep):
                rel = os.path.relpath(real, root)
                return [name if rel == "." else f"{name}/{rel}"]
        if any(real == d or real.startswith(d + os.sep) for d in self.toolkit_dirs):
            return []  # the server's compiler brings its own toolkit headers
        raise UnsupportedCommand(f"-I{path} is in no library the server was told of "
                                 f"(libraries: {self.libraries})")

    def build(self, backend: str, source: str, command: str, outputs: Dict[str, str]) -> Dict[str, Any]:
        """Compiles ``source`` on kforge and writes ``outputs`` ({"o": path, "so": path}).

        Raises :class:`CompileError` for a compile error, :class:`KforgeError` when the
        service fails, :class:`UnsupportedCommand` when the command cannot be expressed.
        """
        import time

        req = self.request_for(backend, source, command)
        t0 = time.monotonic()
        try:
            kernel = self.client.compile(source, backend=req.backend, arch=req.arch,
                                         options=req.options, export_name=req.export_name)
        except CompileError:
            with self._lock:
                self.stats.errors += 1
            raise
        finally:
            with self._lock:
                self.stats.seconds += time.monotonic() - t0
        files = {"so": kernel.path(), "o": kernel.object_path()}
        for ext, dst in outputs.items():
            _place(files[ext], dst)
        cache = kernel.manifest.get("cache", "hit")
        with self._lock:
            self.stats.remote += 1
            self.stats.remote_miss += cache == "miss"
            self.stats.by_cache[cache] = self.stats.by_cache.get(cache, 0) + 1
        return kernel.manifest


def _place(src: str, dst: str) -> None:
    """Copies ``src`` to ``dst`` atomically: a reader sees the whole file or none."""
    atomic_write(Path(dst), Path(src).read_bytes(), 0o755)


@dataclass
class _Patched:
    cls: Any
    original: Any  # the classmethod object as it was in cls.__dict__, or None: inherited


_installed: List[_Patched] = []
_hook: Optional[Hook] = None


def patch(cls: Any, hook: Hook, backend: str, suffix: str,
          command: Callable[[List[str], str, str, Optional[List[str]]], str],
          compile_error: Callable[[List[str], str], Exception],
          lock: Optional[Callable[[str], Any]] = None, two_step: bool = True) -> None:
    """Replaces ``cls.compile`` (Inductor's ``compile(source_code, dst_file_ext, extra_args)``
    returning ``(output_path, key, input_path)``) with one that compiles on kforge.

    ``cls.write(source, ext)`` gives ``(key, input_path)``; outputs sit on the input's stem
    (``<stem>.o``, ``<stem>.so``). ``command(src_files, dst, ext, extra_args)`` is Inductor's
    compile line, ``compile_error(argv, output)`` its exception, ``lock(key)`` its
    cross-process file lock. With ``two_step`` (CUDA), a ``.so`` request also places the
    ``.o`` Inductor's subprocesses look for.
    """
    # CUDACodeCache inherits compile() from CUTLASSCodeCache: find the one that applies.
    owner = next(k for k in cls.__mro__ if "compile" in k.__dict__)
    found = owner.__dict__["compile"]
    original_fn = found.__func__ if isinstance(found, classmethod) else found
    original = cls.__dict__.get("compile")

    def compile(cls_, source_code: str, dst_file_ext: str, extra_args: Optional[List[str]] = None):
        if dst_file_ext not in ("o", "so") or extra_args:
            return original_fn(cls_, source_code, dst_file_ext, extra_args)
        key, input_path = cls_.write(source_code, dst_file_ext)
        stem = input_path[: -len(suffix)]
        want = {dst_file_ext: stem + dst_file_ext}
        if two_step:
            _, o_input = cls_.write(source_code, "o")
            want["o"] = o_input[: -len(suffix)] + "o"
            if dst_file_ext == "so":
                want["so"] = stem + "so"
        if all(os.path.exists(p) for p in want.values()):
            with hook._lock:
                hook.stats.local_hits += 1
            return want[dst_file_ext], key, input_path
        ctx = lock(key) if lock else _NullLock()
        with ctx:
            if all(os.path.exists(p) for p in want.values()):
                return want[dst_file_ext], key, input_path
            cmd = command([input_path], want[dst_file_ext], dst_file_ext, None)
            try:
                hook.build(backend, source_code, cmd, want)
            except CompileError as e:
                argv, output = e.argv or ["kforge"], e.log or str(e)
                record = getattr(cls_, "_record_compile_error", None)
                if record is not None:  # as Inductor does: its subprocesses see the error too
                    record(output, key + dst_file_ext, argv, input_path, want[dst_file_ext])
                raise compile_error(argv, output) from e
            except (KforgeError, UnsupportedCommand, OSError) as e:
                if not hook.fallback:
                    raise compile_error(["kforge", hook.client.url], f"kforge: {e}") from e
                log.warning("kforge: compiling %s locally: %s", input_path, e)
                with hook._lock:
                    hook.stats.fallbacks += 1
                return original_fn(cls_, source_code, dst_file_ext, extra_args)
        return want[dst_file_ext], key, input_path

    setattr(cls, "compile", classmethod(compile))
    _installed.append(_Patched(cls, original))


class _NullLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def install(url: Optional[str] = None, *, token: Optional[str] = None, fallback: bool = True,
            libraries: Optional[Dict[str, str]] = None, timeout: float = 1800.0,
            client: Optional[Client] = None) -> Hook:
    """Routes Inductor's CUDA and ROCm template compiles to the kforge at ``url``.

    ``libraries`` defaults to ``{"cutlass": config.cutlass.cutlass_dir, "ck": config.rocm.ck_dir}``
    (the names the server's ``--library`` flags must use). Raises ``RuntimeError`` for a
    torch whose codecache this hook was not checked against.
    """
    global _hook
    import torch
    from torch._inductor import codecache, config, exc

    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if version not in SUPPORTED_TORCH:
        raise RuntimeError(f"kforge.inductor supports torch {', '.join(SUPPORTED_TORCH)}; this is torch "
                           f"{torch.__version__}, whose Inductor codecache it was not checked against")
    if _installed:
        uninstall()
    if libraries is None:
        libraries = {"cutlass": getattr(getattr(config, "cutlass", None), "cutlass_dir", None)
                     or os.environ.get("TORCHINDUCTOR_CUTLASS_DIR", ""),
                     "ck": getattr(config.rocm, "ck_dir", None) or ""}
    toolkit = [os.path.join(p, "include") for p in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda",
                                                    getattr(config.rocm, "rocm_home", None) or "/opt/rocm")]
    hook = Hook(client or Client(url, token=token, timeout=timeout), libraries, fallback, toolkit)
    from torch.utils._filelock import FileLock

    def lock(key: str) -> Any:
        return FileLock(os.path.join(codecache.get_lock_dir(), key + ".lock"), timeout=codecache.LOCK_TIMEOUT)

    from torch._inductor.codegen.cuda import compile_utils
    patch(codecache.CUDACodeCache, hook, "cuda", codecache.CUDACodeCache._SOURCE_CODE_SUFFIX,
          compile_utils.cuda_compile_command, exc.CUDACompileError, lock, two_step=True)
    try:
        from torch._inductor.codegen.rocm.compile_command import rocm_compile_command
    except ImportError:  # a torch built without the ROCm codegen
        rocm_compile_command = None
    if rocm_compile_command is not None:
        patch(codecache.ROCmCodeCache, hook, "rocm", codecache.ROCmCodeCache._SOURCE_CODE_SUFFIX,
              rocm_compile_command, exc.CUDACompileError, lock, two_step=False)
    _hook = hook
    return hook


def uninstall() -> None:
    """Gives Inductor its own compile back."""
    global _hook
    while _installed:
        p = _installed.pop()
        if p.original is None:
            delattr(p.cls, "compile")  # inherited again
        else:
            setattr(p.cls, "compile", p.original)
    _hook = None


def stats() -> Optional[Stats]:
    """What the installed hook did so far (None when none is installed)."""
    return _hook.stats if _hook else None
