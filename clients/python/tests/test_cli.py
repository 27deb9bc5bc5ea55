"""``python -m kforge`` in a subprocess: compile --out, get, jobs, job, explain, where the
global options go, and the exit statuses it shares with the ``kforge`` executable."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

from support import DOUBLE_SOURCE, Server, run_cli, scaled_source, write_request


@pytest.fixture
def env(server: Server, tmp_path: Path) -> Dict[str, str]:
    return {"KFORGE_URL": server.url, "KFORGE_CLIENT_CACHE": str(tmp_path / "client-cache")}


def test_compile_writes_the_kernel_files(env: Dict[str, str], tmp_path: Path) -> None:
    req = write_request(tmp_path / "req.json", {
        "backend": "cpu", "arch": "native", "source": DOUBLE_SOURCE,
        "options": {"opt_level": "O3", "aot": True}})
    out = tmp_path / "out"
    r = run_cli("compile", str(req), "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr
    manifest = json.loads(next(out.glob("*.json")).read_text())
    name = manifest["kernel_name"]
    assert f"kernel   {name}" in r.stdout
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{name}.so", f"{name}.o", f"{name}.cpp", f"{name}_wrapper.py", f"{name}.h",
         f"{name}.json"])
    so = (out / f"{name}.so").read_bytes()
    assert hashlib.sha256(so).hexdigest() == manifest["artifact"]["sha256"]

    # The server's own wrapper, saved beside the .so, calls it.
    spec = importlib.util.spec_from_file_location("wrapper", out / f"{name}_wrapper.py")
    assert spec is not None and spec.loader is not None
    wrapper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wrapper)

    x = np.arange(6, dtype=np.float32)
    y = np.zeros_like(x)
    getattr(wrapper, name)(x, y, 6)  # numpy arrays (and torch tensors: test_call_checks.py)
    np.testing.assert_array_equal(y, 2 * x)


def test_get_and_jobs(env: Dict[str, str], tmp_path: Path) -> None:
    req = write_request(tmp_path / "req.json", {"backend": "cpu", "source": scaled_source(41)})
    r = run_cli("--no-progress", "compile", str(req), "--no-wait", env=env)
    assert r.returncode == 0, r.stderr
    key = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("key "))
    assert "local    " in r.stdout and r.stderr == ""

    out = tmp_path / "got"
    r = run_cli("get", key, "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr
    assert len(list(out.glob("*.so"))) == 1

    r = run_cli("jobs", "--limit", "5", env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["ID", "KIND", "STATE", "CACHE", "HTTP", "KERNEL"]
    assert lines[-1].startswith("queue: ")
    job_id = next(line.split()[0] for line in lines[1:] if " miss " in line and
                  key[:12] in line)

    r = run_cli("job", job_id, "--follow", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["result"]["key"] == key


def test_exit_codes(env: Dict[str, str], tmp_path: Path) -> None:
    """0 ok, 1 an answer to read, 2 a usage error, 3 no answer: as `kforge` has them."""
    bad = write_request(tmp_path / "bad.json", {"backend": "cpu", "arch": "no-such-cpu",
                                                "source": DOUBLE_SOURCE})
    r = run_cli("compile", str(bad), env=env)
    assert r.returncode == 1, r.stderr  # a 400 is an answer to read
    assert '"field": "/arch"' in r.stderr  # the problem, printed

    broken = write_request(tmp_path / "broken.json", {
        "backend": "cpu", "source": DOUBLE_SOURCE.replace("2 * x[i]", "cli_undeclared")})
    r = run_cli("compile", str(broken), env=env)
    assert r.returncode == 1 and "cli_undeclared" in r.stderr and "error:" in r.stderr

    r = run_cli("--retries", "0", "--server", "http://127.0.0.1:9", "toolchains", env={})
    assert r.returncode == 3 and "no answer" in r.stderr and "Connection refused" in r.stderr

    for args in (["compile", str(tmp_path / "missing.json")],  # a file that cannot be read
                 ["compile", str(write_request(tmp_path / "list.json", []))],  # not a request
                 ["explain", str(tmp_path / "missing.json")],
                 ["compile"],  # no file
                 ["compile", str(broken), "--no-such-flag"],
                 ["no-such-command"]):
        r = run_cli(*args, env=env)
        assert r.returncode == 2, (args, r.stderr)
    (tmp_path / "text.json").write_text("not json")
    r = run_cli("compile", str(tmp_path / "text.json"), env=env)
    assert r.returncode == 2 and "text.json does not hold a JSON object" in r.stderr, r.stderr
    r = run_cli("toolchains", env={"KFORGE_URL": ""})
    assert r.returncode == 2 and "KFORGE_URL" in r.stderr, r.stderr

    r = run_cli("templates", env=env)
    assert r.returncode == 0 and any(t["name"] == "gemm" for t in json.loads(r.stdout))


def test_global_options_go_before_or_after_the_command(server: Server, tmp_path: Path) -> None:
    env = {"KFORGE_URL": "http://127.0.0.1:9", "KFORGE_CLIENT_CACHE": str(tmp_path / "cc")}
    r = run_cli("toolchains", "--server", server.url, "--retries", "0", env=env)
    assert r.returncode == 0, r.stderr
    assert "cpu" in json.loads(r.stdout)
    # Given after the command, it wins over the same option given before it.
    r = run_cli("--server", "http://127.0.0.1:9", "--retries", "0", "templates", "--server", server.url, env=env)
    assert r.returncode == 0, r.stderr
    # ... and one given only before it is kept.
    r = run_cli("--server", server.url, "templates", "--no-progress", env=env)
    assert r.returncode == 0, r.stderr


def test_submit_is_compile_and_explain_says_why(env: Dict[str, str], tmp_path: Path) -> None:
    req = write_request(tmp_path / "req.json", {"backend": "cpu", "source": scaled_source(43)})
    r = run_cli("explain", str(req), env=env)
    assert r.returncode == 0, r.stderr
    assert "cache    miss" in r.stdout and "key      " in r.stdout

    r = run_cli("submit", str(req), "--no-progress", env=env)
    assert r.returncode == 0, r.stderr
    key = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("key "))

    r = run_cli("explain", str(req), "--json", env=env)
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["cache"] == "hit" and answer["key"] == key

    other = write_request(tmp_path / "other.json", {"backend": "cpu", "source": scaled_source(43),
                                                    "options": {"opt_level": "O1"}})
    r = run_cli("explain", str(other), env=env)
    assert r.returncode == 0, r.stderr
    assert "cache    miss" in r.stdout and "\nwhy\n" in r.stdout and "flags: was" in r.stdout, r.stdout
