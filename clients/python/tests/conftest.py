"""Fixtures: a real ``kforge serve`` (cpu backend) per session, and clients of it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's kforge

import kforge  # noqa: E402
from support import Server  # noqa: E402


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("server"))
    yield s
    s.stop()


@pytest.fixture
def client_cache(tmp_path: Path) -> Path:
    """A fresh local file cache per test, so cache counts start at zero."""
    return tmp_path / "client-cache"


@pytest.fixture
def client(server: Server, client_cache: Path) -> kforge.Client:
    return kforge.Client(server.url, cache_dir=client_cache, timeout=60, retries=2)
