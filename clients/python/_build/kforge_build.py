"""An in-tree PEP 517 build backend for the kforge client, standard library only.

The package is pure Python with no dependencies, so building it needs no setuptools: with
`requires = []` in pyproject.toml, `pip install ./clients/python` works offline, with build
isolation, on any pip that speaks PEP 517 (no index is ever asked for a build tool).
The wheel is `kforge/*.py` plus the dist-info files the wheel format requires (PEP 427).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
NAME = "kforge"


def _version() -> str:
    text = (ROOT / NAME / "_version.py").read_text(encoding="utf-8")
    m = re.search(r'__version__\s*=\s*"([^"]+)"', text)
    if not m:
        raise RuntimeError("kforge/_version.py has no __version__")
    return m.group(1)


def _metadata() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            "Summary: Client for the kforge remote kernel compilation service\n"
            "Requires-Python: >=3.9\nProvides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n"
            "Provides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n"
            "Description-Content-Type: text/markdown\n\n" + readme)


def _sources() -> List[Path]:
    return sorted(p for p in (ROOT / NAME).rglob("*.py") if "__pycache__" not in p.parts)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory: str, editable: bool) -> str:
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    filename = f"{NAME}-{version}-py3-none-any.whl"
    files: Dict[str, bytes] = {}
    if editable:  # PEP 660: a .pth file that puts this checkout on sys.path
        files[f"__editable__.{NAME}.pth"] = (str(ROOT) + "\n").encode()
    else:
        for p in _sources():
            files[p.relative_to(ROOT).as_posix()] = p.read_bytes()
    files[f"{dist_info}/METADATA"] = _metadata().encode()
    files[f"{dist_info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: kforge_build\n"
                                   b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = os.path.join(wheel_directory, filename)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(n, d)
    return filename


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, editable=False)


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, editable=True)


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    base = f"{NAME}-{_version()}"
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as t:
        for p in _sources() + [ROOT / "pyproject.toml", ROOT / "README.md", Path(__file__)]:
            t.add(p, arcname=f"{base}/{p.relative_to(ROOT).as_posix()}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        import io
        t.addfile(info, io.BytesIO(data))
    return filename
