"""``kforge.Client``: the service's HTTP API as Python calls.

Requests are built from keyword arguments that are the API's own field names
(docs/API.md); a field left as None is not sent, so the server's defaults and
its allow-lists stay the authority. Kernel files are served from the local
content-addressed cache (:mod:`kforge.cache`) whenever it holds them.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._http import Transport
from ._jobs import Progress, follow
from .cache import ArtifactCache
from .errors import IntegrityError, error_from_problem
from .kernel import Kernel
from .prefetch import PathLike, Recorder

Arch = Union[str, Sequence[str]]
# The server holds a synchronous compile this much less than our socket timeout, so a
# long build answers 202 (and is followed) instead of timing the request out.
WAIT_MARGIN_S = 5.0
AUTOTUNE_TIMEOUT_S = 600.0
STATS = ("requests", "retries", "bytes_downloaded", "artifact_hits", "artifact_downloads",
         "object_hits", "object_downloads", "not_modified", "corrupt_removed")


def kernel_request(source: Optional[str] = None, *, backend: str, arch: Arch = "native",
                   template: Optional[str] = None, params: Optional[Mapping[str, Any]] = None,
                   inputs: Optional[Sequence[Mapping[str, Any]]] = None,
                   output: Optional[Mapping[str, Any]] = None,
                   epilogue: Optional[Sequence[Mapping[str, Any]]] = None,
                   input_reorder: Optional[Sequence[int]] = None,
                   options: Optional[Mapping[str, Any]] = None,
                   export_name: Optional[str] = None,
                   benchmark: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The JSON body of ``POST /kernels`` (and ``/render``), with only the given fields."""
    req: Dict[str, Any] = {"backend": backend,
                           "arch": arch if isinstance(arch, str) else list(arch)}
    optional = {"source": source, "template": template, "params": params, "inputs": inputs,
                "output": output, "epilogue": epilogue, "input_reorder": input_reorder,
                "options": options, "export_name": export_name, "benchmark": benchmark}
    req.update({k: v for k, v in optional.items() if v is not None})
    return req


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


class Client:
    """A connection to one kforge server.

    ``url`` defaults to ``$KFORGE_URL`` and ``token`` (sent as ``Authorization:
    Bearer``) to ``$KFORGE_TOKEN``. ``timeout`` is per request, in seconds (the
    longest wait for the server's next bytes); ``connect_timeout`` (default:
    ``timeout``) bounds opening a connection; ``retries`` is how often a 503 or a
    failed connection is tried again. ``heartbeat``: a followed job whose event
    stream sends nothing (no event, no keep-alive) for that many seconds is given up
    as :class:`~kforge.errors.Stalled` (None: reopened, then polled).
    ``cache_dir`` is the local file cache (default: see
    :func:`kforge.cache.default_cache_dir`). ``stats`` counts requests, retries,
    downloads and local cache hits. ``record`` (default ``$KFORGE_RECORD``) is a
    file to which every distinct request sent to ``POST /kernels`` is appended as a
    JSON line: a prefetch manifest's raw material (:mod:`kforge.prefetch`).
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout: float = 60.0, retries: int = 5,
                 cache_dir: Union[str, "os.PathLike[str]", None] = None,
                 record: Optional[PathLike] = None, connect_timeout: Optional[float] = None,
                 heartbeat: Optional[float] = None) -> None:
        url = url or os.environ.get("KFORGE_URL")
        if not url:
            raise ValueError("no kforge server: pass url or set KFORGE_URL")
        if token is None:
            token = os.environ.get("KFORGE_TOKEN") or None
        self.stats: Dict[str, int] = dict.fromkeys(STATS, 0)
        self._http = Transport(url, token=token, timeout=timeout, retries=retries,
                               stats=self.stats, connect_timeout=connect_timeout)
        self.heartbeat = heartbeat
        self.cache = ArtifactCache(cache_dir, count=self._http.count)
        record = record or os.environ.get("KFORGE_RECORD") or None
        self.recorder = Recorder(record) if record else None

    @property
    def url(self) -> str:
        return self._http.url

    def __repr__(self) -> str:
        return f"<kforge.Client {self.url}>"

    # --- compiling -------------------------------------------------------------------

    def compile(self, source: Optional[str] = None, *, backend: str, arch: Arch = "native",
                template: Optional[str] = None, params: Optional[Mapping[str, Any]] = None,
                inputs: Optional[Sequence[Mapping[str, Any]]] = None,
                output: Optional[Mapping[str, Any]] = None,
                epilogue: Optional[Sequence[Mapping[str, Any]]] = None,
                input_reorder: Optional[Sequence[int]] = None,
                options: Optional[Mapping[str, Any]] = None,
                export_name: Optional[str] = None,
                benchmark: Optional[Mapping[str, Any]] = None,
                wait: bool = True, progress: Optional[bool] = None) -> Kernel:
        """Compiles one kernel (``POST /kernels``) and returns it.

        Source mode: ``source`` with the ``KERNEL_NAME`` placeholder (or the
        identifier ``export_name``). Template mode: ``template`` with ``params``,
        ``inputs``, ``output`` and optionally ``epilogue``/``input_reorder``.
        ``options`` is the server's allow-list (opt_level, fast_math, debug_info,
        aot, defines, includes), passed as given.

        ``wait=True`` lets the server hold the request until the build ends;
        ``wait=False`` asks for a 202 at once. Either way a 202 is followed to the
        end of its job, with a progress line on stderr when ``progress`` is True
        (None: when stderr is a terminal).
        """
        req = kernel_request(source, backend=backend, arch=arch, template=template,
                             params=params, inputs=inputs, output=output, epilogue=epilogue,
                             input_reorder=input_reorder, options=options,
                             export_name=export_name, benchmark=benchmark)
        return self.compile_request(req, wait=wait, progress=progress)

    def compile_request(self, request: Mapping[str, Any], *, wait: bool = True,
                        progress: Optional[bool] = None) -> Kernel:
        """:meth:`compile` for a request body given whole (e.g. read from a JSON file)."""
        body = dict(request)
        if self.recorder is not None:
            self.recorder.record(body)
        headers = {}
        if wait:
            body.setdefault("wait_ms", int(max(0.0, self._http.timeout - WAIT_MARGIN_S) * 1000))
        else:
            headers["Prefer"] = "respond-async"
        r = self._http.request("POST", "/kernels", body=body, headers=headers, accept=(200, 202))
        answer = r.json()
        if r.status == 202:
            location = r.headers.get("location") or f"/jobs/{answer['id']}"
            answer = self._job_result(location.rsplit("/", 1)[-1], progress)
        return Kernel(self, answer)

    def autotune(self, *, backend: str, template: str,
                 inputs: Sequence[Mapping[str, Any]], output: Mapping[str, Any],
                 arch: Arch = "native", epilogue: Optional[Sequence[Mapping[str, Any]]] = None,
                 input_reorder: Optional[Sequence[int]] = None,
                 options: Optional[Mapping[str, Any]] = None,
                 choices: Union[str, Sequence[Mapping[str, Any]]] = "default",
                 benchmark: Optional[Mapping[str, Any]] = None,
                 timeout: Optional[float] = None) -> Dict[str, Any]:
        """Builds and benchmarks each of ``choices`` (``POST /autotune``); returns the ranking.

        The answer comes once every choice is built and measured, so ``timeout``
        defaults to the larger of the client's timeout and 600 s.
        """
        req = kernel_request(backend=backend, arch=arch, template=template, inputs=inputs,
                             output=output, epilogue=epilogue, input_reorder=input_reorder,
                             options=options, benchmark=benchmark)
        req["choices"] = choices if isinstance(choices, str) else list(choices)
        return self.autotune_request(req, timeout=timeout)

    def autotune_request(self, request: Mapping[str, Any], *,
                         timeout: Optional[float] = None) -> Dict[str, Any]:
        """:meth:`autotune` for a request body given whole."""
        timeout = timeout or max(self._http.timeout, AUTOTUNE_TIMEOUT_S)
        return self._http.request("POST", "/autotune", body=dict(request), timeout=timeout).json()

    def prefetch(self, manifest: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]], *,
                 progress: Optional[bool] = None) -> Dict[str, Any]:
        """Has the server build whatever of ``manifest`` it lacks (``POST /prefetch``).

        ``manifest`` is a prefetch manifest (:func:`kforge.prefetch.load_manifest`) or a
        list of request bodies. Follows the job to its end and returns its result:
        ``total``, ``hit``, ``built``, ``failed`` and per entry its ``outcome`` (and
        ``error`` when it failed). Raises when the server refuses the list (a 400
        naming ``/requests/<i>/...``) or the job does not finish.
        """
        body = dict(manifest) if isinstance(manifest, Mapping) else {"requests": list(manifest)}
        r = self._http.request("POST", "/prefetch", body=body,
                               headers={"Prefer": "respond-async"}, accept=(200, 202))
        job = r.json()
        if "result" not in job:  # a 202 (even one that finished as it was answered)
            job = self.follow(job["id"], progress)
        status = job.get("http_status") or 500
        if status != 200:
            raise error_from_problem(status, job.get("result") or {})
        return dict(job["result"])

    def render(self, source: Optional[str] = None, *, backend: str, arch: Arch = "native",
               template: Optional[str] = None, params: Optional[Mapping[str, Any]] = None,
               inputs: Optional[Sequence[Mapping[str, Any]]] = None,
               output: Optional[Mapping[str, Any]] = None,
               epilogue: Optional[Sequence[Mapping[str, Any]]] = None,
               input_reorder: Optional[Sequence[int]] = None,
               options: Optional[Mapping[str, Any]] = None,
               export_name: Optional[str] = None) -> Dict[str, Any]:
        """The dry run (``POST /render``): ``key``, ``kernel_name``, the rendered
        ``source``, ``abi``, ``wrapper`` and the compiler argv; nothing is built."""
        req = kernel_request(source, backend=backend, arch=arch, template=template,
                             params=params, inputs=inputs, output=output, epilogue=epilogue,
                             input_reorder=input_reorder, options=options,
                             export_name=export_name)
        return self._http.request("POST", "/render", body=req).json()

    def explain(self, request: Mapping[str, Any]) -> Dict[str, Any]:
        """Would ``request`` (a ``POST /kernels`` body) hit, and if not, why (``POST /explain``):
        ``key``, ``kernel_name``, ``cache`` (``hit`` or ``miss``), the ``nearest`` cached entry of
        the same kernel and ``miss_reason``, each input that differs. Nothing is compiled."""
        return self._http.request("POST", "/explain", body=dict(request)).json()

    # --- looking things up ------------------------------------------------------------

    def kernel(self, key: str) -> Kernel:
        """The cached kernel ``key`` (``GET /kernels/{key}``)."""
        return Kernel(self, self._http.request("GET", f"/kernels/{_q(key)}").json())

    def fetch(self, key: str, what: str = "artifact") -> Path:
        """Kernel ``key``'s ``artifact`` (.so) or ``object`` (.o) in the local cache,
        without its manifest.

        When the cache holds a copy recorded for this key, the request carries
        ``If-None-Match`` with its hash and a 304 answer transfers no body.
        """
        have = self.cache.recall(key, what)
        local = self.cache.get(have) if have else None
        headers = {"If-None-Match": f'"{have}"'} if local else {}
        r = self._http.request("GET", f"/kernels/{_q(key)}/{_q(what)}", headers=headers,
                               accept=(200, 304))
        if r.status == 304 and local is not None:
            self._http.count("not_modified")
            return local
        sha = r.headers.get("etag", "").strip('"')
        if not sha:
            raise IntegrityError(f"GET /kernels/{key}/{what} carried no ETag to check it by")
        return self._store(key, what, sha, r.body)

    def job(self, job_id: str) -> Dict[str, Any]:
        """One job with its result (``GET /jobs/{id}``)."""
        return self._http.request("GET", f"/jobs/{_q(job_id)}").json()

    def jobs(self, limit: Optional[int] = None) -> Dict[str, Any]:
        """Recent jobs, newest first, and the queue (``GET /jobs``): ``{"jobs", "queue"}``."""
        query = f"?limit={int(limit)}" if limit is not None else ""
        return self._http.request("GET", f"/jobs{query}").json()

    def follow(self, job_id: str, progress: Optional[bool] = None) -> Dict[str, Any]:
        """Waits until job ``job_id`` ends (events, else polling); returns it with its result."""
        p = Progress(progress)
        try:
            return follow(self._http, job_id, p, self.heartbeat)
        finally:
            p.close()

    def templates(self) -> List[Dict[str, Any]]:
        """Every template with its parameters per backend (``GET /templates``)."""
        return list(self._http.request("GET", "/templates").json()["templates"])

    def template(self, name: str) -> Dict[str, Any]:
        """One template (``GET /templates/{name}``)."""
        return self._http.request("GET", f"/templates/{_q(name)}").json()

    def toolchains(self) -> Dict[str, Any]:
        """Each backend's compiler, accepted archs and what ``native`` is (``GET /toolchains``)."""
        return self._http.request("GET", "/toolchains").json()

    def health(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """``GET /healthz``: status, version, uptime (``timeout``: this request's own)."""
        return self._http.request("GET", "/healthz", timeout=timeout).json()

    # --- for Kernel -------------------------------------------------------------------

    def _job_result(self, job_id: str, progress: Optional[bool]) -> Dict[str, Any]:
        """The result of a job that succeeded; the error it failed with, raised."""
        job = self.follow(job_id, progress)
        status = job.get("http_status") or 500
        result = job.get("result") or {}
        if status != 200:
            raise error_from_problem(status, result)
        return result

    def _file(self, key: str, what: str, url: str, sha256: str) -> Path:
        """The file ``sha256`` from the local cache, downloaded from ``url`` if absent."""
        path = self.cache.get(sha256)
        if path is not None:
            self._http.count(f"{what}_hits")
            return path
        body = self._http.request("GET", url, headers={"Accept": "application/octet-stream"}).body
        return self._store(key, what, sha256, body)

    def _store(self, key: str, what: str, sha256: str, body: bytes) -> Path:
        self._http.count("bytes_downloaded", len(body))
        self._http.count(f"{what}_downloads")
        path = self.cache.put(sha256, body)
        self.cache.remember(key, what, sha256)
        return path

    def _text(self, url: str) -> str:
        return self._http.request("GET", url, headers={"Accept": "text/plain"}).body.decode(
            "utf-8", "replace")
