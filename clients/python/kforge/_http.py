"""HTTP transport: one request at a time over http.client, with the retry policy.

What is retried, and why:

- ``503`` (the server's build queue is full): the server says when to come back
  in ``Retry-After``; we wait that long (capped) and try again.
- No answer (refused, reset, timed out, a connection dropped mid-answer): the
  server may be restarting; we back off exponentially, with jitter so a fleet of
  clients does not come back in lock step.
- Nothing else: a 4xx will not change by asking again, and retrying a 500 would
  only repeat work. Every kforge POST is content-addressed (the same request is
  the same kernel), so repeating one after a lost answer is safe.

A fresh connection is opened per request: kforge requests are coarse (a compile,
a file), and it keeps the transport thread-safe with no stale keep-alive sockets.

Two timeouts: ``connect_timeout`` bounds opening the connection (refused is at once;
a host that drops packets takes that long), ``timeout`` bounds each wait for bytes once
connected. A server that took the connection and then sent nothing for ``timeout``
seconds (hung, or stopped with SIGSTOP: the kernel still accepts for it) is
:class:`~kforge.errors.Stalled`, a kind of ``ConnectionFailed``.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Mapping, MutableMapping, Optional

from ._version import __version__
from .errors import ConnectionFailed, KforgeError, Stalled, Unavailable, error_from_problem

USER_AGENT = f"kforge-python/{__version__}"
BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 10.0
RETRY_AFTER_CAP_S = 60.0


@dataclass
class Response:
    """A finished exchange: status, headers and the whole body.

    ``stream`` is the still-open response when the caller asked to read the body
    itself (server-sent events); it must then be closed by the caller.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes = b""
    stream: Optional[http.client.HTTPResponse] = field(default=None, repr=False)
    _conn: Optional[http.client.HTTPConnection] = field(default=None, repr=False)

    def json(self) -> Dict[str, Any]:
        """The body as a JSON object (every kforge route answers one)."""
        try:
            doc = json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise KforgeError(f"the server's answer is not JSON: {e}", status=self.status) from e
        if not isinstance(doc, dict):
            raise KforgeError("the server's answer is not a JSON object", status=self.status)
        return doc

    def close(self) -> None:
        """Closes a streamed answer and its connection (nothing to do otherwise)."""
        if self.stream is not None:
            self.stream.close()
        if self._conn is not None:
            self._conn.close()


def problem_of(status: int, body: bytes) -> Dict[str, Any]:
    """The problem document in an error body, or one made up from a non-JSON body."""
    try:
        doc = json.loads(body.decode("utf-8"))
        if isinstance(doc, dict):
            return doc
    except (UnicodeDecodeError, ValueError):
        pass
    text = body.decode("utf-8", "replace").strip()
    return {"status": status, "title": http.client.responses.get(status, f"HTTP {status}"),
            "detail": text[:2000]}


def retry_after_seconds(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP-date; None if absent."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Silent(OSError):
    """The server was connected and sent nothing for ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"connected, then nothing for {seconds:g} s")
        self.seconds = seconds


def backoff_seconds(attempt: int) -> float:
    """Exponential backoff with jitter: half the step fixed, half random."""
    step = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** attempt)
    return step / 2 + random.uniform(0, step / 2)


class Transport:
    """Sends requests to one kforge server and applies the retry policy.

    ``stats`` is the client's counter dict; the transport adds ``requests`` and
    ``retries`` to it. ``connect_timeout`` (None: ``timeout``) bounds opening a connection.
    """

    def __init__(self, url: str, *, token: Optional[str], timeout: float, retries: int,
                 stats: MutableMapping[str, int], connect_timeout: Optional[float] = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"kforge server URL must be http(s)://host[:port][/prefix], not {url!r}")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.stats = stats
        self._lock = threading.Lock()

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.stats[name] = self.stats.get(name, 0) + n

    def request(self, method: str, path: str, *, body: Any = None,
                headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                accept: Iterable[int] = (200,), stream: bool = False) -> Response:
        """Sends one request (retrying as the module says) and returns an accepted answer.

        ``body`` is sent as JSON. An answer whose status is not in ``accept`` is
        raised as the matching :class:`~kforge.errors.KforgeError`. With
        ``stream``, an accepted answer's body is left unread in ``Response.stream``.
        """
        payload = None if body is None else json.dumps(body).encode("utf-8")
        hdrs = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if payload is not None:
            hdrs["Content-Type"] = "application/json"
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        hdrs.update(headers or {})
        accepted = set(accept)
        return self._retrying(
            lambda: self._exchange(method, path, payload, hdrs, timeout or self.timeout,
                                   stream, accepted),
            accepted, f"{method} {path}")

    def _exchange(self, method: str, path: str, payload: Optional[bytes],
                  headers: Mapping[str, str], timeout: float, stream: bool,
                  accepted: Iterable[int]) -> Response:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        connect = min(self.connect_timeout, timeout) if self.connect_timeout else timeout
        conn = cls(self._host, self._port, timeout=connect)
        self.count("requests")
        try:
            conn.connect()
        except BaseException:
            conn.close()
            raise
        try:
            if conn.sock is not None:
                conn.sock.settimeout(timeout)  # connected: from here on, the wait for each read
            conn.request(method, self._prefix + path, body=payload, headers=dict(headers))
            resp = conn.getresponse()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            if stream and resp.status in accepted:
                return Response(resp.status, hdrs, stream=resp, _conn=conn)
            body = resp.read()
        except socket.timeout as e:
            conn.close()
            raise _Silent(timeout) from e
        except BaseException:
            conn.close()
            raise
        conn.close()
        return Response(resp.status, hdrs, body)

    def _retrying(self, attempt: Callable[[], Response], accepted: Iterable[int],
                  what: str) -> Response:
        n = 0
        while True:
            last = n >= self.retries
            try:
                r = attempt()
            except ssl.SSLCertVerificationError as e:  # asking again will not fix a certificate
                raise ConnectionFailed(f"{what}: {self.url}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                if last and isinstance(e, _Silent):
                    raise Stalled(f"{what}: {self.url} took the connection, then sent nothing for "
                                  f"{e.seconds:g} s (after {n + 1} attempt(s)): hung or stopped") from e
                if last:
                    raise ConnectionFailed(
                        f"{what}: no answer from {self.url} after {n + 1} attempt(s): "
                        f"{type(e).__name__}: {e}") from e
                self.count("retries")
                time.sleep(backoff_seconds(n))
                n += 1
                continue
            if r.status in accepted:
                return r
            if r.status == 503 and not last:
                wait = retry_after_seconds(r.headers.get("retry-after"))
                self.count("retries")
                time.sleep(backoff_seconds(n) if wait is None else min(wait, RETRY_AFTER_CAP_S))
                n += 1
                continue
            problem = problem_of(r.status, r.body)
            if r.status == 503:
                retry_after = r.headers.get("retry-after")
                e503 = Unavailable(
                    f"{what}: still 503 after {n + 1} attempt(s): {problem.get('detail', '')}"
                    + (f" (Retry-After: {retry_after})" if retry_after else ""),
                    status=503, problem=problem)
                e503.retry_after = retry_after_seconds(retry_after)
                raise e503
            raise error_from_problem(r.status, problem)
