"""The in-tree build backend: the wheel pip would install, built and imported here (pip
itself is not needed: Debian's python3 has none; the README's venv command uses it)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_build"))

import kforge  # noqa: E402
import kforge_build  # noqa: E402


def test_wheel_holds_the_package_and_a_correct_record(tmp_path: Path) -> None:
    assert kforge_build.get_requires_for_build_wheel() == []  # nothing to fetch: works offline
    name = kforge_build.build_wheel(str(tmp_path))
    assert name == f"kforge-{kforge.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        assert {"kforge/__init__.py", "kforge/inductor.py", "kforge/client.py"} <= names
        info = f"kforge-{kforge.__version__}.dist-info"
        assert f"Version: {kforge.__version__}" in z.read(f"{info}/METADATA").decode()
        for line in z.read(f"{info}/RECORD").decode().splitlines():
            path, digest, size = line.split(",")
            if not digest:
                continue
            data = z.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + want and int(size) == len(data), path
        z.extractall(tmp_path / "site")
    out = subprocess.run([sys.executable, "-c", "import kforge, kforge.inductor; print(kforge.__file__)"],
                         cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")}, capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith(str(tmp_path / "site"))


def test_sdist_rebuilds_the_same_package(tmp_path: Path) -> None:
    import tarfile

    name = kforge_build.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / name) as t:
        members = t.getnames()
    base = name[: -len(".tar.gz")]
    assert f"{base}/pyproject.toml" in members and f"{base}/_build/kforge_build.py" in members
    assert f"{base}/kforge/inductor.py" in members and f"{base}/PKG-INFO" in members
