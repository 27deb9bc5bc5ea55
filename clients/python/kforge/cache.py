"""The local, content-addressed cache of kernel files (``.so``, ``.o``).

A kernel's manifest names each file's sha256; the file is stored under that
hash, so any process that is told the hash finds the file without downloading
it, whichever request produced it. Files are written atomically (a temporary
file in the same directory, then rename), so a reader never sees half a file,
and two processes storing the same file at once both succeed. Every read
re-hashes the file: a corrupt one is removed and the caller fetches it again.

Layout under the root::

    sha256/ab/ab12...      the files, read-only
    refs/<key>.<what>      the sha256 last stored for a kernel's artifact/object
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Callable, Optional, Union

from .errors import IntegrityError

_SHA256 = re.compile(r"[0-9a-f]{64}")
_REF = re.compile(r"[0-9a-f]{64}\.(artifact|object)")


def default_cache_dir() -> Path:
    """``$KFORGE_CLIENT_CACHE``, else ``$XDG_CACHE_HOME/kforge-client``, else ``~/.cache/kforge-client``."""
    explicit = os.environ.get("KFORGE_CLIENT_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg if xdg else Path.home() / ".cache") / "kforge-client"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes, mode: int) -> None:
    """Writes ``path`` whole or not at all: a temporary file beside it, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class ArtifactCache:
    """Files by sha256 under ``root``; ``count("corrupt_removed")`` is called per corrupt file."""

    def __init__(self, root: Union[str, "os.PathLike[str]", None] = None,
                 count: Optional[Callable[[str], None]] = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self._count = count or (lambda name: None)

    def path_for(self, sha256: str) -> Path:
        if not _SHA256.fullmatch(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.root / "sha256" / sha256[:2] / sha256

    def get(self, sha256: str) -> Optional[Path]:
        """The verified file with this hash, or None (a corrupt one is removed first)."""
        path = self.path_for(sha256)
        try:
            actual = sha256_file(path)
        except FileNotFoundError:
            return None
        if actual == sha256:
            return path
        path.unlink(missing_ok=True)
        self._count("corrupt_removed")
        return None

    def put(self, sha256: str, data: bytes) -> Path:
        """Stores ``data`` under ``sha256`` after checking that it hashes to it."""
        path = self.path_for(sha256)
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise IntegrityError(f"downloaded {len(data)} bytes hash to {actual}, "
                                 f"not the announced {sha256}")
        atomic_write(path, data, 0o444)
        return path

    def remember(self, key: str, what: str, sha256: str) -> None:
        """Records that kernel ``key``'s ``what`` (artifact/object) is the file ``sha256``."""
        self.path_for(sha256)  # validates the digest
        atomic_write(self._ref_path(key, what), sha256.encode(), 0o644)

    def recall(self, key: str, what: str) -> Optional[str]:
        """The sha256 recorded for kernel ``key``'s ``what``, or None."""
        try:
            sha = self._ref_path(key, what).read_text().strip()
        except FileNotFoundError:
            return None
        return sha if _SHA256.fullmatch(sha) else None

    def _ref_path(self, key: str, what: str) -> Path:
        name = f"{key}.{what}"
        if not _REF.fullmatch(name):
            raise ValueError(f"not a kernel key and file kind: {name!r}")
        return self.root / "refs" / name
