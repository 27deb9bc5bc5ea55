"""``python -m kforge``: the client from the shell.

Exit status: 0 on success, 2 when the server refused the request (a 4xx; its
problem document is printed on stderr) or the command line is wrong, 1 for
anything else (no answer, a server error, a file that cannot be read).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from . import __version__
from .cache import atomic_write
from .client import Client
from .errors import CompileError, KforgeError
from .kernel import Kernel
from .prefetch import load_manifest, write_manifest

SOURCE_SUFFIX = {"cpu": ".cpp", "cuda": ".cu", "rocm": ".hip"}


def _read_request(name: str) -> Dict[str, Any]:
    text = sys.stdin.read() if name == "-" else Path(name).read_text()
    req = json.loads(text)
    if not isinstance(req, dict):
        raise ValueError(f"{name}: a request is a JSON object")
    return req


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True))


def write_kernel(kernel: Kernel, out: Path) -> List[Path]:
    """Writes what ``kforge submit --out`` writes: ``<name>.so``, ``.o`` (when built),
    the source, ``<name>_wrapper.py``, ``<name>.h`` and ``<name>.json``."""
    name = kernel.name
    files = {f"{name}.so": kernel.path().read_bytes()}
    if kernel.manifest.get("object"):
        files[f"{name}.o"] = kernel.object_path().read_bytes()
    files[name + SOURCE_SUFFIX.get(kernel.backend, ".txt")] = kernel.source().encode()
    # Not <name>.py: Python would import <name>.so beside it as an extension module.
    files[f"{name}_wrapper.py"] = kernel.wrapper.encode()
    files[f"{name}.h"] = str(kernel.manifest.get("wrapper", {}).get("cpp", "")).encode()
    files[f"{name}.json"] = (json.dumps(kernel.manifest, indent=2, sort_keys=True) + "\n").encode()
    written = []
    for filename, data in files.items():
        atomic_write(out / filename, data, 0o755 if filename.endswith(".so") else 0o644)
        written.append(out / filename)
    return written


def _summary(kernel: Kernel, out: Optional[str]) -> None:
    art = kernel.manifest["artifact"]
    print(f"kernel   {kernel.name}")
    print(f"key      {kernel.key}")
    if kernel.cache:
        print(f"cache    {kernel.cache}")
    print(f"artifact {art['bytes']} bytes, sha256 {art['sha256']}")
    if out:
        for path in write_kernel(kernel, Path(out)):
            print(f"written  {path}")
    else:
        print(f"local    {kernel.path()}")


def _cmd_compile(client: Client, a: argparse.Namespace) -> int:
    kernel = client.compile_request(_read_request(a.request), wait=not a.no_wait,
                                    progress=a.progress)
    _summary(kernel, a.out)
    return 0


def _cmd_autotune(client: Client, a: argparse.Namespace) -> int:
    _print_json(client.autotune_request(_read_request(a.request)))
    return 0


def _cmd_get(client: Client, a: argparse.Namespace) -> int:
    _summary(client.kernel(a.key), a.out)
    return 0


def _cmd_jobs(client: Client, a: argparse.Namespace) -> int:
    answer = client.jobs(a.limit)
    print(f"{'ID':<10} {'KIND':<9} {'STATE':<13} {'CACHE':<7} {'HTTP':<5} KERNEL")
    for j in answer["jobs"]:
        print(f"{j.get('id', ''):<10} {j.get('kind', ''):<9} {j.get('state', ''):<13} "
              f"{j.get('cache') or '-':<7} {j.get('http_status') or '-'!s:<5} "
              f"{j.get('kernel_name') or ''}")
    q = answer.get("queue", {})
    print(f"queue: {q.get('depth', 0)}/{q.get('max', '?')} waiting, "
          f"{q.get('busy', 0)}/{q.get('workers', '?')} workers busy")
    return 0


def _cmd_job(client: Client, a: argparse.Namespace) -> int:
    if not a.follow:
        _print_json(client.job(a.id))
        return 0
    job = client.follow(a.id, a.progress)
    _print_json(job)
    status = job.get("http_status") or 500
    return 0 if status == 200 else 2 if 400 <= status < 500 else 1


def _cmd_prefetch(client: Client, a: argparse.Namespace) -> int:
    result = client.prefetch(load_manifest(a.manifest), progress=a.progress)
    print(f"prefetch: {result['done']}/{result['total']} requests in {result['seconds']:.1f} s: "
          f"{result['hit']} hit, {result['built']} built, {result['failed']} failed")
    for e in result["entries"]:
        if e.get("outcome") == "failed":
            error = e.get("error") or {}
            print(f"failed #{e['index']} {e.get('label', '')}".rstrip() + f": {error.get('detail', '')}")
            if error.get("log"):
                print(error["log"], end="" if error["log"].endswith("\n") else "\n")
    return 0 if result["failed"] == 0 else 1


def _cmd_manifest(client: Optional[Client], a: argparse.Namespace) -> int:
    doc = write_manifest(a.record, a.out)
    print(f"{a.out}: {len(doc['requests'])} requests")
    return 0


def _cmd_toolchains(client: Client, a: argparse.Namespace) -> int:
    _print_json(client.toolchains())
    return 0


def _cmd_templates(client: Client, a: argparse.Namespace) -> int:
    _print_json(client.templates())
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kforge",
                                description="Client of the kforge kernel compilation service.")
    p.add_argument("--version", action="version", version=f"kforge {__version__}")
    p.add_argument("--server", help="server URL [$KFORGE_URL]")
    p.add_argument("--token", help="bearer token [$KFORGE_TOKEN]")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request [60]")
    p.add_argument("--retries", type=int, default=5,
                   help="retries on 503 and failed connections [5]")
    p.add_argument("--cache-dir", help="local file cache [$KFORGE_CLIENT_CACHE, "
                                       "$XDG_CACHE_HOME/kforge-client]")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", action="store_true", default=None,
                      help="show job progress on stderr (default: when it is a terminal)")
    prog.add_argument("--no-progress", dest="progress", action="store_false")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("compile", help="POST a request file to /kernels; save the kernel")
    c.add_argument("request", metavar="REQ.json", help="the request (- for stdin)")
    c.add_argument("--out", metavar="DIR", help="write .so, .o, source, wrapper, .h, .json here")
    c.add_argument("--no-wait", action="store_true",
                   help="ask for a 202 at once and follow the job's events")
    c.set_defaults(run=_cmd_compile)

    t = sub.add_parser("autotune", help="POST a request file to /autotune; print the ranking")
    t.add_argument("request", metavar="REQ.json", help="the request (- for stdin)")
    t.set_defaults(run=_cmd_autotune)

    g = sub.add_parser("get", help="a cached kernel by key")
    g.add_argument("key")
    g.add_argument("--out", metavar="DIR", help="write .so, .o, source, wrapper, .h, .json here")
    g.set_defaults(run=_cmd_get)

    js = sub.add_parser("jobs", help="recent jobs and the queue")
    js.add_argument("--limit", type=int, help="how many jobs [server default: 100]")
    js.set_defaults(run=_cmd_jobs)

    j = sub.add_parser("job", help="one job")
    j.add_argument("id")
    j.add_argument("--follow", action="store_true", help="wait until it ends")
    j.set_defaults(run=_cmd_job)

    pf = sub.add_parser("prefetch", help="have the server build what a manifest (or a "
                                         "KFORGE_RECORD file) lists and it lacks")
    pf.add_argument("manifest", metavar="FILE",
                    help="a manifest, a JSON list of requests or JSON lines of requests")
    pf.set_defaults(run=_cmd_prefetch)

    m = sub.add_parser("manifest", help="turn a KFORGE_RECORD file into a prefetch manifest")
    m.add_argument("record", metavar="RECORD.jsonl")
    m.add_argument("-o", "--out", required=True, metavar="MANIFEST.json")
    m.set_defaults(run=_cmd_manifest, offline=True)

    sub.add_parser("toolchains", help="compilers and archs per backend").set_defaults(
        run=_cmd_toolchains)
    sub.add_parser("templates", help="templates and their parameters").set_defaults(
        run=_cmd_templates)
    return p


def _report(e: KforgeError) -> None:
    print(f"kforge: {e.args[0]}", file=sys.stderr)
    problem = dict(e.problem)
    log = problem.pop("log", "") if isinstance(e, CompileError) else ""
    if problem:
        print(json.dumps(problem, indent=2, sort_keys=True), file=sys.stderr)
    if log:
        print(log, file=sys.stderr, end="" if log.endswith("\n") else "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = parser().parse_args(argv)
    try:
        if getattr(a, "offline", False):  # needs no server
            return int(a.run(None, a))
        client = Client(a.server, token=a.token, timeout=a.timeout, retries=a.retries,
                        cache_dir=a.cache_dir)
        return int(a.run(client, a))
    except KforgeError as e:
        _report(e)
        return 2 if e.status is not None and 400 <= e.status < 500 else 1
    except (OSError, ValueError) as e:
        print(f"kforge: {e}", file=sys.stderr)
        return 1
