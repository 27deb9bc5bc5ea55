"""Recording a client's requests, turning them into a manifest, and prefetching it on a
fresh server (a new host), through Client.prefetch and ``python -m kforge prefetch``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

import kforge
from kforge.prefetch import Recorder, load_manifest, read_requests
from support import DOUBLE_SOURCE, Server, run_cli, scaled_source


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Server]:
    """A second server with an empty cache: the host to warm."""
    s = Server(tmp_path / "fresh", ["--compile-jobs", "2"])
    yield s
    s.stop()


def test_recorded_requests_prefetch_a_fresh_server(server: Server, fresh_server: Server,
                                                   tmp_path: Path) -> None:
    record = tmp_path / "model.jsonl"
    client = kforge.Client(server.url, cache_dir=tmp_path / "c1", record=record)
    sources = [DOUBLE_SOURCE, scaled_source(31), scaled_source(32)]
    for src in sources + [DOUBLE_SOURCE]:  # the repeat is recorded once
        client.compile(src, backend="cpu")
    lines = record.read_text().splitlines()
    assert len(lines) == 3
    assert all("wait_ms" not in json.loads(line) for line in lines)
    # A second recorder on the same file (another process, a rerun) adds nothing known.
    assert not Recorder(record).record(json.loads(lines[0]))

    manifest = load_manifest(record)
    assert manifest["format"] == "kforge-prefetch/1"
    assert manifest["label"] == "model.jsonl"
    assert [r["source"] for r in manifest["requests"]] == sources

    warm = kforge.Client(fresh_server.url, cache_dir=tmp_path / "c2")
    result = warm.prefetch(manifest, progress=False)
    assert (result["total"], result["built"], result["hit"], result["failed"]) == (3, 3, 0, 0)
    assert [e["outcome"] for e in result["entries"]] == ["built"] * 3
    # What the model will ask for is now answered from the cache.
    for src in sources:
        assert warm.compile(src, backend="cpu").cache == "hit"
    again = warm.prefetch(manifest["requests"], progress=False)
    assert again["hit"] == 3 and again["built"] == 0


def test_record_from_the_environment_and_the_cli(fresh_server: Server, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "env.jsonl"
    monkeypatch.setenv("KFORGE_RECORD", str(record))
    client = kforge.Client(fresh_server.url, cache_dir=tmp_path / "c")
    client.compile(scaled_source(41), backend="cpu")
    assert len(read_requests(record)) == 1
    monkeypatch.delenv("KFORGE_RECORD")

    # Add a request that does not compile (a JSON line written by hand).
    broken = {"backend": "cpu", "source": scaled_source(42).replace("return 0;\n}", "return 0\n}"),
              "label": "broken"}
    with open(record, "a") as f:
        f.write(json.dumps(broken) + "\n")
    env = {"KFORGE_URL": fresh_server.url, "KFORGE_CLIENT_CACHE": str(tmp_path / "cli-cache")}
    r = run_cli("prefetch", str(record), env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2/2 requests" in r.stdout and "1 hit, 0 built, 1 failed" in r.stdout, r.stdout
    assert "failed #1 broken: " in r.stdout and "error" in r.stdout, r.stdout

    out = tmp_path / "manifest.json"
    r = run_cli("manifest", str(record), "-o", str(out), env={})
    assert r.returncode == 0, r.stderr
    assert len(json.loads(out.read_text())["requests"]) == 2


def test_a_malformed_entry_is_refused_naming_it(fresh_server: Server, tmp_path: Path) -> None:
    client = kforge.Client(fresh_server.url, cache_dir=tmp_path / "c")
    good = {"backend": "cpu", "source": DOUBLE_SOURCE}
    with pytest.raises(kforge.BadRequest) as e:
        client.prefetch([good, {"backend": "cpu", "source": DOUBLE_SOURCE, "optoins": {}}])
    assert e.value.problem["errors"][0]["field"] == "/requests/1/optoins"
