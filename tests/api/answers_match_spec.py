#!/usr/bin/python3
"""Every answer a real `kforge serve` gives is one api/openapi.json describes (issue 40).

Starts the server (port 0, a fresh cache, a token file with a token per role), sends a
request for each route and for each way it can answer (success, 304, 206, 416, HEAD, 202,
400, 401, 403, 404, 413, 422, 503, the front's 405), and checks each answer against the
spec: its status is declared for that operation (the front's own refusals, 405 and the
connection cap's 503, fall under the operation's `default`), its Content-Type is a declared
media type, every header the spec marks required is there, and a JSON body validates
against the declared schema (JSON Schema 2020-12, python3-jsonschema). It also checks that
request bodies the server accepts validate against the request schemas, and that bodies it
refuses on their shape are refused by the schema too.

    /usr/bin/python3 tests/api/answers_match_spec.py KFORGE_BINARY [SPEC]
    /usr/bin/python3 tests/api/answers_match_spec.py --dump KFORGE_BINARY   # print the answers
"""

from __future__ import annotations

import http.client
import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import jsonschema

REPO = Path(__file__).resolve().parents[2]
TOKENS = {"read": "read-token-0123456789", "submit": "submit-token-0123456789",
          "admin": "admin-token-0123456789"}
MAX_BODY = 64 * 1024

SOURCE = ("#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
          "extern \"C\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, "
          "uint8_t* workspace, void* stream) {\n  if (workspace_size) { *workspace_size = 0; return 0; }\n"
          "  for (int64_t i = 0; i < n; ++i) y[i] = FACTOR * x[i];\n  return 0;\n}\n")


def source_request(factor: str, **extra: Any) -> Dict[str, Any]:
    return {"backend": "cpu", "arch": "native", "source": SOURCE.replace("FACTOR", factor), **extra}


def tensor(name: str, n: int = 16) -> Dict[str, Any]:
    return {"name": name, "dtype": "float32", "sizes": [n, n], "strides": [n, 1]}


GEMM = {"backend": "cpu", "arch": "native", "template": "gemm", "inputs": [tensor("a"), tensor("b")],
        "output": tensor("c")}
SLOW = ("#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
        "constexpr uint64_t burn(uint64_t x) {\n  for (int i = 0; i < 10; ++i)\n"
        "    for (int j = 0; j < 50000; ++j) x = x * 6364136223846793005ull + SALT;\n  return x;\n}\n"
        "constexpr uint64_t kBurnt = burn(1);\n"
        "extern \"C\" PT_EXPORT int KERNEL_NAME(float* y, size_t* workspace_size, uint8_t* workspace, void* stream) {\n"
        "  if (workspace_size) { *workspace_size = 0; return 0; }\n  y[0] = float(kBurnt & 0xff);\n  return 0;\n}\n")


class Server:
    """`kforge serve` on a free port; the first line it prints is its address."""

    def __init__(self, binary: str, root: Path, args: List[str]) -> None:
        self.log = open(root / "server.log", "ab")
        argv = [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--cache-dir", str(root / "cache"), *args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log)
        line = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n") and sel.select(60):
                c = os.read(self.proc.stdout.fileno(), 1)
                if not c:
                    break
                line += c
        m = re.match(rb"listening on http://([^:]+):(\d+)", line)
        if not m:
            self.stop()
            raise SystemExit(f"kforge serve did not start: {line!r}\n" + (root / "server.log").read_text()[-3000:])
        self.host, self.port = m.group(1).decode(), int(m.group(2))
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Answer:
    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)


def request(server: Server, method: str, path: str, body: Optional[bytes] = None,
            headers: Optional[Dict[str, str]] = None, role: Optional[str] = "admin") -> Answer:
    h = dict(headers or {})
    if role:
        h.setdefault("Authorization", f"Bearer {TOKENS[role]}")
    if body is not None:
        h.setdefault("Content-Type", "application/json")
    c = http.client.HTTPConnection(server.host, server.port, timeout=120)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    answer = Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    c.close()
    return answer


def raw(server: Server, data: bytes) -> Answer:
    """Bytes as they are, for what http.client would not send; the first answer."""
    with socket.create_connection((server.host, server.port), timeout=30) as s:
        s.sendall(data)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        n = int(headers.get("content-length", "0"))
        while len(body) < n:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
        return Answer(int(lines[0].split()[1]), headers, body[:n])


# ---- the spec

class Spec:
    def __init__(self, path: Path) -> None:
        self.doc = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema({"$defs": self.doc["components"]["schemas"]})
        self.resolver = jsonschema.RefResolver("", self.doc)
        self.paths = [(re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", p) + "$"), p) for p in self.doc["paths"]]

    def operation(self, method: str, path: str) -> Tuple[str, Dict[str, Any]]:
        bare = path.split("?")[0]
        # A literal path wins over a templated one (/kernels over /kernels/{key}).
        matches = [p for rx, p in self.paths if rx.match(bare)]
        if not matches:
            raise AssertionError(f"{method} {bare}: no path of the spec matches")
        p = sorted(matches, key=lambda x: x.count("{"))[0]
        op = self.doc["paths"][p].get(method.lower())
        if op is None:
            raise AssertionError(f"{method} {p}: not in the spec")
        return p, op

    def deref(self, obj: Dict[str, Any]) -> Dict[str, Any]:
        while "$ref" in obj:
            _, obj = self.resolver.resolve(obj["$ref"])
        return obj

    def validate(self, schema: Dict[str, Any], instance: Any, what: str) -> None:
        v = jsonschema.Draft202012Validator(schema, resolver=self.resolver)
        errors = sorted(v.iter_errors(instance), key=lambda e: list(e.path))
        if errors:
            e = errors[0]
            raise AssertionError(f"{what}: {e.message[:400]} at /{'/'.join(map(str, e.path))} "
                                 f"(schema {'/'.join(map(str, e.schema_path))})")

    def check(self, method: str, path: str, answer: Answer, front: bool = False) -> str:
        p, op = self.operation(method, path)
        what = f"{method} {path} -> {answer.status}"
        responses = op["responses"]
        key = str(answer.status)
        if key not in responses:
            if not front or "default" not in responses:
                raise AssertionError(f"{what}: status not declared for {method} {p} "
                                     f"(declared: {', '.join(responses)})")
            key = "default"
        resp = self.deref(responses[key])
        for name, h in resp.get("headers", {}).items():
            h = self.deref(h)
            if h.get("required") and name.lower() not in answer.headers:
                raise AssertionError(f"{what}: required header {name} missing ({sorted(answer.headers)})")
            if name.lower() in answer.headers and "schema" in h:
                self.validate(h["schema"], answer.headers[name.lower()], f"{what}: header {name}")
        content = resp.get("content")
        has_body = method != "HEAD" and answer.status not in (204, 304)
        if not content:
            if has_body and answer.body:
                raise AssertionError(f"{what}: a body ({answer.body[:80]!r}) where the spec declares none")
            return key
        mtype = answer.headers.get("content-type", "").split(";")[0].strip()
        if mtype not in content:
            raise AssertionError(f"{what}: Content-Type {mtype!r} not declared ({', '.join(content)})")
        schema = content[mtype].get("schema")
        if has_body and schema is not None and (mtype.endswith("json")):
            self.validate(schema, json.loads(answer.body), what)
        return key

    def request_schema(self, method: str, path: str) -> Dict[str, Any]:
        _, op = self.operation(method, path)
        return op["requestBody"]["content"]["application/json"]["schema"]


def wait_until_taken(server: Server, job: str, limit_s: float = 120.0) -> None:
    """Waits until a worker has taken the job at `job` (its state is past "queued")."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if request(server, "GET", job).json().get("state") != "queued":
            return
        time.sleep(0.02)
    raise AssertionError(f"{job}: still queued after {limit_s:.0f} s")


# ---- the cases

def main() -> int:
    args = sys.argv[1:]
    dump = "--dump" in args
    args = [a for a in args if a != "--dump"]
    if not args:
        print(__doc__)
        return 2
    binary = args[0]
    spec = Spec(Path(args[1]) if len(args) > 1 else REPO / "api" / "openapi.json")
    root = Path(tempfile.mkdtemp(prefix="kforge-spec-"))
    (root / "tokens").write_text("".join(f"{role}:{t}\n" for role, t in TOKENS.items()))
    server = Server(binary, root, ["--token-file", str(root / "tokens"), "--max-body", str(MAX_BODY),
                                   "--compile-jobs", "1", "--max-queue", "1", "--max-connections-per-client", "64"])
    checked: List[str] = []
    failures: List[str] = []

    def expect(method: str, path: str, status: int, body: Any = None, headers: Optional[Dict[str, str]] = None,
               role: Optional[str] = "admin", front: bool = False, raw_body: Optional[bytes] = None) -> Answer:
        data = raw_body if raw_body is not None else (None if body is None else json.dumps(body).encode())
        a = request(server, method, path, data, headers, role)
        what = f"{method} {path[:70]} -> {a.status}"
        if dump:
            print(f"### {what}\n{dict(a.headers)}\n{a.body[:3000].decode(errors='replace')}\n")
        try:
            if a.status != status:
                raise AssertionError(f"{method} {path}: expected {status}, got {a.status}: {a.body[:300]!r}")
            checked.append(f"{method} {spec.operation(method, path)[0]} {spec.check(method, path, a, front)}")
        except AssertionError as e:
            failures.append(str(e))
        return a

    try:
        key_zero = "0" * 64
        # POST /kernels: a miss, a hit, async (202), a compile error (422), bad requests.
        ok = expect("POST", "/kernels", 200, source_request("2"), role="submit").json()
        key = ok["key"]
        expect("POST", "/kernels", 200, source_request("2"), role="submit")
        async3 = expect("POST", "/kernels", 202, source_request("3"), headers={"Prefer": "respond-async"}, role="submit")
        bad = expect("POST", "/kernels", 422, {"backend": "cpu", "source": SOURCE.replace("FACTOR * x[i];", "x[i]")})
        expect("POST", "/kernels", 400, {"backend": "cpu", "source": "no kernel here"})
        expect("POST", "/kernels", 400, raw_body=b"{not json")
        expect("POST", "/kernels", 413, raw_body=b" " * (MAX_BODY + 1))
        expect("POST", "/kernels", 401, source_request("2"), role=None)
        expect("POST", "/kernels", 403, source_request("2"), role="read")
        expect("POST", "/kernels", 200, raw_body=json.dumps(source_request("2")).encode(),
               headers={"Content-Type": "application/x-www-form-urlencoded"})
        expect("POST", "/kernels", 200, raw_body=json.dumps(source_request("2")).encode(),
               headers={"Content-Type": "text/plain"})
        gemm = expect("POST", "/kernels", 200, dict(GEMM, options={"aot": True})).json()
        # The queue is one worker and one place: a slow build takes the worker, another the
        # place, and a third finds the queue full (503 + Retry-After). The async build above
        # ends first (its event stream ends with it): on a loaded machine it still held the
        # worker when the first slow build came, which then found the queue full.
        # The first slow build must have left the queue for the worker before the second
        # comes: a worker that is still finishing the async build's cache writes, or is not
        # yet scheduled, leaves it waiting, and the second then finds the queue full.
        request(server, "GET", async3.headers["location"] + "/events")
        choices = [{"mr": 4, "nr": 16}]
        for salt in ("11", "12"):
            slow = expect("POST", "/kernels", 202, {"backend": "cpu", "source": SLOW.replace("SALT", salt)},
                          headers={"Prefer": "respond-async"})
            if salt == "11" and slow.status == 202:
                wait_until_taken(server, slow.headers["location"])
        expect("POST", "/kernels", 503, {"backend": "cpu", "source": SLOW.replace("SALT", "13")},
               headers={"Prefer": "respond-async"})
        expect("POST", "/autotune", 503, dict(GEMM, choices=choices))  # the queue is full of slow builds
        expect("GET", "/readyz", 503, role=None)

        # Reads of a kernel and its files.
        expect("GET", f"/kernels/{key}", 200, role="read")
        expect("GET", f"/kernels/{gemm['key']}", 200)
        expect("GET", f"/kernels/{bad.json()['key']}", 200)
        expect("GET", f"/kernels/{key_zero}", 404)
        expect("GET", "/kernels/NOT-A-KEY", 400)
        expect("GET", f"/kernels/{key}", 401, role=None)
        expect("GET", f"/kernels/{key}/why", 200)
        expect("GET", f"/kernels/{key_zero}/why", 404)
        expect("GET", "/kernels/zz/why", 400)
        for sub in ("artifact", "object", "source", "log"):
            k = gemm["key"]
            whole = expect("GET", f"/kernels/{k}/{sub}", 200)
            etag = whole.headers.get("etag", "")
            expect("GET", f"/kernels/{k}/{sub}", 304, headers={"If-None-Match": etag})
            expect("GET", f"/kernels/{k}/{sub}", 206, headers={"Range": "bytes=0-9"})
            expect("GET", f"/kernels/{k}/{sub}", 416, headers={"Range": f"bytes={10**9}-"})
            expect("HEAD", f"/kernels/{k}/{sub}", 200)
            expect("GET", f"/kernels/{key_zero}/{sub}", 404)
            expect("GET", f"/kernels/nothex/{sub}", 400)
            expect("GET", f"/kernels/{k}/{sub}", 401, role=None)
        expect("GET", f"/kernels/{key}/object", 404)  # built without options.aot

        # The list of kernels.
        expect("GET", "/kernels?limit=2", 200, role="read")
        expect("GET", "/kernels?template=gemm&backend=cpu&status=ok", 200)
        expect("GET", "/kernels?limit=0", 400)

        # Render, explain, autotune, prefetch.
        expect("POST", "/render", 200, GEMM, role="submit")
        expect("POST", "/render", 200, source_request("5"))
        expect("POST", "/render", 400, {"backend": "cpu", "template": "gemm"})
        expect("POST", "/explain", 200, source_request("2"))
        expect("POST", "/explain", 200, source_request("6"))
        expect("POST", "/explain", 400, {"backend": "tpu", "source": "x"})
        expect("POST", "/autotune", 400, dict(source_request("2"), choices="default"))
        pf = expect("POST", "/prefetch", 202, {"format": "kforge-prefetch/1", "label": "spec",
                                               "requests": [source_request("2"), dict(source_request("7"), label="seven")]},
                    role="submit").json()
        expect("POST", "/prefetch", 400, {"requests": [{"backend": "cpu"}]})

        # Jobs.
        jobs = expect("GET", "/jobs?limit=50", 200, role="read").json()["jobs"]
        expect("GET", "/jobs?limit=-1", 400)
        expect("GET", "/jobs?limit=0", 400)
        for j in jobs[:6]:
            expect("GET", f"/jobs/{j['id']}", 200)
        expect("GET", f"/jobs/{pf['id']}", 200)
        expect("GET", "/jobs/j999999", 404)
        expect("GET", "/jobs/j999999-b", 404)
        expect("GET", "/jobs/bogus", 400)
        expect("GET", "/jobs/j999999/events", 404)
        # Wait for the slow builds: then the queue has room again.
        for j in jobs:
            request(server, "GET", f"/jobs/{j['id']}/events")
        request(server, "GET", f"/jobs/{pf['id']}/events")
        expect("GET", "/readyz", 200, role=None)
        expect("GET", f"/jobs/{jobs[0]['id']}/events", 200)
        expect("GET", f"/jobs/{jobs[0]['id']}/events", 400, headers={"Last-Event-ID": "x"})
        tuned = expect("POST", "/autotune", 200, dict(GEMM, choices=choices, benchmark={"budget_ms": 5}), role="submit")
        expect("GET", f"/kernels/{tuned.json()['winner']['key']}", 200)

        # Templates, toolchains, status, health, metrics, the spec, problem types.
        expect("GET", "/templates", 200, role="read")
        expect("GET", "/templates/gemm", 200)
        expect("GET", "/templates/conv", 404)
        expect("GET", "/toolchains", 200, role="read")
        expect("GET", "/toolchains", 401, role=None)
        expect("GET", "/status", 200, role="read")
        expect("GET", "/healthz", 200, role=None)
        expect("GET", "/metrics", 200, role="read")
        expect("GET", "/openapi.json", 200, role=None)
        expect("GET", "/problems/compile-failed", 200, role=None)
        expect("GET", "/problems/nothing", 404, role=None)

        # The page.
        expect("GET", "/", 200, role=None)
        for f in ("app.js", "style.css"):
            expect("GET", f"/web/{f}", 200, role=None)
        for f in ("chart.min.js", "highlight.min.js", "highlight.css"):
            expect("GET", f"/vendor/{f}", 200, role=None)
        expect("GET", "/web/missing.js", 404, role=None)
        expect("HEAD", "/web/app.js", 200, role=None)

        # Cache export and import (role admin).
        export = expect("GET", "/cache/export?match=backend=cpu", 200)
        expect("GET", "/cache/export?colour=red", 400)
        expect("GET", "/cache/export", 403, role="submit")
        expect("POST", "/cache/import", 200, raw_body=export.body, headers={"Content-Type": "application/zstd"})
        expect("POST", "/cache/import", 400, raw_body=b"not an archive", headers={"Content-Type": "application/zstd"})
        expect("POST", "/cache/import", 413, raw_body=b"x" * (MAX_BODY + 1), headers={"Content-Type": "application/zstd"})

        # The front's own answers: another method (405 with Allow), under the operation's default.
        a = raw(server, b"DELETE /jobs HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            if a.status != 405 or a.headers.get("allow") != "GET, HEAD":
                raise AssertionError(f"DELETE /jobs: {a.status} Allow {a.headers.get('allow')!r}")
            checked.append(f"GET /jobs {spec.check('GET', '/jobs', a, front=True)} (the front's 405)")
        except AssertionError as e:
            failures.append(str(e))
    finally:
        server.stop()

    # Request bodies: what the server took validates against the spec's request schemas, and
    # what it refused on shape alone the schema refuses too.
    kernel_schema = spec.request_schema("POST", "/kernels")
    for body in (source_request("2"), GEMM, dict(GEMM, options={"aot": True}),
                 {"backend": "cpu", "source": SLOW, "wait_ms": 10}):
        try:
            spec.validate(kernel_schema, body, "a request the server accepts")
        except AssertionError as e:
            failures.append(str(e))
    for bad_body, why in [({"backend": "tpu", "source": "x"}, "backend"), ({"backend": "cpu", "source": "x", "colour": 1}, "unknown field"),
                          (dict(GEMM, inputs=[dict(tensor("a"), dtype="float8")] * 2), "dtype"),
                          (dict(GEMM, inputs=[dict(tensor("a"), sizes=[0, 4])] * 2), "size 0"),
                          ({"backend": "cpu", "source": "x", "export_name": "9bad"}, "export_name"),
                          ({"backend": "cpu", "source": "x", "arch": []}, "empty arch list"),
                          ({"backend": "cpu", "source": "x", "options": {"opt_level": "O9"}}, "opt_level")]:
        try:
            spec.validate(kernel_schema, bad_body, why)
            failures.append(f"the spec accepts a body the server refuses ({why}): {json.dumps(bad_body)[:200]}")
        except AssertionError:
            pass

    # A prefetch entry may carry a label (docs/API.md); a job id in a cluster ends in -<instance>.
    prefetch_schema = spec.request_schema("POST", "/prefetch")
    job_id = spec.deref(spec.doc["components"]["parameters"]["JobId"])["schema"]
    for schema, instance, what in [
            (prefetch_schema, {"format": "kforge-prefetch/1", "label": "m", "requests": [dict(source_request("2"), label="x"), GEMM]}, "a labelled prefetch"),
            (job_id, "j000007-a", "a cluster job id"), (job_id, "j000007", "a job id"),
            (spec.request_schema("POST", "/autotune"), dict(GEMM, choices="default"), "an autotune")]:
        try:
            spec.validate(schema, instance, what)
        except AssertionError as e:
            failures.append(str(e))
    for schema, instance, what in [(job_id, "j7-A", "a job id with capitals"),
                                   (spec.request_schema("POST", "/autotune"), dict(GEMM, choices="default", params={}), "an autotune with params"),
                                   (prefetch_schema, {"requests": [dict(source_request("2"), colour=1)]}, "a prefetch entry with an unknown field")]:
        try:
            spec.validate(schema, instance, what)
            failures.append(f"the spec accepts {what}, which the server refuses")
        except AssertionError:
            pass

    shutil.rmtree(root, ignore_errors=True)
    for line in failures:
        print(f"FAIL {line}")
    print(f"answers_match_spec: {len(checked)} answers of {len(set(' '.join(c.split()[:2]) for c in checked))} "
          f"operations checked against the spec; {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
