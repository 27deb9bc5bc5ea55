"""kforge: the Python client of the kforge remote kernel compilation service.

>>> import kforge, numpy as np
>>> client = kforge.Client("http://127.0.0.1:8080")
>>> k = client.compile(SOURCE, backend="cpu")
>>> x = np.arange(8, dtype=np.float32); y = np.empty_like(x)
>>> k(x, y, x.size)
"""

from ._version import __version__
from .abi import Abi, Arg
from .cache import ArtifactCache, default_cache_dir
from .client import Client, kernel_request
from .errors import (BadRequest, CompileError, ConnectionFailed, Forbidden, IntegrityError,
                     KforgeError, NotFound, Stalled, Unauthorized, Unavailable)
from .kernel import Kernel
from .prefetch import Recorder, load_manifest

__all__ = [
    "__version__", "Abi", "Arg", "ArtifactCache", "default_cache_dir", "Client",
    "kernel_request", "Kernel", "KforgeError", "BadRequest", "CompileError", "Unauthorized",
    "Forbidden", "NotFound", "Unavailable", "ConnectionFailed", "Stalled", "IntegrityError",
    "Recorder", "load_manifest",
]
