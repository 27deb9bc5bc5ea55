"""What the tests share: a real ``kforge serve`` process, kernel sources, subprocesses.

The server is started as tests/integration/server_process.cpp starts it: port 0,
a temporary cache directory, and its address read from the first line it prints
on stdout (``listening on http://HOST:PORT``); nothing sleeps while it starts.
The binary is ``$KFORGE_BIN`` (ctest sets it), else ``<repo>/build/bin/kforge``.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Dict, Sequence

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent  # clients/python: what a subprocess needs on sys.path
REPO = HERE.parents[2]
START_TIMEOUT_S = 60.0

# The API.md example: y = 2 * x.
DOUBLE_SOURCE = r"""#include <cstddef>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, void* stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  for (int64_t i = 0; i < n; ++i) y[i] = 2 * x[i];
  return 0;
}
"""


def scaled_source(factor: int) -> str:
    """The example kernel with another factor: a distinct kernel, so a cold build."""
    return DOUBLE_SOURCE.replace("y[i] = 2 * x[i]", f"y[i] = {factor} * x[i]")


def slow_source(salt: int, loops: int = 20) -> str:
    """Keeps g++'s constant evaluator busy for about ``loops`` x 0.1 s (as service_test.cpp)."""
    return ("#include <cstddef>\n#include <cstdint>\n"
            "#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
            "constexpr uint64_t burn(uint64_t x) {\n"
            f"  for (int i = 0; i < {loops}; ++i)\n"
            "    for (int j = 0; j < 50000; ++j) x = x * 6364136223846793005ull + "
            "1442695040888963407ull;\n  return x;\n}\n"
            f"constexpr uint64_t kBurnt = burn({salt});\n"
            "extern \"C\" PT_EXPORT int KERNEL_NAME(float* y, size_t* workspace_size, "
            "uint8_t* workspace, void* stream) {\n"
            "  if (workspace_size) { *workspace_size = 0; return 0; }\n"
            "  y[0] = float(kBurnt & 0xff);\n  return 0;\n}\n")


def kforge_binary() -> Path:
    explicit = os.environ.get("KFORGE_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            pytest.fail(f"KFORGE_BIN={explicit} is not an executable")
        return Path(explicit)
    default = REPO / "build" / "bin" / "kforge"
    if not os.access(default, os.X_OK):
        pytest.skip(f"no kforge binary: build it ({default}) or set KFORGE_BIN")
    return default


class Server:
    """``kforge serve`` on a free port, with its cache and log under ``workdir``."""

    def __init__(self, workdir: Path, extra_args: Sequence[str] = ()) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "server.log"
        self.cache_dir = workdir / "server-cache"
        argv = [str(kforge_binary()), "serve", "--host", "127.0.0.1", "--port", "0",
                "--cache-dir", str(self.cache_dir), *extra_args]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log)
        stdout = self.proc.stdout
        assert stdout is not None
        self.url = self._read_address(stdout)
        # The rest of stdout (a greeting) is drained so the server never blocks on it.
        threading.Thread(target=stdout.read, daemon=True).start()

    def _read_address(self, stdout: IO[bytes]) -> str:
        line = b""
        with selectors.DefaultSelector() as sel:
            sel.register(stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n") and sel.select(START_TIMEOUT_S):
                c = os.read(stdout.fileno(), 1)
                if not c:
                    break
                line += c
        prefix = b"listening on "
        if not line.startswith(prefix):
            self.stop()
            raise RuntimeError(f"kforge serve did not start; got {line!r}; log:\n"
                               + self.log.read_text(errors="replace")[-4000:])
        return line[len(prefix):].strip().decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_python(code: str, env: Dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs ``code`` in a new interpreter that imports this checkout's kforge."""
    full_env = {**os.environ, **env, "PYTHONPATH": str(PACKAGE_ROOT)}
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def run_cli(*args: str, env: Dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m kforge ARGS`` in a new interpreter."""
    full_env = {**os.environ, **env, "PYTHONPATH": str(PACKAGE_ROOT)}
    return subprocess.run([sys.executable, "-m", "kforge", *args], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def write_request(path: Path, request: Dict) -> Path:
    path.write_text(json.dumps(request))
    return path

