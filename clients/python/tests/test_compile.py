"""Compiling (source and template mode), loading and calling, following async jobs."""

from __future__ import annotations

import io
from typing import Any, Dict

import numpy as np
import pytest

import kforge
from kforge._jobs import Progress, _poll
from support import DOUBLE_SOURCE, scaled_source

GEMM: Dict[str, Any] = dict(
    backend="cpu", template="gemm",
    inputs=[{"name": "a", "dtype": "float32", "sizes": [64, 64], "strides": [64, 1]},
            {"name": "b", "dtype": "float32", "sizes": [64, 64], "strides": [64, 1]}],
    output={"name": "c", "dtype": "float32", "sizes": [64, 64], "strides": [64, 1]})


def test_source_mode_compile_load_and_call(client: kforge.Client) -> None:
    k = client.compile(DOUBLE_SOURCE, backend="cpu", arch="native")
    assert k.name.startswith("cpu_kernel_") and len(k.key) == 64
    assert k.cache in ("hit", "miss")
    assert [a.kind for a in k.abi.args] == ["tensor", "tensor", "scalar", "workspace_size",
                                            "workspace", "stream"]
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros_like(x)
    k(x, y, x.size)
    np.testing.assert_array_equal(y, 2 * x)
    assert k.workspace_size(x.size) == 0
    assert k.path().name == k.manifest["artifact"]["sha256"]
    assert "2 * x[i]" in k.source() and "KERNEL_NAME" not in k.source()


def test_call_checks_arguments_against_the_abi(client: kforge.Client) -> None:
    k = client.compile(DOUBLE_SOURCE, backend="cpu")
    x = np.arange(8, dtype=np.float32)
    y = np.zeros_like(x)
    with pytest.raises(TypeError, match=r"takes 3 arguments \(x, y, n\), got 2"):
        k(x, y)
    with pytest.raises(ValueError, match="argument x is not contiguous"):
        k(np.arange(16, dtype=np.float32)[::2], y, 8)
    with pytest.raises(ValueError, match="argument x is float64; the kernel takes float32"):
        k(x.astype(np.float64), y, 8)
    with pytest.raises(TypeError, match="takes an integer"):
        k(x, y, 8.0)
    frozen = y.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        k(x, frozen, 8)


def test_template_gemm_matches_numpy(client: kforge.Client) -> None:
    k = client.compile(**GEMM)
    assert k.name.startswith("cpu_gemm_")
    fixed = {a.name: a.value for a in k.abi.params if a.kind == "scalar"}
    assert fixed == {"M": 64, "N": 64, "K": 64, "batch": 1}
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64), dtype=np.float32)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    c = np.zeros((64, 64), dtype=np.float32)
    k(a, b, c)  # M, N, K, batch are fixed by the template: left out
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert k.workspace_size() == k.abi.workspace_bytes


def test_render_is_a_dry_run(client: kforge.Client) -> None:
    r = client.render(scaled_source(31), backend="cpu")
    assert r["kernel_name"] in r["source"] and "KERNEL_NAME" not in r["source"]
    with pytest.raises(kforge.NotFound):
        client.kernel(r["key"])  # nothing was built


def test_async_compile_follows_the_job_events(client: kforge.Client) -> None:
    k = client.compile(scaled_source(7), backend="cpu", wait=False, progress=False)
    assert k.cache == "miss"  # built by the job that answered 202
    x = np.ones(4, dtype=np.float32)
    y = np.zeros_like(x)
    k(x, y, 4)
    np.testing.assert_array_equal(y, 7 * x)

    # The job is listed, and following a finished one returns at once, with its result.
    jobs = client.jobs(limit=10)["jobs"]
    job = next(j for j in jobs if j.get("key") == k.key and j.get("cache") == "miss")
    done = client.follow(job["id"], progress=False)
    assert done["state"] == "done" and done["http_status"] == 200
    assert done["result"]["key"] == k.key
    assert _poll(client._http, job["id"], Progress(False))["state"] == "done"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_only_when_asked_or_on_a_terminal(client: kforge.Client,
                                                        capsys: pytest.CaptureFixture) -> None:
    client.compile(scaled_source(8), backend="cpu", wait=False)  # stderr is not a tty here
    assert capsys.readouterr().err == ""
    client.compile(scaled_source(9), backend="cpu", wait=False, progress=True)
    err = capsys.readouterr().err
    assert "\r" in err and " done " in err and err.endswith("\n")

    terminal = _Terminal()
    p = Progress(None, terminal)
    p.update({"id": "j1", "state": "compiling", "kernel_name": "k"})
    p.close()
    assert terminal.getvalue().startswith("\rkforge: job j1 compiling")
    assert not Progress(None, io.StringIO()).enabled


def test_kernel_lookup_by_key(client: kforge.Client) -> None:
    k = client.compile(DOUBLE_SOURCE, backend="cpu")
    again = client.kernel(k.key)
    assert again.key == k.key and again.cache is None
    assert again.abi == k.abi
    assert "g++" in again.log()


def test_autotune_ranks_the_choices(client: kforge.Client) -> None:
    choices = client.template("gemm")["backends"]["cpu"]["default_choices"][:2]
    ranking = client.autotune(backend="cpu", template="gemm", inputs=GEMM["inputs"],
                              output=GEMM["output"], choices=choices,
                              benchmark={"budget_ms": 10})
    assert sorted(c["rank"] for c in ranking["choices"]) == [1, 2]
    assert ranking["winner"]["params"] in choices
    assert client.kernel(ranking["winner"]["key"]).name == ranking["winner"]["kernel_name"]
