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

When kforge cannot do a compile the hook falls back to Inductor's own compile
(``fallback=True``, the default) or raises (``fallback=False``), and it never waits long for
that: connections time out in ``connect_timeout`` seconds, a job whose progress (an event,
a keep-alive, any byte) stops for ``heartbeat`` seconds is given up, and after the first
failure a circuit breaker sends every compile straight to the local compiler, with no
network attempt, until a probe of ``GET /healthz`` finds the server again (:class:`Breaker`).
Falling back releases Inductor's file lock for that key first, and the original's nested
``compile(src, "o")`` goes straight to the original (a per-thread mark): nothing waits on a
lock the hook holds. ``uninstall()`` restores Inductor. ``stats()`` says what went where and
what it cost.

The torch-free part (:class:`Hook`) maps an Inductor command line to a kforge request and
writes the outputs; ``patch()`` installs it on any class with Inductor's codecache contract.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .cache import atomic_write
from .client import Client
from .errors import (CompileError, ConnectionFailed, Forbidden, IntegrityError, KforgeError, Stalled,
                     Unauthorized, Unavailable)
from .gemm import (AUTOTUNED, TOLERANCE, GemmKernels, Integration, KernelStats, Launch, Operand, Problem,
                   Unsupported, arch_for, dtype_name, fused_wins, problem, within_tolerance)

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
    "-Rpass-analysis=kernel-resource-usage",  # kforge's hipcc line always has it
)
_IGNORED_PREFIXES = (
    "-Xcompiler", "-L", "-Xlinker", "-t=", "-include", "-mllvm", "-amdgpu-", "-enable-post-misched",
    "--save-temps", "-fvisibility=", "-fno-strict-aliasing", "-W",
)


class UnsupportedCommand(ValueError):
    """An Inductor command line the hook cannot express as a kforge request."""


class RemoteCompileFailed(KforgeError):
    """``fallback=False`` and kforge could not do a compile: raised out of Inductor's autotuning
    (which would otherwise only log the choice's error), naming the server and the cause."""


@dataclass
class Stats:
    """What the hook did, and what it cost (seconds are wall time, summed over threads)."""

    remote: int = 0                 # compiles answered by kforge
    remote_miss: int = 0            # ... of which kforge compiled (the rest were hits or renames)
    remote_seconds: float = 0.0     # time in those requests
    local_hits: int = 0             # both outputs were already in Inductor's cache
    fallbacks: int = 0              # compiled by Inductor itself, for a reason in fallback_reasons
    fallback_seconds: float = 0.0   # time in those local compiles
    fallback_reasons: Dict[str, int] = field(default_factory=dict)
    lost_seconds: float = 0.0       # time in kforge requests that failed (then fell back or raised)
    breaker: str = "closed"         # "open": kforge is marked down, compiles do not try it
    breaker_openings: int = 0       # outages seen (each opens the breaker once)
    breaker_open_seconds: float = 0.0  # time it was open, the current opening included
    probes: int = 0                 # GET /healthz sent while it was open
    auth_errors: int = 0            # 401/403 answers (the first turns remote compiles off)
    rejected: int = 0               # other 4xx answers (a field the server refused)
    strict_errors: int = 0          # failures raised instead of falling back (fallback=False)
    errors: int = 0                 # compile errors reported by kforge (422: not a fallback)
    last_error: str = ""            # the last failure, with the server and the cause
    seconds: float = 0.0            # all time in kforge requests (remote + lost)
    by_cache: Dict[str, int] = field(default_factory=dict)


# Failures that say the server is down, hung or overloaded: they open the breaker.
_OUTAGE = ("unreachable", "stalled", "busy")


def _classify(e: BaseException) -> str:
    if isinstance(e, Stalled):
        return "stalled"
    if isinstance(e, ConnectionFailed):
        return "unreachable"
    if isinstance(e, Unavailable):
        return "busy"
    if isinstance(e, (Unauthorized, Forbidden)):
        return "auth"
    if isinstance(e, IntegrityError):
        return "integrity"
    if isinstance(e, UnsupportedCommand):
        return "unsupported"
    if isinstance(e, KforgeError):
        if e.status in (502, 504):  # a proxy in front of a server that is down or hung
            return "unreachable"
        if e.status is not None and 400 <= e.status < 500:
            return "rejected"
        return "server_error"
    if isinstance(e, OSError):
        return "local_io"  # placing the outputs, the local file cache
    return "client_error"  # an answer this client did not expect: a bug, logged, not fatal


class Breaker:
    """Marks the server down after a failure, so that compiles stop trying it.

    Closed: compiles go to kforge. :meth:`trip` opens it for a back-off (``base`` seconds,
    doubled at each failure without a remote success in between, at most ``cap``; at least a
    503's ``Retry-After``); while it is open :meth:`allow` is False and no compile touches the
    network. When the back-off ends, one background thread sends ``probe()`` (``GET /healthz``
    with a short timeout): an answer closes the breaker, a failure opens it again for the next
    back-off. Compiles never wait on a probe. :meth:`probe_now` ends the back-off at once.
    """

    def __init__(self, probe: Callable[[], Any], base: float = 1.0, cap: float = 60.0,
                 name: str = "kforge") -> None:
        self._probe = probe
        self.base, self.cap, self.name = base, max(cap, base), name
        self._cond = threading.Condition()
        self._open = False
        self._reason = ""
        self._until = 0.0
        self._opened_at = 0.0
        self._level = 0  # failures since the last remote success
        self._poke = False
        self._stopped = False
        self._thread: Optional[threading.Thread] = None
        self.openings = 0
        self.probes = 0
        self._closed_open_s = 0.0  # time open, over the openings that ended

    def allow(self) -> bool:
        with self._cond:
            return not self._open

    def describe(self) -> str:
        """Why it is open, since when and when the next probe goes (for errors and logs)."""
        with self._cond:
            now = time.monotonic()
            return (f"{self._reason} (marked down {now - self._opened_at:.1f} s ago, "
                    f"next probe in {max(0.0, self._until - now):.1f} s)")

    def trip(self, reason: str, retry_after: Optional[float] = None) -> Optional[float]:
        """Opens it; the back-off in seconds, or None when it was open already (another
        thread's request failed first: one outage is one opening)."""
        with self._cond:
            if self._open or self._stopped:
                return None
            now = time.monotonic()
            delay = self._next_delay(retry_after)
            self._open, self._reason, self._opened_at, self._until = True, reason, now, now + delay
            self.openings += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kforge-breaker", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return delay

    def success(self) -> None:
        """A remote compile worked: the next outage starts from the base back-off again."""
        with self._cond:
            self._level = 0

    def probe_now(self) -> None:
        """Ends the current back-off: the probe goes now (tests; an operator who knows)."""
        with self._cond:
            self._poke = True
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def counts(self) -> Tuple[str, int, float, int]:
        """(state, openings, seconds open so far, probes)."""
        with self._cond:
            now = time.monotonic()
            open_s = self._closed_open_s + (now - self._opened_at if self._open else 0.0)
            return ("open" if self._open else "closed"), self.openings, open_s, self.probes

    def _next_delay(self, retry_after: Optional[float] = None) -> float:
        delay = min(self.cap, self.base * 2.0 ** self._level)
        if retry_after is not None:
            delay = min(self.cap, max(delay, retry_after))
        self._level += 1
        return delay

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not (self._open and (self._poke or time.monotonic() >= self._until)):
                    self._cond.wait(max(0.0, self._until - time.monotonic()) if self._open else None)
                if self._stopped:
                    return
                self._poke = False
                self.probes += 1
            try:
                self._probe()
                error = None
            except Exception as e:  # noqa: BLE001 - any failure keeps it open
                error = e
            with self._cond:
                now = time.monotonic()
                if error is None:
                    self._open = False
                    self._closed_open_s += now - self._opened_at
                    down = now - self._opened_at
                else:
                    self._until = now + self._next_delay()
                    wait = self._until - now
            if error is None:
                log.warning("kforge: %s answers again after %.1f s marked down: compiles go to it "
                            "again", self.name, down)
            else:
                log.debug("kforge: probe of %s failed (%s); next in %.1f s", self.name, error, wait)


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

    The client's timeouts bound each request; ``backoff`` and ``backoff_cap`` are the
    :class:`Breaker`'s, ``probe_timeout`` its ``GET /healthz``'s timeout.
    """

    def __init__(self, client: Client, libraries: Dict[str, str], fallback: bool = True,
                 toolkit_dirs: Sequence[str] = (), backoff: float = 1.0, backoff_cap: float = 60.0,
                 probe_timeout: float = 2.0) -> None:
        self.client = client
        self.libraries = {name: os.path.realpath(path) for name, path in libraries.items() if path}
        self.fallback = fallback
        self.toolkit_dirs = [os.path.realpath(d) for d in toolkit_dirs if d]
        self._stats = Stats()
        self._lock = threading.Lock()
        self.breaker = Breaker(lambda: client.health(timeout=probe_timeout), backoff, backoff_cap,
                               name=client.url)
        self._auth_failure: Optional[str] = None  # a 401/403: remote compiles stay off
        self._strict_last = ""
        self._logged: set = set()

    @property
    def stats(self) -> Stats:
        """A snapshot of the counters, the breaker's included."""
        with self._lock:
            snap = copy.deepcopy(self._stats)
        snap.breaker, snap.breaker_openings, snap.breaker_open_seconds, snap.probes = self.breaker.counts()
        return snap

    def _count(self, **add: float) -> None:
        with self._lock:
            for name, n in add.items():
                setattr(self._stats, name, getattr(self._stats, name) + n)

    def _log_once(self, level: int, key: str, msg: str, *args: Any) -> None:
        with self._lock:
            if key in self._logged:
                level = logging.DEBUG
            self._logged.add(key)
        log.log(level, msg, *args)

    @property
    def _then(self) -> str:
        return "compiling locally" if self.fallback else "raising (fallback=False)"

    def blocked(self) -> Optional[Tuple[str, str]]:
        """Why no compile may try the server now ((reason, message)), or None."""
        if self._auth_failure is not None:
            return "auth", self._auth_failure
        if not self.breaker.allow():
            return "breaker_open", self.breaker.describe()
        return None

    def failed(self, e: BaseException, seconds: float) -> Tuple[str, str]:
        """Records a failed remote compile (``seconds`` lost to it) and acts on it: an outage
        opens the breaker, a refused token turns remote compiles off, each loudly. Returns
        (reason, message naming the server and the cause)."""
        reason = _classify(e)
        status = getattr(e, "status", None)
        cause = f"HTTP {status}: {e}" if status else str(e)
        message = f"kforge ({self.client.url}): {cause}"
        with self._lock:
            self._stats.lost_seconds += seconds
            self._stats.seconds += seconds
            self._stats.last_error = message
        if reason in _OUTAGE:
            delay = self.breaker.trip(message, getattr(e, "retry_after", None))
            if delay is not None:
                log.warning("%s; %s, and every compile after it for %.1f s, until a probe finds "
                            "the server again", message, self._then, delay)
        elif reason == "auth":
            self._count(auth_errors=1)
            with self._lock:
                first = self._auth_failure is None
                self._auth_failure = (f"{message} -- remote compiles are off until install() is "
                                      "called again with a token the server accepts")
            if first:
                log.error("%s. The token was refused: %s, and every later compile too, without "
                          "asking the server (fix token=/KFORGE_TOKEN and install() again)",
                          message, self._then)
        elif reason == "rejected":
            self._count(rejected=1)
            self._log_once(logging.ERROR, message, "%s: the server refused the request; %s", message, self._then)
        else:
            if reason == "client_error":
                message = f"kforge ({self.client.url}): {type(e).__name__}: {e}"
            self._log_once(logging.WARNING, message, "%s; %s", message, self._then)
        return reason, message

    def run_local(self, reason: str, original: Callable[[], Any]) -> Any:
        """Runs Inductor's own compile, marked on this thread so that the hook lets its nested
        calls (``so`` compiles ``o`` through ``cls.compile``) straight through."""
        with self._lock:
            self._stats.fallbacks += 1
            self._stats.fallback_reasons[reason] = self._stats.fallback_reasons.get(reason, 0) + 1
        log.debug("kforge: compiling locally (%s)", reason)
        _reentry.depth = getattr(_reentry, "depth", 0) + 1
        t0 = time.monotonic()
        try:
            return original()
        finally:
            _reentry.depth -= 1
            self._count(fallback_seconds=time.monotonic() - t0)

    def strict(self, message: str) -> None:
        """Counts a failure raised instead of falling back (see :func:`wrap_selector`)."""
        with self._lock:
            self._stats.strict_errors += 1
            self._strict_last = message

    def strict_count(self) -> int:
        with self._lock:
            return self._stats.strict_errors

    def strict_since(self, count: int) -> Optional[str]:
        """What to raise when failures were raised since ``strict_errors`` was ``count``."""
        with self._lock:
            n = self._stats.strict_errors - count
            if n <= 0:
                return None
            return (f"{n} compile(s) could not run on kforge and fallback=False: "
                    f"{self._strict_last}")

    def close(self) -> None:
        self.breaker.stop()

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
            elif a == "-Ofast":  # clang's -O3 -ffast-math
                opts["opt_level"] = "O3"
                opts["fast_math"] = True
            elif a in ("--use_fast_math", "-ffast-math"):
                opts["fast_math"] = True
            elif a in ("-fgpu-flush-denormals-to-zero", "-ftz=true"):  # Inductor's ROCm default
                opts["flush_denormals"] = True
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
        req = self.request_for(backend, source, command)
        t0 = time.monotonic()
        try:
            # As a job (202 at once), followed over its event stream: the client's heartbeat
            # window, not a long request timeout, bounds a server that stops answering.
            kernel = self.client.compile(source, backend=req.backend, arch=req.arch,
                                         options=req.options, export_name=req.export_name,
                                         wait=False, progress=False)
            files = {"so": kernel.path(), "o": kernel.object_path()}
        except CompileError:
            self._count(errors=1, seconds=time.monotonic() - t0, remote_seconds=time.monotonic() - t0)
            raise
        for ext, dst in outputs.items():
            _place(files[ext], dst)
        cache = kernel.manifest.get("cache", "hit")
        dt = time.monotonic() - t0
        with self._lock:
            self._stats.remote += 1
            self._stats.remote_miss += cache == "miss"
            self._stats.remote_seconds += dt
            self._stats.seconds += dt
            self._stats.by_cache[cache] = self._stats.by_cache.get(cache, 0) + 1
        self.breaker.success()
        return kernel.manifest


def _place(src: str, dst: str) -> None:
    """Copies ``src`` to ``dst`` atomically: a reader sees the whole file or none."""
    atomic_write(Path(dst), Path(src).read_bytes(), 0o755)


@dataclass
class _Patched:
    cls: Any
    original: Any  # the attribute as it was in cls.__dict__, or None: inherited
    name: str = "compile"
    hook: Optional[Hook] = None


_installed: List[_Patched] = []
_hook: Optional[Hook] = None
# Set on a thread while it runs Inductor's own compile for the hook: the original's nested
# calls to cls.compile (a "so" builds its "o" that way) go straight to the original.
_reentry = threading.local()


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

    The lock is held only around the remote build and the placing of its outputs; a fallback
    runs the original after releasing it, since the original takes the same lock itself (for
    CUDA: twice, "o" then "so", each a new lock object that would wait on ours).
    """
    # CUDACodeCache inherits compile() from CUTLASSCodeCache: find the one that applies.
    owner = next(k for k in cls.__mro__ if "compile" in k.__dict__)
    found = owner.__dict__["compile"]
    original_fn = found.__func__ if isinstance(found, classmethod) else found
    original = cls.__dict__.get("compile")

    def compile(cls_, source_code: str, dst_file_ext: str, extra_args: Optional[List[str]] = None):
        if getattr(_reentry, "depth", 0) or dst_file_ext not in ("o", "so") or extra_args:
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
            hook._count(local_hits=1)
            return want[dst_file_ext], key, input_path
        why = hook.blocked()  # the breaker is open, or the token was refused: no network
        if why is None:
            with lock(key) if lock else _NullLock():
                if all(os.path.exists(p) for p in want.values()):
                    return want[dst_file_ext], key, input_path
                why = hook.blocked()  # another thread's request may have failed meanwhile
                if why is None:
                    cmd = command([input_path], want[dst_file_ext], dst_file_ext, None)
                    t0 = time.monotonic()
                    try:
                        hook.build(backend, source_code, cmd, want)
                        return want[dst_file_ext], key, input_path
                    except CompileError as e:
                        argv, output = e.argv or ["kforge"], e.log or str(e)
                        record = getattr(cls_, "_record_compile_error", None)
                        if record is not None:  # as Inductor does: its subprocesses see the error too
                            record(output, key + dst_file_ext, argv, input_path, want[dst_file_ext])
                        raise compile_error(argv, output) from e
                    except Exception as e:  # noqa: BLE001 - whatever kforge did, Inductor goes on
                        why = hook.failed(e, time.monotonic() - t0)
        # The file lock is released here: the local compile below takes it itself.
        reason, message = why
        if not hook.fallback:
            hook.strict(message)
            raise compile_error(["kforge", hook.client.url], message)
        return hook.run_local(reason, lambda: original_fn(cls_, source_code, dst_file_ext, extra_args))

    setattr(cls, "compile", classmethod(compile))
    _installed.append(_Patched(cls, original, "compile", hook))


class _NullLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def wrap_selector(cls: Any, hook: Hook) -> None:
    """For ``fallback=False``: makes ``cls.__call__`` (Inductor's ``AlgorithmSelectorCache``,
    which autotunes one op) raise :class:`RemoteCompileFailed` when a compile it asked for
    could not run on kforge. Inductor turns a choice's compile exception into a log line and
    an infinite time (then ``NoValidChoicesError``, or a silent ATen pick); this way the
    cause reaches the caller of ``torch.compile``."""
    original = cls.__dict__.get("__call__")
    call = cls.__call__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        before = hook.strict_count()
        try:
            result = call(self, *args, **kwargs)
        except Exception as e:
            failure = hook.strict_since(before)
            if failure:
                raise RemoteCompileFailed(failure) from e
            raise
        failure = hook.strict_since(before)
        if failure:
            raise RemoteCompileFailed(failure)
        return result

    setattr(cls, "__call__", __call__)
    _installed.append(_Patched(cls, original, "__call__", hook))


def toolkit_dirs(rocm_home: Optional[str], torch_rocm_home: Optional[str],
                 torch_cuda_home: Optional[str]) -> List[str]:
    """The include directories of the toolkits Inductor compiles against, found as Inductor finds
    them: ``config.rocm.rocm_home``, else torch's ROCM_HOME (``$ROCM_HOME``, ``$ROCM_PATH``, or
    two levels above ``hipcc``: ``/usr`` for Debian's ROCm, whose Inductor command then has
    ``-I/usr/include``), and CUDA's. The server's compiler has its own, so an ``-I`` of one of
    these travels as nothing."""
    homes = [rocm_home or torch_rocm_home or "", "/opt/rocm", os.environ.get("CUDA_HOME", ""),
             torch_cuda_home or "", "/usr/local/cuda"]
    seen: List[str] = []
    for home in homes:
        if home and os.path.join(home, "include") not in seen:
            seen.append(os.path.join(home, "include"))
    return seen


def install(url: Optional[str] = None, *, token: Optional[str] = None, fallback: bool = True,
            libraries: Optional[Dict[str, str]] = None, heartbeat: float = 30.0,
            connect_timeout: float = 2.0, backoff: float = 1.0, backoff_cap: float = 60.0,
            client: Optional[Client] = None, kernels: bool = False, kernel_tuning: str = "autotune",
            kernel_benchmark: Optional[Dict[str, Any]] = None, fuse_epilogues: bool = True,
            fused_margin: float = 0.0) -> Hook:
    """Routes Inductor's CUDA and ROCm template compiles to the kforge at ``url``.

    ``kernels=True`` also makes kforge's own gemm a choice wherever Inductor autotunes a
    matmul kforge takes (``mm``, ``addmm``, ``bmm``; CUDA float16/bfloat16), and with
    ``fuse_epilogues`` replaces a matmul + bias + relu/gelu/silu by kforge's fused kernel where
    that kernel beats ATen's ways of doing the same (``fused_margin``: by at least that
    fraction). ``kernel_tuning``: ``"autotune"`` (the server's ranking of its default choices)
    or ``"default"`` (the template's default parameters); ``kernel_benchmark`` the autotune's
    ``benchmark`` object. See :func:`kernel_stats`.

    ``libraries`` defaults to ``{"cutlass": config.cutlass.cutlass_dir, "ck": config.rocm.ck_dir}``
    (the names the server's ``--library`` flags must use). ``heartbeat``: a compile whose
    progress stops that long is given up (keep it above the server's 15 s keep-alive);
    ``connect_timeout`` bounds each connection and the breaker's probe; ``backoff`` and
    ``backoff_cap`` are the breaker's. ``client`` replaces the one built from these (used as
    given: its retries, timeouts). Raises ``RuntimeError`` for a torch whose codecache this
    hook was not checked against.
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
    from torch.utils import cpp_extension
    toolkit = toolkit_dirs(getattr(config.rocm, "rocm_home", None), getattr(cpp_extension, "ROCM_HOME", None),
                           getattr(cpp_extension, "CUDA_HOME", None))
    if heartbeat <= 15:
        log.warning("kforge: heartbeat=%g s is not above the server's 15 s keep-alive: a compile "
                    "that long without a state change will be given up", heartbeat)
    # No retries: the breaker is the retry, once per outage rather than per compile.
    client = client or Client(url, token=token, timeout=heartbeat, connect_timeout=connect_timeout,
                              retries=0, heartbeat=heartbeat)
    hook = Hook(client, libraries, fallback, toolkit, backoff=backoff, backoff_cap=backoff_cap,
                probe_timeout=connect_timeout)
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
    if not fallback:
        from torch._inductor import select_algorithm
        wrap_selector(select_algorithm.AlgorithmSelectorCache, hook)
    _hook = hook
    if kernels:
        try:
            _install_kernels(hook, kernel_tuning, kernel_benchmark, fuse_epilogues, fused_margin)
        except BaseException:
            uninstall()
            raise
    return hook


def uninstall() -> None:
    """Gives Inductor its own compile back."""
    global _hook, _integration
    while _installed:
        p = _installed.pop()
        if p.name == "":  # a restore step of install(kernels=True)
            p.original()
        elif p.original is None:
            delattr(p.cls, p.name)  # inherited again
        else:
            setattr(p.cls, p.name, p.original)
        if p.hook is not None:
            p.hook.close()  # its breaker's probe thread ends
    _hook = None
    _integration = None  # no new kforge choices; graphs compiled with them still run (_runtime)


def stats() -> Optional[Stats]:
    """A snapshot of what the installed hook did so far (None when none is installed)."""
    return _hook.stats if _hook else None


# --- kforge's own gemm as a choice of Inductor's matmul autotuning (install(kernels=True)) ---
#
# The route (clients/python/README.md says why): a wrapper around `autotune_select_algorithm`
# as torch._inductor.kernel.mm and .bmm call it -- the one place where tuned_mm, tuned_addmm and
# tuned_bmm hand over the op's name, its choices, its input nodes and the output layout -- adds
# an ExternKernelChoice ("kforge_gemm") bound with the kernel's key; the generated code calls
# extern_kernels.kforge_gemm(..., out=buf, kernel=<key>, form=, act=, strides=). A post-grad
# CustomGraphPass replaces matmul + bias + activation by the custom op kforge::gemm where
# kforge's fused kernel is faster than ATen's ways of doing the same. Both names are registered
# by install() in every process, so a graph from the FX graph cache finds them.

_integration: Optional[Integration] = None  # offers choices; None after uninstall()
_runtime: Optional[Integration] = None      # runs the kernels of compiled graphs (kept after uninstall)
_extern: List[Any] = []                     # the ExternKernelChoice: one per process
_op_defined: List[bool] = []


def kforge_gemm(*args: Any, out: Any, kernel: str, form: str, act: str = "", strides: str = "") -> None:
    """What Inductor's generated code calls (``extern_kernels.kforge_gemm``): kforge kernel
    ``kernel`` on ``args`` (Inductor's order for ``form``) into ``out``, on torch's current stream."""
    if _runtime is None:
        raise RuntimeError("kforge_gemm: call kforge.inductor.install(url, kernels=True) in this process first: "
                           "the graph (from Inductor's FX graph cache?) calls kforge kernels")
    _runtime.run(*args, out=out, kernel=kernel, form=form, act=act, strides=strides)


def kernel_stats() -> Optional[KernelStats]:
    """A snapshot of what ``install(kernels=True)`` did (None without it)."""
    return copy.deepcopy(_runtime.stats) if _runtime is not None else None


def _extern_choice() -> Any:
    if not _extern:
        from torch._inductor.select_algorithm import ExternKernelChoice
        _extern.append(ExternKernelChoice(kforge_gemm, None, name="kforge_gemm", has_out_variant=True))
    return _extern[0]


_ACTS: Dict[str, Callable[[Any], Any]] = {}


def _aten(form: str, act: str, args: Sequence[Any]) -> Any:
    """ATen's result of a form: the reference kforge is checked against and the fallback."""
    import torch
    import torch.nn.functional as F

    if not _ACTS:
        _ACTS.update(relu=torch.relu, gelu=F.gelu, silu=F.silu,
                     gelu_tanh=lambda x: F.gelu(x, approximate="tanh"))
    if form == "mm":
        return torch.mm(*args)
    if form == "bmm":
        return torch.bmm(*args)
    y = torch.addmm(*args)
    return _ACTS[act](y) if form == "addmm_act" else y


def _fallback(form: str, act: str, args: Sequence[Any], out: Any) -> None:
    out.copy_(_aten(form, act, args))


def _stream_of(out: Any) -> int:
    import torch
    return int(torch.cuda.current_stream(out.device).cuda_stream)


def _alloc(nbytes: int, out: Any) -> Any:
    import torch
    return torch.empty(nbytes, dtype=torch.uint8, device=out.device)


def _arch_of(layout: Any) -> str:
    import torch
    try:
        return arch_for(torch.cuda.get_device_capability(layout.device))
    except (RuntimeError, AssertionError, ValueError) as e:
        if isinstance(e, Unsupported):
            raise
        raise Unsupported("device", f"{layout.device}: {e}") from None


def _random(op: Operand, device: Any, gen: Any) -> Any:
    """A tensor of ``op``'s sizes and strides (stride 0 included) over normal values."""
    import torch
    numel = 1 + sum((s - 1) * st for s, st in zip(op.sizes, op.strides))
    base = torch.randn(numel, dtype=getattr(torch, op.dtype), device=device, generator=gen)
    return base.as_strided(op.sizes, op.strides)


def _problem_tensors(prob: Problem) -> Tuple[List[Any], Any]:
    import torch
    device = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(device=device).manual_seed(0)  # the user's RNG stream is not touched
    args = [_random(op, device, gen) for op in prob.args]
    out = torch.empty_strided(prob.out.sizes, prob.out.strides, dtype=getattr(torch, prob.out.dtype), device=device)
    return args, out


def _real_tensors() -> Any:
    """Real tensors inside Inductor's compile, whatever fake mode is active, and no autograd."""
    import contextlib
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    stack = contextlib.ExitStack()
    stack.enter_context(unset_fake_temporarily())
    stack.enter_context(torch.no_grad())
    return stack


def _verify(prob: Problem, launch: Launch) -> None:
    """Runs the kernel and ATen on the same random inputs; Unsupported when they disagree."""
    import torch
    with _real_tensors():
        args, out = _problem_tensors(prob)
        launch(args, out, _stream_of(out), lambda n: _alloc(n, out))
        ref = _aten(prob.form, prob.act, args)
        err = (out.float() - ref.float()).abs().max().item()
        scale = ref.float().abs().max().item()
        torch.cuda.synchronize()
    if not within_tolerance(err, scale, prob.out.dtype):
        raise Unsupported("verify", f"{launch.kernel.name} differs from ATen's {prob.form}{'+' + prob.act if prob.act else ''}"
                          f" by {err:.3g} (largest output {scale:.3g}, tolerance {TOLERANCE[prob.out.dtype]:.3g} of it)")


def _bench_ms(fn: Callable[[], Any]) -> float:
    """Inductor's own GPU timing of ``fn`` (CUDA events, its warm-up and repeats)."""
    try:
        from torch._inductor.runtime.benchmarking import benchmarker
    except ImportError:  # pragma: no cover - every torch this module supports has it
        benchmarker = None
    if benchmarker is not None:
        return float(benchmarker.benchmark_gpu(fn))
    import torch
    for _ in range(3):
        fn()
    times = []
    for _ in range(25):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def _time_fused(prob: Problem, launch: Launch) -> Dict[str, float]:
    """The fused kernel against ATen's ways of doing the same work: addmm (cuBLASLt's bias
    epilogue) + the activation's kernel (what Inductor's ATen choice + its pointwise kernel
    costs), and cuBLASLt's own bias + relu/gelu-tanh epilogue (torch._addmm_activation)."""
    import torch
    with _real_tensors():
        args, out = _problem_tensors(prob)
        bias, a, b = args
        fns: Dict[str, Callable[[], Any]] = {
            "kforge": lambda: launch(args, out, _stream_of(out), lambda n: _alloc(n, out)),
            "aten": lambda: _aten("addmm_act", prob.act, args)}
        if prob.act in ("relu", "gelu_tanh"):
            fns["cublaslt"] = lambda: torch._addmm_activation(bias, a, b, use_gelu=prob.act == "gelu_tanh")
        return {name: _bench_ms(fn) for name, fn in fns.items()}


def _define_op() -> None:
    """``kforge::gemm(Tensor[] args, str kernel, str form, str act, str strides) -> Tensor``: a
    kforge kernel as an op, for the FX graph (Inductor calls it as a fallback kernel)."""
    if _op_defined:
        return
    import torch

    def out_like(args: List[Any], form: str) -> Any:
        a, b = (args[1], args[2]) if form in ("addmm", "addmm_act") else (args[0], args[1])
        return a.new_empty((*a.shape[:-1], b.shape[-1]))

    def impl(args: List[Any], kernel: str, form: str, act: str, strides: str) -> Any:
        out = out_like(args, form)
        kforge_gemm(*args, out=out, kernel=kernel, form=form, act=act, strides=strides)
        return out

    def fake(args: List[Any], kernel: str, form: str, act: str, strides: str) -> Any:
        return out_like(args, form)

    op = torch.library.custom_op("kforge::gemm", impl, mutates_args=(),
                                 schema="(Tensor[] args, str kernel, str form, str act, str strides) -> Tensor")
    op.register_fake(fake)
    _op_defined.append(True)


def _meta_operand(node: Any) -> Operand:
    import torch
    val = node.meta.get("val") if hasattr(node, "meta") else None
    if not isinstance(val, torch.Tensor):
        raise Unsupported("operand", f"{node} has no tensor value")
    if val.device.type != "cuda":
        raise Unsupported("device", f"{val.device}: kforge's gemm runs on CUDA")
    for v in (*val.shape, *val.stride()):
        if isinstance(v, torch.SymInt):
            raise Unsupported("dynamic", f"{node}: sizes {list(val.shape)} are not static")
    return Operand(tuple(int(s) for s in val.shape), tuple(int(s) for s in val.stride()), dtype_name(val.dtype))


def _match_fused(node: Any) -> Optional[Tuple[str, Any, Any, Any, List[Any]]]:
    """(activation, bias, A, B, the nodes the fused op makes dead) where ``node`` is an
    activation of ``addmm(bias, A, B)``, of ``mm(A, B) + bias``, or ``_addmm_activation``."""
    import torch
    from torch.fx import Node
    aten = torch.ops.aten

    def call(n: Any, target: Any) -> bool:
        return isinstance(n, Node) and n.op == "call_function" and _same_op(n.target, target)

    def arg(n: Any, i: int, name: str, default: Any) -> Any:
        return n.args[i] if len(n.args) > i else n.kwargs.get(name, default)

    act, x, extra = None, None, []
    if call(node, aten.gelu.default):
        approx = arg(node, 1, "approximate", "none")
        act, x = {"none": "gelu", "tanh": "gelu_tanh"}.get(approx), node.args[0]
    elif call(node, aten.relu.default):
        act, x = "relu", node.args[0]
    elif call(node, aten.silu.default):
        act, x = "silu", node.args[0]
    elif call(node, aten.mul.Tensor) and len(node.args) == 2:
        p, q = node.args
        for x_, s_ in ((p, q), (q, p)):
            if call(s_, aten.sigmoid.default) and s_.args[0] is x_ and len(s_.users) == 1:
                act, x, extra = "silu", x_, [s_]
                break
    elif call(node, aten._addmm_activation.default):
        if arg(node, 3, "beta", 1) == 1 and arg(node, 4, "alpha", 1) == 1:
            return ("gelu_tanh" if arg(node, 5, "use_gelu", False) else "relu"), node.args[0], node.args[1], node.args[2], []
        return None
    else:
        found = _decomposed_activation(node)
        if found is not None:
            act, x, extra = found
    # Nothing else may use the matmul's result (a decomposed gelu uses it several times).
    if act is None or not isinstance(x, Node) or not set(x.users) <= {node, *extra}:
        return None
    if call(x, aten.addmm.default) and arg(x, 3, "beta", 1) == 1 and arg(x, 4, "alpha", 1) == 1:
        return act, x.args[0], x.args[1], x.args[2], extra + [x]
    if call(x, aten.add.Tensor) and len(x.args) == 2 and x.kwargs.get("alpha", 1) == 1:
        for mm, bias in (x.args, x.args[::-1]):
            if call(mm, aten.mm.default) and len(mm.users) == 1 and isinstance(bias, Node):
                return act, bias, mm.args[0], mm.args[1], extra + [x, mm]
    return None


def _same_op(a: Any, b: Any) -> bool:
    """Whether two aten ops are the same, by name: an OpOverload compares by identity, and the
    graph the post-grad passes get holds copies of them (every node's ``meta["original_aten"]``
    its own: on the H100 with torch 2.11 none was ``torch.ops.aten.gelu.default``, so no
    decomposed gelu was ever found, and no epilogue fused)."""
    return a is b or (a is not None and b is not None and str(a) == str(b))


def _decomposed_activation(node: Any) -> Optional[Tuple[str, Any, List[Any]]]:
    """(activation, its input, the other nodes it is made of) where ``node`` is the last node of
    a gelu, relu or silu that Inductor decomposed before the post-grad passes (mul, add, tanh or
    erf, pow, convert_element_type...): those nodes keep the op they came from in
    ``meta["original_aten"]``. None unless the group has one input and nothing outside it uses
    what it computes but through ``node``."""
    import torch
    aten = torch.ops.aten
    meta = getattr(node, "meta", None)
    origin = meta.get("original_aten") if isinstance(meta, dict) else None
    names = {str(aten.gelu.default): "gelu", str(aten.relu.default): "relu", str(aten.silu.default): "silu"}
    if origin is None or str(origin) not in names or any(_same_op(getattr(u, "meta", {}).get("original_aten"), origin) for u in node.users):
        return None
    group, inputs, todo = set(), set(), [node]
    while todo:
        n = todo.pop()
        if n in group:
            continue
        group.add(n)
        for a in n.all_input_nodes:
            if _same_op(a.meta.get("original_aten"), origin):
                todo.append(a)
            else:
                inputs.add(a)
    if len(inputs) != 1 or len(group) > 32:
        return None
    for n in group - {node}:
        if not set(n.users) <= group:
            return None
    act = names[str(origin)]
    if act == "gelu" and any(_same_op(getattr(n, "target", None), aten.tanh.default) for n in group):
        act = "gelu_tanh"
    return act, next(iter(inputs)), sorted(group - {node}, key=lambda n: n.name)


def _fuse_epilogues(graph: Any, integ: Integration, margin: float) -> None:
    """Replaces each matmul + bias + activation that kforge's fused kernel does faster than
    ATen's ways (checked against ATen first) by ``kforge::gemm``; leaves the others alone."""
    import torch
    for node in list(graph.nodes):
        if node.op != "call_function" or getattr(node, "_erased", False):
            continue
        found = _match_fused(node)
        if found is None:
            continue
        act, bias, a, b, dead = found
        try:
            out = _meta_operand(node)
            prob = problem("addmm_act", [_meta_operand(bias), _meta_operand(a), _meta_operand(b)], out,
                           arch=arch_for(torch.cuda.get_device_capability(node.meta["val"].device)), act=act)
            if integ.hook is not None and integ.hook.blocked() is not None:
                raise Unsupported("server_down", integ.hook.blocked()[1])
            kernel, launch = integ.prepare(prob)
            times = _time_fused(prob, launch)
        except Unsupported as e:
            integ._count(integ.stats.refused, e.reason)
            log.debug("kforge: %s left to Inductor: %s", node, e)
            continue
        except (KforgeError, OSError, RuntimeError) as e:
            integ._server_failed(str(node), e)
            continue
        others = {k: v for k, v in times.items() if k != "kforge"}
        wins = fused_wins(times["kforge"], others, margin)
        integ.stats.fused_timings.append({"shape": [out.sizes[0], out.sizes[1], prob.a.sizes[1]], "dtype": out.dtype,
                                          "act": act, "ms": times, "kforge": wins, "kernel": kernel.key})
        if not wins:
            integ.stats.fused_kept += 1
            continue
        with graph.inserting_before(node):
            new = graph.call_function(torch.ops.kforge.gemm.default,
                                      ([bias, a, b], kernel.key, "addmm_act", act, prob.signature))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        pending, progress = [node, *dead], True
        while pending and progress:  # users before what they use, whatever the list's order
            progress = False
            for d in [d for d in pending if not d.users]:
                graph.erase_node(d)
                pending.remove(d)
                progress = True
        integ.stats.fused += 1
        integ._count(integ.stats.offered, "addmm_act")


def _source_digest() -> str:
    import hashlib
    h = hashlib.sha256()
    for name in ("inductor.py", "gemm.py"):
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:16]


def _fuse_pass(previous: Any, margin: float) -> Any:
    """The post-grad CustomGraphPass (its uuid keeps Inductor's FX graph cache on). The class is
    made once and published as ``kforge.inductor.KforgeFuseEpilogues``, so the pass pickles by
    reference wherever Inductor copies its config."""
    cls = globals().get("KforgeFuseEpilogues")
    if cls is None:
        from torch._inductor.custom_graph_pass import CustomGraphPass

        class KforgeFuseEpilogues(CustomGraphPass):
            def __init__(self, previous: Any, margin: float) -> None:
                self.previous, self.margin = previous, margin

            def __call__(self, graph: Any) -> None:
                if self.previous is not None:
                    self.previous(graph)
                if _integration is None:
                    return
                try:
                    _fuse_epilogues(graph, _integration, self.margin)
                except Exception as e:  # noqa: BLE001 - a failed pass never fails the compile
                    log.warning("kforge: the epilogue pass stopped (%s: %s); the rest of the graph is Inductor's",
                                type(e).__name__, e)

            def uuid(self) -> Any:
                prev = self.previous
                prev_id = getattr(prev, "uuid", lambda: repr(prev))() if prev is not None else None
                return f"kforge-fuse-epilogues-{_source_digest()}-{self.margin}-{prev_id}"

        KforgeFuseEpilogues.__module__ = __name__
        KforgeFuseEpilogues.__qualname__ = "KforgeFuseEpilogues"
        globals()["KforgeFuseEpilogues"] = cls = KforgeFuseEpilogues
    return cls(previous, margin)


def _install_kernels(hook: Hook, tuning: str, benchmark: Optional[Dict[str, Any]], fuse: bool,
                     margin: float) -> None:
    global _integration, _runtime
    from torch._inductor import config
    from torch._inductor.kernel import bmm as bmm_module, mm as mm_module

    _define_op()
    choice = _extern_choice()
    integ = Integration(GemmKernels(hook.client, tuning=tuning, benchmark=benchmark), arch_of=_arch_of,
                        verify=_verify, stream_of=_stream_of, alloc=_alloc, fallback=_fallback, hook=hook)
    _integration = _runtime = integ

    def cpp_wrapper() -> bool:
        from torch._inductor.virtualized import V
        graph = V.graph
        return bool(getattr(graph, "cpp_wrapper", False) or getattr(graph, "aot_mode", False))

    for module in (mm_module, bmm_module):
        original = module.__dict__.get("autotune_select_algorithm")
        if original is None:
            if module is mm_module:
                raise RuntimeError(f"{module.__name__} has no autotune_select_algorithm: not the torch 2.11 "
                                   "Inductor kforge.inductor was written against")
            log.warning("kforge: %s has no autotune_select_algorithm; its matmuls get no kforge choice",
                        module.__name__)
            continue

        def wrapped(name: str, choices: Any, input_nodes: Any, layout: Any, *args: Any,
                    _original: Any = original, **kwargs: Any) -> Any:
            integ_now = _integration
            if integ_now is not None and name in AUTOTUNED and not cpp_wrapper():
                choices = integ_now.offer(name, choices, input_nodes, layout, choice)
            return _original(name, choices, input_nodes, layout, *args, **kwargs)

        module.autotune_select_algorithm = wrapped
        _installed.append(_Patched(module, original, "autotune_select_algorithm", None))
    if fuse:
        previous = config.post_grad_custom_post_pass
        config.post_grad_custom_post_pass = _fuse_pass(previous, margin)
        _installed.append(_Patched(None, lambda: setattr(config, "post_grad_custom_post_pass", previous), "", None))
