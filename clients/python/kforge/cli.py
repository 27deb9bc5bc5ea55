"""``python -m kforge``: the client from the shell, with the verbs, variables and exit
statuses of the ``kforge`` executable's client commands (docs/API.md, "The command line").

Exit status: 0 success; 1 an answer to read (a compile error or another refusal, whose
problem document is printed on stderr; a prefetch with failures); 2 a usage error (the
command line, or an input file that cannot be read or is not what the command takes);
3 no answer from the server (refused, timed out, no such host, TLS), after the retries.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from . import __version__
from .cache import atomic_write
from .client import Client
from .errors import CompileError, ConnectionFailed, KforgeError
from .kernel import Kernel
from .prefetch import load_manifest, write_manifest

SOURCE_SUFFIX = {"cpu": ".cpp", "cuda": ".cu", "rocm": ".hip"}

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class UsageError(Exception):
    """The command line, or an input file it names, is wrong (exit 2)."""


def _read_request(name: str) -> Dict[str, Any]:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {name}: {getattr(e, 'strerror', None) or e}") from e
    try:
        req = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{name} does not hold a JSON object (a POST /kernels body): {e}") from e
    if not isinstance(req, dict):
        raise UsageError(f"{name} does not hold a JSON object (a POST /kernels body)")
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


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return " ".join(v) or "(none)"
    return json.dumps(v, separators=(",", ":"))


def _cmd_explain(client: Client, a: argparse.Namespace) -> int:
    answer = client.explain(_read_request(a.request))
    if a.json:
        print(json.dumps(answer, indent=2))
        return 0
    print(f"kernel   {answer.get('kernel_name', '')}")
    print(f"key      {answer.get('key', '')}")
    print(f"cache    {answer.get('cache', '')}")
    near = answer.get("nearest")
    if isinstance(near, dict):
        built = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(near.get("created_at") or 0)))
        print(f"nearest  {near.get('key', '')} ({near.get('kernel_name', '')}, built {built})")
    reasons = answer.get("miss_reason") or []
    if reasons:
        print("why")
    for item in reasons:
        what = item.get("input", "")
        if "detail" in item and "was" not in item:
            print(f"  {what}: {item['detail']}")
        elif "diff" in item:
            print(f"  {what}:")
            for line in str(item["diff"]).splitlines():
                print(f"    {line}")
        else:
            line = f"  {what}: was {_text(item.get('was'))}, now {_text(item.get('now'))}"
            print(line + (f" ({item['detail']})" if "detail" in item else ""))
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
    return EXIT_OK if (job.get("http_status") or 500) == 200 else EXIT_FAILED


def _cmd_prefetch(client: Client, a: argparse.Namespace) -> int:
    try:
        manifest = load_manifest(a.manifest)
    except (OSError, ValueError) as e:
        raise UsageError(f"{a.manifest}: {getattr(e, 'strerror', None) or e}") from e
    result = client.prefetch(manifest, progress=a.progress)
    print(f"prefetch: {result['done']}/{result['total']} requests in {result['seconds']:.1f} s: "
          f"{result['hit']} hit, {result['built']} built, {result['failed']} failed")
    for e in result["entries"]:
        if e.get("outcome") == "failed":
            error = e.get("error") or {}
            print(f"failed #{e['index']} {e.get('label', '')}".rstrip() + f": {error.get('detail', '')}")
            if error.get("log"):
                print(error["log"], end="" if error["log"].endswith("\n") else "\n")
    return EXIT_OK if result["failed"] == 0 else EXIT_FAILED


def _cmd_manifest(client: Optional[Client], a: argparse.Namespace) -> int:
    try:
        doc = write_manifest(a.record, a.out)
    except ValueError as e:
        raise UsageError(f"{a.record}: {e}") from e
    print(f"{a.out}: {len(doc['requests'])} requests")
    return 0


def _cmd_toolchains(client: Client, a: argparse.Namespace) -> int:
    _print_json(client.toolchains())
    return 0


def _cmd_templates(client: Client, a: argparse.Namespace) -> int:
    _print_json(client.templates())
    return 0


def _global_options(p: argparse.ArgumentParser, *, here: bool) -> None:
    """The options every command takes, before or after its name. Declared again on each
    command with no defaults (``here=False``), so that one given after the command name is
    taken and one given before it is not undone."""
    def default(v: Any) -> Any:
        return v if here else argparse.SUPPRESS
    p.add_argument("--server", default=default(None), help="server URL [$KFORGE_URL]")
    p.add_argument("--token", default=default(None), help="bearer token [$KFORGE_TOKEN]")
    p.add_argument("--timeout", type=float, default=default(60.0), help="seconds per request [60]")
    p.add_argument("--retries", type=int, default=default(5),
                   help="retries on 503 and failed connections [5]")
    p.add_argument("--cache-dir", default=default(None),
                   help="local file cache [$KFORGE_CLIENT_CACHE, $XDG_CACHE_HOME/kforge-client]")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", action="store_true", default=default(None),
                      help="show job progress on stderr (default: when it is a terminal)")
    prog.add_argument("--no-progress", dest="progress", action="store_false", default=default(None))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kforge",
                                description="Client of the kforge kernel compilation service.",
                                epilog="Exit status: 0 success, 1 an answer to read (a compile error, "
                                       "a refused request), 2 a usage error, 3 no answer from the server.")
    p.add_argument("--version", action="version", version=f"kforge {__version__}")
    _global_options(p, here=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, run: Any, **kw: Any) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help, **kw)
        _global_options(c, here=False)
        c.set_defaults(run=run)
        return c

    c = command("compile", "POST a request file to /kernels; save the kernel", _cmd_compile,
                aliases=["submit"])
    c.add_argument("request", metavar="REQ.json", help="the request (- for stdin)")
    c.add_argument("--out", metavar="DIR", help="write .so, .o, source, wrapper, .h, .json here")
    c.add_argument("--no-wait", action="store_true",
                   help="ask for a 202 at once and follow the job's events")

    e = command("explain", "would this request hit the cache, and if not, why not "
                           "(POST /explain; compiles nothing)", _cmd_explain)
    e.add_argument("request", metavar="REQ.json", help="the request (- for stdin)")
    e.add_argument("--json", action="store_true", help="print the server's answer as it is")

    t = command("autotune", "POST a request file to /autotune; print the ranking", _cmd_autotune)
    t.add_argument("request", metavar="REQ.json", help="the request (- for stdin)")

    g = command("get", "a cached kernel by key", _cmd_get)
    g.add_argument("key")
    g.add_argument("--out", metavar="DIR", help="write .so, .o, source, wrapper, .h, .json here")

    js = command("jobs", "recent jobs and the queue", _cmd_jobs)
    js.add_argument("--limit", type=int, help="how many jobs [server default: 100]")

    j = command("job", "one job", _cmd_job)
    j.add_argument("id")
    j.add_argument("--follow", action="store_true", help="wait until it ends")

    pf = command("prefetch", "have the server build what a manifest (or a KFORGE_RECORD file) "
                             "lists and it lacks", _cmd_prefetch)
    pf.add_argument("manifest", metavar="FILE",
                    help="a manifest, a JSON list of requests or JSON lines of requests")

    m = command("manifest", "turn a KFORGE_RECORD file into a prefetch manifest", _cmd_manifest)
    m.add_argument("record", metavar="RECORD.jsonl")
    m.add_argument("-o", "--out", required=True, metavar="MANIFEST.json")
    m.set_defaults(offline=True)

    command("toolchains", "compilers and archs per backend", _cmd_toolchains)
    command("templates", "templates and their parameters", _cmd_templates)
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
    a = parser().parse_args(argv)  # a usage error exits 2 here
    try:
        if getattr(a, "offline", False):  # needs no server
            return int(a.run(None, a))
        try:
            client = Client(a.server, token=a.token, timeout=a.timeout, retries=a.retries,
                            cache_dir=a.cache_dir)
        except ValueError as e:  # no URL, or not an http(s) one
            raise UsageError(str(e)) from e
        return int(a.run(client, a))
    except UsageError as e:
        print(f"kforge: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ConnectionFailed as e:
        print(f"kforge: cannot reach the server: {e}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KforgeError as e:
        _report(e)
        return EXIT_FAILED
    except (OSError, ValueError) as e:
        print(f"kforge: {e}", file=sys.stderr)
        return EXIT_FAILED
