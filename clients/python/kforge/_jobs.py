"""Following a build job to its end: server-sent events, with polling as the fallback.

``GET /jobs/{id}/events`` sends ``event: state`` on every change and ``event: end``
with the result. A stream that ends early is reopened, as a browser's
EventSource does; when streaming does not work at all (a proxy that buffers,
a dropped connection), ``GET /jobs/{id}`` is polled until the job ends.

With a ``heartbeat`` window, the job is given up (:class:`~kforge.errors.Stalled`) as
soon as its stream sends nothing for that long: the server sends a ``: keep-alive``
comment every 15 s however long the build takes, so silence means a hung or stopped
server, not a slow compile. The window must be longer than those 15 s.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, TextIO, Tuple

from ._http import Transport
from .errors import ConnectionFailed, Stalled

FINISHED = ("done", "failed")
STREAM_ATTEMPTS = 3
SSE_READ_TIMEOUT_S = 45.0  # the server sends a keep-alive comment every 15 s
POLL_FIRST_S = 0.1
POLL_MAX_S = 2.0


class Progress:
    """One line on stderr, rewritten in place as a job changes state.

    Drawn when ``enabled`` is True, or when it is None and the stream is a
    terminal: a log file or a pipe never gets carriage-return noise.
    """

    def __init__(self, enabled: Optional[bool], stream: Optional[TextIO] = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._t0 = time.monotonic()
        self._width = 0

    def update(self, job: Dict[str, Any]) -> None:
        if not self.enabled:
            return
        what = job.get("kernel_name") or ""
        p = job.get("prefetch")
        if isinstance(p, dict):  # a prefetch: its counts
            what = (f"{p.get('done', 0)}/{p.get('total', '?')} hit {p.get('hit', 0)} "
                    f"built {p.get('built', 0)} failed {p.get('failed', 0)}")
        line = (f"kforge: job {job.get('id', '?')} {job.get('state', '?')} "
                f"{time.monotonic() - self._t0:5.1f}s {what}").rstrip()
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0


def sse_events(resp: http.client.HTTPResponse) -> Iterator[Tuple[str, str]]:
    """(event, data) pairs from a text/event-stream body, until it ends."""
    event = "message"
    data: List[str] = []
    while True:
        raw = resp.readline()
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue  # keep-alive comment
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)


def follow(transport: Transport, job_id: str, progress: Progress,
           heartbeat: Optional[float] = None) -> Dict[str, Any]:
    """Waits for job ``job_id`` to finish and returns it as ``GET /jobs/{id}`` shows it
    (``state``, ``http_status``, ``result``). With ``heartbeat``, raises
    :class:`~kforge.errors.Stalled` once the server sends nothing for that many seconds."""
    try:
        for _ in range(STREAM_ATTEMPTS):
            job = _stream_once(transport, job_id, progress, heartbeat)
            if job is not None:
                return job
    except Stalled:
        raise
    except (OSError, http.client.HTTPException, ValueError, ConnectionFailed):
        pass  # streaming does not work from here: poll instead
    return _poll(transport, job_id, progress, heartbeat)


def _stream_once(transport: Transport, job_id: str, progress: Progress,
                 heartbeat: Optional[float] = None) -> Optional[Dict[str, Any]]:
    """Reads one event stream; the finished job, or None if the stream ended before it."""
    r = transport.request("GET", f"/jobs/{job_id}/events", stream=True,
                          headers={"Accept": "text/event-stream"},
                          timeout=heartbeat or max(transport.timeout, SSE_READ_TIMEOUT_S))
    assert r.stream is not None
    try:
        for event, data in sse_events(r.stream):
            job = json.loads(data)
            if not isinstance(job, dict):
                raise ValueError(f"a job event is a JSON object, not {data[:80]!r}")
            progress.update(job)
            if event == "end":
                return job
    except socket.timeout as e:
        if heartbeat is None:
            raise
        raise Stalled(f"GET /jobs/{job_id}/events: nothing from {transport.url} for {heartbeat:g} s "
                      "(no event, no keep-alive): the server is hung or stopped") from e
    finally:
        r.close()
    return None


def _poll(transport: Transport, job_id: str, progress: Progress,
          heartbeat: Optional[float] = None) -> Dict[str, Any]:
    delay = POLL_FIRST_S
    while True:
        job = transport.request("GET", f"/jobs/{job_id}", timeout=heartbeat).json()
        progress.update(job)
        if job.get("state") in FINISHED:
            return job
        time.sleep(delay)
        delay = min(POLL_MAX_S, delay * 2)
