"""Problem JSON from the server becomes the matching exception, with what it said."""

from __future__ import annotations

import pytest

import kforge
from support import DOUBLE_SOURCE

BROKEN_SOURCE = DOUBLE_SOURCE.replace("y[i] = 2 * x[i]", "y[i] = undeclared_thing[i]")


def test_bad_arch_is_a_bad_request_naming_arch(client: kforge.Client) -> None:
    with pytest.raises(kforge.BadRequest) as e:
        client.compile(DOUBLE_SOURCE, backend="cpu", arch="no-such-cpu")
    assert e.value.status == 400
    assert e.value.fields == ["/arch"]
    assert str(e.value).startswith("/arch: ")
    assert "no-such-cpu" in str(e.value)
    assert "x86-64-v3" in e.value.problem["accepted_archs"]  # the whole problem is kept


def test_unknown_field_is_named(client: kforge.Client) -> None:
    with pytest.raises(kforge.BadRequest) as e:
        client.compile_request({"backend": "cpu", "source": DOUBLE_SOURCE, "optoins": {}})
    assert e.value.fields == ["/optoins"]


@pytest.mark.parametrize("wait", [True, False], ids=["sync", "async"])
def test_compile_failure_carries_the_log(client: kforge.Client, wait: bool) -> None:
    # Its own source per case: a repeated failure is answered from the negative cache at
    # once, and the async case must fail inside its job.
    name = f"undeclared_{'sync' if wait else 'async'}"
    with pytest.raises(kforge.CompileError) as e:
        client.compile(BROKEN_SOURCE.replace("undeclared_thing", name), backend="cpu",
                       wait=wait, progress=False)
    err = e.value
    assert err.status == 422
    assert name in err.log and "error:" in err.log
    assert err.argv and "g++" in err.argv[0]
    assert err.key and len(err.key) == 64
    assert name in str(err)


def test_unknown_kernel_is_not_found(client: kforge.Client) -> None:
    with pytest.raises(kforge.NotFound) as e:
        client.kernel("0" * 64)
    assert e.value.problem["status"] == 404
