"""Prefetch manifests: record the requests a model's compilation makes, replay them elsewhere.

A :class:`Recorder` appends every distinct ``POST /kernels`` body a client sends to a
file, one JSON object per line (``wait_ms`` left out: it is about one exchange, not the
kernel). ``kforge.Client(record=FILE)`` or ``KFORGE_RECORD=FILE`` turns it on, so a
whole ``torch.compile`` run is recorded without touching its code. The lines of any
number of runs and processes may share one file: each line is written with one
``write`` on a descriptor opened with ``O_APPEND``.

:func:`load_manifest` reads such a file (or a manifest, or a JSON list of requests)
and returns the manifest a server's ``POST /prefetch`` takes, duplicates dropped::

    {"format": "kforge-prefetch/1", "label": "...", "recorded": {...}, "requests": [...]}

``Client.prefetch(manifest)`` (or ``python -m kforge prefetch FILE``, or the C++
``kforge prefetch FILE``) then warms a new host's cache from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Set, Union

from ._version import __version__
from .cache import atomic_write

FORMAT = "kforge-prefetch/1"
PathLike = Union[str, "os.PathLike[str]"]


def _canonical(request: Mapping[str, Any]) -> str:
    return json.dumps(request, sort_keys=True, separators=(",", ":"))


class Recorder:
    """Appends each distinct request it is given to ``path`` as one JSON line.

    Thread-safe. Requests already in the file when it is opened are not written
    again, so a rerun of the same model adds nothing.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seen: Set[str] = set()
        if self.path.exists():
            for request in _read_lines(self.path.read_text(encoding="utf-8"), self.path):
                self._seen.add(hashlib.sha256(_canonical(request).encode()).hexdigest())

    def record(self, request: Mapping[str, Any]) -> bool:
        """Appends ``request`` (without ``wait_ms``); False when it was recorded before."""
        body = {k: v for k, v in request.items() if k != "wait_ms"}
        line = _canonical(body)
        digest = hashlib.sha256(line.encode()).hexdigest()
        with self._lock:
            if digest in self._seen:
                return False
            self._seen.add(digest)
            data = (line + "\n").encode("utf-8")
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, data)
                while written < len(data):  # a short write (a full disk, a signal)
                    written += os.write(fd, data[written:])
            finally:
                os.close(fd)
        return True


def _read_lines(text: str, name: Union[str, Path]) -> List[Dict[str, Any]]:
    requests = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{name}:{n}: not JSON ({e})") from None
        if not isinstance(request, dict):
            raise ValueError(f"{name}:{n}: a request is a JSON object")
        requests.append(request)
    return requests


def read_requests(path: PathLike) -> List[Dict[str, Any]]:
    """The requests in ``path``: a manifest, a JSON list of requests or JSON lines."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except ValueError:
        return _read_lines(text, path)
    if isinstance(doc, dict) and "requests" in doc:
        doc = doc["requests"]
    elif isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise ValueError(f"{path}: expected a manifest, a list of requests or JSON lines")
    return doc


def manifest(requests: List[Mapping[str, Any]], label: Optional[str] = None) -> Dict[str, Any]:
    """The ``POST /prefetch`` body for ``requests``, duplicates (and ``wait_ms``) dropped."""
    seen: Set[str] = set()
    unique = []
    for request in requests:
        body = {k: v for k, v in request.items() if k != "wait_ms"}
        key = _canonical(body)
        if key not in seen:
            seen.add(key)
            unique.append(body)
    doc: Dict[str, Any] = {
        "format": FORMAT,
        "recorded": {"by": f"kforge-python {__version__}", "host": platform.node(),
                     "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "requests": unique,
    }
    if label:
        doc["label"] = label[:200]
    return doc


def load_manifest(path: PathLike, label: Optional[str] = None) -> Dict[str, Any]:
    """:func:`manifest` of :func:`read_requests` (labelled with the file's name)."""
    return manifest(read_requests(path), label or Path(path).name)


def write_manifest(record: PathLike, out: PathLike) -> Dict[str, Any]:
    """Writes the manifest of the recording ``record`` to ``out`` (JSON); returns it."""
    doc = load_manifest(record)
    atomic_write(Path(out), (json.dumps(doc, indent=1) + "\n").encode(), 0o644)
    return doc
