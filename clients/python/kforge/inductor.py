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
            client: Optional[Client] = None) -> Hook:
    """Routes Inductor's CUDA and ROCm template compiles to the kforge at ``url``.

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
    return hook


def uninstall() -> None:
    """Gives Inductor its own compile back."""
    global _hook
    while _installed:
        p = _installed.pop()
        if p.original is None:
            delattr(p.cls, p.name)  # inherited again
        else:
            setattr(p.cls, p.name, p.original)
        if p.hook is not None:
            p.hook.close()  # its breaker's probe thread ends
    _hook = None


def stats() -> Optional[Stats]:
    """A snapshot of what the installed hook did so far (None when none is installed)."""
    return _hook.stats if _hook else None
