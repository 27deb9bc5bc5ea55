"""Bearer tokens against a server started with --token-file (docs/SECURITY.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import kforge
from support import DOUBLE_SOURCE, Server

READ_TOKEN = "read-token-0123456789abcdef"
SUBMIT_TOKEN = "submit-token-0123456789abcdef"


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("auth")
    tokens = workdir / "tokens"
    tokens.write_text(f"# role:token\nread:{READ_TOKEN}\nsubmit:{SUBMIT_TOKEN}\n")
    s = Server(workdir, ["--token-file", str(tokens)])
    yield s
    s.stop()


def test_no_token_is_unauthorized(auth_server: Server, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFORGE_TOKEN", raising=False)
    c = kforge.Client(auth_server.url, cache_dir=tmp_path)
    assert c.health()["status"] == "ok"  # open without a token
    with pytest.raises(kforge.Unauthorized) as e:
        c.toolchains()
    assert e.value.status == 401 and e.value.problem["status"] == 401
    assert c.stats["retries"] == 0


def test_read_token_may_not_submit(auth_server: Server, tmp_path: Path) -> None:
    c = kforge.Client(auth_server.url, token=READ_TOKEN, cache_dir=tmp_path)
    assert "cpu" in c.toolchains()
    with pytest.raises(kforge.Forbidden):
        c.compile(DOUBLE_SOURCE, backend="cpu")


def test_submit_token_from_the_environment_compiles_and_downloads(
        auth_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFORGE_URL", auth_server.url)
    monkeypatch.setenv("KFORGE_TOKEN", SUBMIT_TOKEN)
    c = kforge.Client(cache_dir=tmp_path)
    k = c.compile(DOUBLE_SOURCE, backend="cpu", wait=False, progress=False)  # events need it too
    x = np.arange(5, dtype=np.float32)
    y = np.zeros_like(x)
    k(x, y, 5)  # the artifact download is authorized as well
    np.testing.assert_array_equal(y, 2 * x)
