"""The Inductor hook never makes a compile wait on a kforge that is down, hung or slow (issue 37).

The hook is patched onto :mod:`torchlike`'s stand-in for torch 2.11's ``CUDACodeCache``, which
takes one ``flock`` per key and builds a ``.so`` by calling ``cls.compile(src, "o")`` first, as
torch does. Each compile runs under a deadline: a hang fails the test instead of hanging it.
The servers: a closed port, the real ``kforge serve`` (killed or stopped with SIGSTOP in the
middle of a slow compile, or started late), and a small stand-in for a 503, a 401, a 400 and
a job that takes longer than the heartbeat window but keeps sending keep-alives.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import signal
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

import kforge
import torchlike
from kforge import inductor
from support import HERE, Server, run_python, scaled_source, slow_source

HEARTBEAT_S = 2.0
DEADLINE_S = 5.0  # far below the stand-in's 30 s lock timeout: a deadlock fails here


def within(seconds: float, fn: Callable[..., Any], *args: Any) -> Tuple[Any, float]:
    """``fn(*args)`` in a thread: (its result, seconds taken); a test failure if it is still
    running after ``seconds`` (a deadlock or a hang), its exception if it raised."""
    box: Dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            box["error"] = e

    t0 = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} still running after {seconds} s: it hangs")
    if "error" in box:
        raise box["error"]
    return box.get("value"), time.monotonic() - t0


def source(n: int, slow: bool = False, loops: int = 20) -> str:
    """A distinct kernel exporting ``cutlass_<n>``, as Inductor's CUTLASS sources do."""
    text = slow_source(n, loops) if slow else scaled_source(n)
    return text.replace("KERNEL_NAME", f"cutlass_{n:08x}")


class CpuHook(inductor.Hook):
    """The hook with the command mapping left out: every compile is a cpu kernel with its
    .o (what matters here is what happens around the request, not its fields)."""

    def request_for(self, backend: str, source_code: str, command: str) -> inductor.Request:
        name = re.search(r"PT_EXPORT\s+int\s+(\w+)", source_code).group(1)
        return inductor.Request("cpu", ["native"], name, {"aot": True})


def command(src_files: List[str], dst: str, ext: str, extra_args=None) -> str:
    return f"nvcc -gencode=arch=compute_90a,code=[sm_90a] {'-c' if ext == 'o' else '-shared'} -o {dst} {src_files[0]}"


def client_of(url: str, tmp_path: Path, heartbeat: float = HEARTBEAT_S) -> kforge.Client:
    """A client as install() makes it: short connect timeout, no retries, a heartbeat."""
    return kforge.Client(url, cache_dir=tmp_path / "client-cache", timeout=heartbeat,
                         connect_timeout=1.0, retries=0, heartbeat=heartbeat)


def hooked(tmp_path: Path, hook: inductor.Hook):
    """A fresh stand-in code cache under tmp_path with ``hook`` patched onto it."""
    cache = torchlike.code_cache(tmp_path / "inductor")
    inductor.patch(cache, hook, "cuda", "cu", command, torchlike.CompileError, cache.lock, two_step=True)
    return cache


def local(tmp_path: Path) -> List[Tuple[int, str, str]]:
    return torchlike.local_compiles(tmp_path / "inductor")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, cond: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {seconds} s")
        time.sleep(0.02)


def compiling(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/jobs", timeout=10) as r:
        return any(j.get("state") == "compiling" for j in json.load(r)["jobs"])


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    yield
    inductor.uninstall()  # also ends each hook's breaker thread


# --- no server -------------------------------------------------------------------------------

def test_no_server_compiles_locally_at_once_and_never_deadlocks(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    hook = CpuHook(client_of(url, tmp_path), {}, True)
    cache = hooked(tmp_path, hook)

    (out, key, input_path), took = within(DEADLINE_S, cache.compile, source(1), "so")
    assert took < 1.0, f"the first compile took {took:.2f} s against a closed port"
    assert out == input_path[: -len("cu")] + "so" and Path(out).read_text() == "local so\n"
    # The original built the .o through cls.compile, which went straight through to it.
    assert [(ext, k) for _, ext, k in local(tmp_path)] == [("o", key), ("so", key)]
    s = hook.stats
    assert s.fallbacks == 1 and s.fallback_reasons == {"unreachable": 1}
    assert s.breaker == "open" and s.breaker_openings == 1 and s.lost_seconds < 1.0
    assert "Connection refused" in s.last_error and url in s.last_error

    # Inductor's precompile pool: 8 compiles at once, two of each kernel. The breaker is open:
    # they all compile locally (or find the other thread's files), none tries the network.
    requests, probes = hook.client.stats["requests"], s.probes
    with ThreadPoolExecutor(8) as pool:
        jobs = [pool.submit(cache.compile, source(n), "so") for n in (2, 3, 4, 5) * 2]
        _, took = within(DEADLINE_S, lambda: [j.result() for j in jobs])
    assert took < 1.0
    s = hook.stats
    assert hook.client.stats["requests"] - requests <= s.probes - probes  # a probe at most
    assert set(s.fallback_reasons) == {"unreachable", "breaker_open"}
    assert s.fallback_reasons["unreachable"] == 1 and s.fallbacks + s.local_hits == 9
    assert s.breaker_openings == 1
    assert sorted(ext for _, ext, _ in local(tmp_path)) == ["o"] * 5 + ["so"] * 5  # once per kernel


def test_strict_mode_raises_at_once_naming_kforge_the_url_and_the_cause(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    hook = CpuHook(client_of(url, tmp_path), {}, False)
    cache = hooked(tmp_path, hook)
    for n in (1, 2):  # the second without a request: the breaker is open
        with pytest.raises(torchlike.CompileError) as e:
            within(DEADLINE_S, cache.compile, source(n), "so")
        assert "kforge" in e.value.output and url in e.value.output
        assert "Connection refused" in e.value.output
    assert "marked down" in e.value.output  # the second names the breaker too
    assert local(tmp_path) == [] and cache.errors == {}  # a transient failure is not recorded
    assert hook.stats.strict_errors == 2 and hook.stats.fallbacks == 0


# --- the real server, started late, killed, stopped ------------------------------------------

def test_breaker_closes_when_the_server_comes_back_and_compiles_go_remote(tmp_path: Path) -> None:
    port = free_port()
    hook = CpuHook(client_of(f"http://127.0.0.1:{port}", tmp_path), {}, True, backoff=60.0)
    cache = hooked(tmp_path, hook)
    within(DEADLINE_S, cache.compile, source(10), "so")
    assert hook.stats.breaker == "open"
    server = Server(tmp_path / "late", ["--port", str(port)])
    try:
        assert hook.stats.breaker == "open"  # a 60 s back-off: nothing probes by itself yet
        hook.breaker.probe_now()
        wait_for("closed breaker", lambda: hook.stats.breaker == "closed")
        (out, key, _), _ = within(30, cache.compile, source(11), "so")
        s = hook.stats
        assert s.remote == 1 and s.remote_miss == 1 and s.fallbacks == 1
        assert s.probes == 1 and s.breaker_openings == 1 and s.breaker_open_seconds > 0
        assert key not in {k for _, _, k in local(tmp_path)}  # built by kforge
        assert b"cutlass_0000000b" in Path(out).read_bytes()  # the server's .so, placed
    finally:
        server.stop()


def test_server_killed_mid_compile_is_failed_over_at_once(tmp_path: Path) -> None:
    server = Server(tmp_path / "server")
    try:
        hook = CpuHook(client_of(server.url, tmp_path), {}, True)
        cache = hooked(tmp_path, hook)
        result: Dict[str, Any] = {}
        t = threading.Thread(target=lambda: result.update(r=within(30, cache.compile, source(20, slow=True, loops=60), "so")))
        t.start()
        wait_for("compiling job", lambda: compiling(server.url))
        server.proc.kill()
        killed = time.monotonic()
        t.join(DEADLINE_S)
        assert not t.is_alive(), "the compile still waits on a killed server"
        assert time.monotonic() - killed < 2.0
        (out, _, _), _ = result["r"]
        assert Path(out).read_text() == "local so\n"
        s = hook.stats
        assert s.fallback_reasons == {"unreachable": 1} and s.breaker_openings == 1
    finally:
        server.stop()


def test_stopped_server_is_failed_over_within_the_heartbeat(tmp_path: Path) -> None:
    """SIGSTOP: the kernel still accepts connections for the server; nothing answers. The hook
    holds the key's lock meanwhile, and a benchmark subprocess (Inductor's autotune_in_subproc,
    without the hook) compiling the same kernel waits on it, then both finish."""
    server = Server(tmp_path / "server")
    stopped = False
    try:
        hook = CpuHook(client_of(server.url, tmp_path), {}, True)
        cache = hooked(tmp_path, hook)
        src = source(30, slow=True, loops=25)  # about 2.5 s of g++
        result: Dict[str, Any] = {}
        t = threading.Thread(target=lambda: result.update(r=within(30, cache.compile, src, "so")))
        t.start()
        wait_for("compiling job", lambda: compiling(server.url))
        os.kill(server.proc.pid, signal.SIGSTOP)
        stopped = True
        t_stop = time.monotonic()
        child = run_python(
            f"import sys; sys.path.insert(0, {str(HERE)!r}); import torchlike; from pathlib import Path\n"
            f"print(torchlike.code_cache(Path({str(tmp_path / 'inductor')!r})).compile({src!r}, 'so')[0])",
            env={}, timeout=30)
        t.join(HEARTBEAT_S + 5)
        assert not t.is_alive(), "the compile still waits on a stopped server"
        (out, key, _), _ = result["r"]
        assert time.monotonic() - t_stop < HEARTBEAT_S + 3
        assert child.returncode == 0, child.stderr
        assert child.stdout.strip() == out
        # One .o and one .so were built, by whichever process had the lock first.
        assert sorted(ext for _, ext, k in local(tmp_path) if k == key) == ["o", "so"]
        s = hook.stats
        assert s.fallback_reasons == {"stalled": 1}, s.last_error
        assert "nothing" in s.last_error and server.url in s.last_error
        assert HEARTBEAT_S - 0.5 < s.lost_seconds < HEARTBEAT_S + 2

        # While it is stopped: local at once, no request (but the breaker's probes).
        requests, probes = hook.client.stats["requests"], hook.stats.probes
        _, took = within(DEADLINE_S, cache.compile, source(31), "so")
        assert took < 1.0
        assert hook.client.stats["requests"] - requests <= hook.stats.probes - probes

        os.kill(server.proc.pid, signal.SIGCONT)  # back: the next probe closes the breaker
        stopped = False
        hook.breaker.probe_now()
        wait_for("closed breaker", lambda: hook.stats.breaker == "closed")
    finally:
        if stopped:
            os.kill(server.proc.pid, signal.SIGCONT)
        server.stop()


# --- stand-in servers: a slow job with keep-alives, 503, 401, 400 ----------------------------

SO, OBJ = b"stand-in so\n", b"stand-in o\n"
KEY = "ab" * 32


def manifest(name: str) -> Dict[str, Any]:
    sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    return {"key": KEY, "kernel_name": name, "backend": "cpu", "archs": ["x86-64"], "cache": "miss",
            "abi": {"symbol": name, "args": [{"name": "workspace_size", "kind": "workspace_size", "ctype": "size_t*"},
                                             {"name": "workspace", "kind": "workspace", "ctype": "uint8_t*"},
                                             {"name": "stream", "kind": "stream", "ctype": "void*"}]},
            "artifact": {"url": f"/kernels/{KEY}/artifact", "sha256": sha(SO)},
            "object": {"url": f"/kernels/{KEY}/object", "sha256": sha(OBJ)}}


class StandIn(ThreadingHTTPServer):
    """``mode``: "slow" (a 202 job whose events stream sends a keep-alive every ``every`` s for
    ``lasts`` s, then the end), or an answer to every POST: "503" (Retry-After: 7), "401",
    "400" (naming /arch). GET /healthz is 200 in every mode. ``seen`` counts requests by path."""

    daemon_threads = True

    def __init__(self, mode: str, every: float = 0.2, lasts: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.mode, self.every, self.lasts = mode, every, lasts
        self.seen: Dict[str, int] = {}
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def log_message(self, *args: Any) -> None:
        pass

    def answer(self, status: int, body: Any, headers: Optional[Dict[str, str]] = None,
               ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        s = self.server
        s.seen[self.path] = s.seen.get(self.path, 0) + 1
        if self.path == "/healthz":
            return self.answer(200, {"status": "ok"})
        if self.path.endswith("/artifact"):
            return self.answer(200, SO, {"ETag": f'"{hashlib.sha256(SO).hexdigest()}"'}, "application/octet-stream")
        if self.path.endswith("/object"):
            return self.answer(200, OBJ, {"ETag": f'"{hashlib.sha256(OBJ).hexdigest()}"'}, "application/octet-stream")
        if self.path == "/jobs/j1/events":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            job = {"id": "j1", "state": "compiling"}
            self.wfile.write(f"event: state\ndata: {json.dumps(job)}\n\n".encode())
            self.wfile.flush()
            end = time.monotonic() + s.lasts
            while time.monotonic() < end:
                time.sleep(s.every)
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
            done = {"id": "j1", "state": "done", "http_status": 200, "result": manifest("cutlass_00000040")}
            self.wfile.write(f"event: end\ndata: {json.dumps(done)}\n\n".encode())
            self.wfile.flush()
            return
        self.answer(404, {"title": "Not Found", "status": 404})

    def do_POST(self) -> None:
        s = self.server
        s.seen[self.path] = s.seen.get(self.path, 0) + 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if s.mode == "slow":
            return self.answer(202, {"id": "j1", "state": "queued"}, {"Location": "/jobs/j1"})
        if s.mode == "503":
            return self.answer(503, {"title": "Service Unavailable", "status": 503,
                                     "detail": "the build queue is full"}, {"Retry-After": "7"})
        if s.mode == "401":
            return self.answer(401, {"title": "Unauthorized", "status": 401,
                                     "detail": "missing or unknown bearer token"})
        return self.answer(400, {"title": "Bad Request", "status": 400, "detail": "invalid request",
                                 "errors": [{"field": "/arch", "message": "sm_90a is not a cpu arch"}]})


@pytest.fixture
def stand_in(request: pytest.FixtureRequest) -> Iterator[StandIn]:
    s = StandIn(*request.param) if isinstance(request.param, tuple) else StandIn(request.param)
    yield s
    s.shutdown()
    s.server_close()


@pytest.mark.parametrize("stand_in", [("slow", 0.1, 1.5)], indirect=True)
def test_a_compile_longer_than_the_heartbeat_that_keeps_sending_is_not_failed_over(stand_in, tmp_path) -> None:
    hook = CpuHook(client_of(stand_in.url, tmp_path, heartbeat=0.5), {}, True)
    cache = hooked(tmp_path, hook)
    (out, _, _), took = within(10, cache.compile, source(0x40), "so")
    assert took > 1.5  # keep-alives only, for 3 heartbeat windows
    assert Path(out).read_bytes() == SO and Path(out[:-2] + "o").read_bytes() == OBJ
    s = hook.stats
    assert s.remote == 1 and s.fallbacks == 0 and s.breaker_openings == 0


@pytest.mark.parametrize("stand_in", ["503"], indirect=True)
def test_busy_server_opens_the_breaker_for_its_retry_after_and_is_not_retried(stand_in, tmp_path) -> None:
    hook = CpuHook(client_of(stand_in.url, tmp_path), {}, True)
    cache = hooked(tmp_path, hook)
    for n in (1, 2, 3):
        _, took = within(DEADLINE_S, cache.compile, source(n), "so")
        assert took < 1.0
    assert stand_in.seen == {"/kernels": 1}  # not retried, then not asked while open
    s = hook.stats
    assert s.fallback_reasons == {"busy": 1, "breaker_open": 2} and s.breaker_openings == 1
    assert "HTTP 503" in s.last_error and "Retry-After: 7" in s.last_error
    next_probe = float(re.search(r"next probe in ([\d.]+) s", hook.breaker.describe()).group(1))
    assert 6.0 < next_probe <= 7.0  # the server's Retry-After, not the 1 s base back-off


@pytest.mark.parametrize("stand_in", ["401"], indirect=True)
def test_refused_token_falls_back_loudly_once_and_is_counted(stand_in, tmp_path, caplog) -> None:
    hook = CpuHook(client_of(stand_in.url, tmp_path), {}, True)
    cache = hooked(tmp_path, hook)
    with caplog.at_level(logging.WARNING, logger="kforge.inductor"):
        for n in (1, 2, 3):
            within(DEADLINE_S, cache.compile, source(n), "so")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors  # loud, once
    assert stand_in.url in errors[0] and "401" in errors[0] and "token" in errors[0]
    assert stand_in.seen == {"/kernels": 1}  # never retried; later compiles do not ask
    s = hook.stats
    assert s.auth_errors == 1 and s.fallbacks == 3 and s.fallback_reasons == {"auth": 3}
    assert s.breaker_openings == 0  # not an outage: no probe would fix a token


class NoValidChoicesError(Exception):
    pass


class Selector:
    """As Inductor's AlgorithmSelectorCache.__call__ in torch 2.11: precompiles every choice in
    a thread pool, logs and drops the ones that raise, and raises NoValidChoicesError when no
    choice is left."""

    def __call__(self, cache: Any, sources: List[str]) -> List[str]:
        with ThreadPoolExecutor(4) as pool:
            futures = {pool.submit(cache.compile, s, "so"): s for s in sources}
        left = [s for f, s in futures.items() if f.exception() is None]
        if not left:
            raise NoValidChoicesError("No choices to select, please consider adding ATEN into "
                                      "max_autotune_gemm_backends config")
        return left


@pytest.mark.parametrize("stand_in", ["503", "401", "400", None], indirect=True,
                         ids=["503", "401", "400-naming-a-field", "connection-refused"])
def test_strict_mode_error_reaches_the_caller_of_autotuning(stand_in, tmp_path) -> None:
    url = stand_in.url if stand_in.mode else f"http://127.0.0.1:{free_port()}"
    cause = {"503": "HTTP 503", "401": "HTTP 401", "400": "/arch: sm_90a is not a cpu arch",
             None: "Connection refused"}[stand_in.mode]
    hook = CpuHook(client_of(url, tmp_path), {}, False)
    cache = hooked(tmp_path, hook)

    class Autotuner(Selector):
        pass

    inductor.wrap_selector(Autotuner, hook)
    with pytest.raises(inductor.RemoteCompileFailed) as e:
        within(DEADLINE_S, Autotuner(), cache, [source(n) for n in (1, 2, 3)])
    message = str(e.value)
    assert "kforge" in message and url in message and cause in message, message
    assert "3 compile(s)" in message
    assert isinstance(e.value.__cause__, NoValidChoicesError)
    assert local(tmp_path) == []
    inductor.uninstall()
    assert "__call__" not in Autotuner.__dict__
