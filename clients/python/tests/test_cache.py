"""The local content-addressed cache: shared across processes, verified on read."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import kforge
from kforge.cache import ArtifactCache, default_cache_dir
from support import DOUBLE_SOURCE, Server, run_python, scaled_source

SECOND_PROCESS = """
import json
import kforge
client = kforge.Client()  # KFORGE_URL and KFORGE_CLIENT_CACHE from the environment
k = client.compile({source!r}, backend="cpu")
k.path()
print(json.dumps({{"cache": k.cache, "stats": client.stats}}))
"""


def test_second_process_downloads_no_artifact(server: Server, client: kforge.Client,
                                              client_cache: Path) -> None:
    k = client.compile(scaled_source(11), backend="cpu")
    k.path()
    assert client.stats["artifact_downloads"] == 1
    assert client.stats["bytes_downloaded"] == k.manifest["artifact"]["bytes"]

    code = SECOND_PROCESS.format(source=scaled_source(11))
    out = run_python(code, env={"KFORGE_URL": server.url,
                                "KFORGE_CLIENT_CACHE": str(client_cache)})
    assert out.returncode == 0, out.stderr
    second = json.loads(out.stdout)
    assert second["cache"] == "hit"  # the server's cache
    assert second["stats"]["artifact_hits"] == 1  # ours: found locally by sha256
    assert second["stats"]["artifact_downloads"] == 0
    assert second["stats"]["bytes_downloaded"] == 0


def test_corrupt_local_file_is_removed_and_fetched_again(client: kforge.Client) -> None:
    k = client.compile(DOUBLE_SOURCE, backend="cpu", options={"aot": True})
    path, obj = k.path(), k.object_path()
    good = path.read_bytes()
    os.chmod(path, 0o644)
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))

    again = client.kernel(k.key).path()
    assert again == path and again.read_bytes() == good
    assert client.stats["corrupt_removed"] == 1
    assert client.stats["artifact_downloads"] == 2
    assert k.object_path() == obj and client.stats["object_hits"] == 1
    assert hashlib.sha256(obj.read_bytes()).hexdigest() == k.manifest["object"]["sha256"]


def test_fetch_by_key_is_conditional(client: kforge.Client) -> None:
    k = client.compile(DOUBLE_SOURCE, backend="cpu")
    first = client.fetch(k.key)  # nothing recorded locally: a plain download
    assert client.stats["artifact_downloads"] == 1
    downloaded = client.stats["bytes_downloaded"]

    assert client.fetch(k.key) == first  # If-None-Match with the local hash: 304
    assert client.stats["not_modified"] == 1
    assert client.stats["bytes_downloaded"] == downloaded
    assert k.path() == first and client.stats["artifact_hits"] == 1


def test_store_refuses_bytes_that_do_not_match_their_hash(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    data = b"kernel bytes"
    sha = hashlib.sha256(data).hexdigest()
    with pytest.raises(kforge.IntegrityError):
        cache.put(sha, data + b"!")
    assert cache.get(sha) is None
    path = cache.put(sha, data)
    assert cache.get(sha) == path and path.read_bytes() == data
    assert [p.name for p in path.parent.iterdir()] == [sha]  # no temporary left behind
    with pytest.raises(ValueError):
        cache.path_for("../../etc/passwd")


def test_default_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.delenv("KFORGE_CLIENT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "kforge-client"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "kforge-client"
    monkeypatch.setenv("KFORGE_CLIENT_CACHE", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
