"""A stand-in for torch 2.11's ``CUDACodeCache`` that locks exactly as it does (no torch here).

Read from ``torch/_inductor/codecache.py`` (``CUTLASSCodeCache.compile``, which ``CUDACodeCache``
inherits; ``ROCmCodeCache.compile`` locks the same way in one step):

- ``write(source, ext)`` gives ``(key, input_path)``; the key hashes the source, not the
  extension, so the ``.o`` and the ``.so`` of one source share one key and one lock file;
- ``compile(source, "so")`` first calls ``cls.compile(source, "o")`` -- through the class, so a
  patched ``compile`` is re-entered -- and only then takes the lock for the link;
- each step takes ``FileLock(<lock_dir>/<key>.lock, timeout=LOCK_TIMEOUT)``, a new lock object
  every time (``torch.utils._filelock.FileLock``, a ``filelock.FileLock``: not re-entrant across
  objects), checks whether the output exists, and runs the compiler if not.

:class:`FileLock` here is ``flock`` on a new file descriptor per acquisition, polled until a
timeout: a second acquisition waits even in the same process and thread, as filelock's does.
The "local compiler" writes the output and appends ``<pid> <ext> <key>`` to
``<root>/local-compiles.log``, so compiles in other processes are seen too.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

LOCK_TIMEOUT_S = 30.0  # torch: config.file_lock_timeout, 600 s


class LockTimeout(Exception):
    """filelock.Timeout."""


class FileLock:
    def __init__(self, path: Path, timeout: float = LOCK_TIMEOUT_S) -> None:
        self.path, self.timeout = Path(path), timeout
        self.fd: Optional[int] = None

    def __enter__(self) -> "FileLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise LockTimeout(f"{self.path} not acquired in {self.timeout} s") from None
                time.sleep(0.01)
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.fd is not None
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


class CompileError(Exception):
    """Stands for torch._inductor.exc.CUDACompileError(cmd, output)."""

    def __init__(self, cmd: List[str], output: str) -> None:
        super().__init__(f"C++ compile error\nCommand:\n{' '.join(cmd)}\nOutput:\n{output}")
        self.cmd, self.output = cmd, output


def code_cache(root: Path, suffix: str = "cu", compile_s: float = 0.02):
    """A fresh ``CUDACodeCache`` stand-in whose files and locks live under ``root`` (the same
    ``root`` in another process gives the same keys, paths and locks)."""
    root = Path(root)
    lock_dir = root / "locks"
    log_path = root / "local-compiles.log"

    def local_compiler(ext: str, key: str, output_path: str) -> None:
        time.sleep(compile_s)
        tmp = f"{output_path}.{os.getpid()}.{threading.get_ident()}.tmp"
        Path(tmp).write_bytes(f"local {ext}\n".encode())
        os.replace(tmp, output_path)
        with open(log_path, "a") as f:
            f.write(f"{os.getpid()} {ext} {key}\n")

    class CUTLASSCodeCache:
        _SOURCE_CODE_SUFFIX = suffix
        cache: Dict[str, str] = {}
        errors: Dict[str, str] = {}

        @classmethod
        def write(cls, source_code: str, dst_file_ext: str) -> Tuple[str, str]:
            key = "c" + hashlib.sha256(source_code.strip().encode()).hexdigest()[:51]
            path = root / key[1:3] / f"{key}.{suffix}"
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.write_text(source_code)
            return key, str(path)

        @classmethod
        def lock(cls, key: str) -> FileLock:
            return FileLock(lock_dir / f"{key}.lock")

        @classmethod
        def compile(cls, source_code: str, dst_file_ext: str, extra_args: Optional[List[str]] = None):
            if dst_file_ext == "so":
                cls.compile(source_code, "o", extra_args)  # through the class, as torch does
            key, input_path = cls.write(source_code, dst_file_ext)
            key_with_ext = key + dst_file_ext
            if key_with_ext not in cls.cache:
                with cls.lock(key):
                    output_path = input_path[: -len(suffix)] + dst_file_ext
                    if not os.path.exists(output_path):
                        local_compiler(dst_file_ext, key, output_path)
                    cls.cache[key_with_ext] = output_path
            return cls.cache[key_with_ext], key, input_path

        @classmethod
        def _record_compile_error(cls, error_str, key_with_ext, cmd_parts, input_path, output_path,
                                  binary_remote_cache=None):
            cls.errors[key_with_ext] = error_str

    class CUDACodeCache(CUTLASSCodeCache):  # compile() is inherited, as in torch
        pass

    return CUDACodeCache


def local_compiles(root: Path) -> List[Tuple[int, str, str]]:
    """Every local compile so far under ``root``: (pid, ext, key)."""
    path = Path(root) / "local-compiles.log"
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(int(pid), ext, key) for pid, ext, key in rows]
