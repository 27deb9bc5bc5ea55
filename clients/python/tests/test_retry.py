"""Retries: a full build queue (503 + Retry-After) and a server that is not up yet."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

import kforge
from support import DOUBLE_SOURCE, Server, scaled_source, slow_source


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One compile at a time and one waiting: the third concurrent build gets a 503."""
    s = Server(tmp_path_factory.mktemp("busy"), ["--compile-jobs", "1", "--max-queue", "1"])
    yield s
    s.stop()


def post_async(url: str, request: Dict[str, Any]) -> Dict[str, Any]:
    """POST /kernels with ``Prefer: respond-async``, straight through urllib: the job."""
    req = urllib.request.Request(url + "/kernels", data=json.dumps(request).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Prefer": "respond-async"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 202
        return json.load(r)


def job_state(url: str, job_id: str) -> str:
    with urllib.request.urlopen(f"{url}/jobs/{job_id}", timeout=30) as r:
        return json.load(r)["state"]


def test_full_queue_is_503_then_retried_after_retry_after(busy_server: Server,
                                                          tmp_path: Path) -> None:
    url = busy_server.url
    first = post_async(url, {"backend": "cpu", "source": slow_source(1)})
    deadline = time.monotonic() + 20
    while job_state(url, first["id"]) == "queued" and time.monotonic() < deadline:
        time.sleep(0.02)  # until the one worker has taken it: then one more fits
    post_async(url, {"backend": "cpu", "source": slow_source(2)})

    impatient = kforge.Client(url, retries=0, cache_dir=tmp_path)
    with pytest.raises(kforge.Unavailable) as e:
        impatient.compile(scaled_source(21), backend="cpu")
    assert e.value.status == 503
    assert "queue is full" in e.value.detail
    assert "Retry-After" in str(e.value)

    # The server says Retry-After: 5; by then the slow builds (about 2 s each) are through.
    patient = kforge.Client(url, retries=3, cache_dir=tmp_path)
    k = patient.compile(scaled_source(21), backend="cpu")
    assert patient.stats["retries"] >= 1
    assert k.name.startswith("cpu_kernel_")


def test_bad_request_is_never_retried(client: kforge.Client) -> None:
    with pytest.raises(kforge.BadRequest):
        client.compile(DOUBLE_SOURCE, backend="cpu", arch="no-such-cpu")
    assert client.stats["requests"] == 1 and client.stats["retries"] == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_server_is_connection_failed_after_retries(tmp_path: Path) -> None:
    c = kforge.Client(f"http://127.0.0.1:{free_port()}", retries=2, cache_dir=tmp_path)
    with pytest.raises(kforge.ConnectionFailed, match="after 3 attempt"):
        c.health()
    assert c.stats["requests"] == 3 and c.stats["retries"] == 2


def test_refused_connections_are_retried_until_the_server_is_up(tmp_path: Path) -> None:
    port = free_port()
    c = kforge.Client(f"http://127.0.0.1:{port}", retries=8, cache_dir=tmp_path)
    answer: Dict[str, Any] = {}
    asker = threading.Thread(target=lambda: answer.update(c.health()))
    asker.start()
    deadline = time.monotonic() + 10
    while c.stats["retries"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # until the first attempt has been refused
    assert c.stats["retries"] >= 1
    s = Server(tmp_path / "late", ["--port", str(port)])
    try:
        asker.join(timeout=60)
        assert answer.get("status") == "ok"
    finally:
        s.stop()
