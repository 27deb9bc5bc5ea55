#!/usr/bin/python3
"""docs/API.md's curl lines, run against a real server, so the docs cannot drift from it.

Runs the `sh` blocks of the sections named in SECTIONS, in that order, in one scratch
directory, with K set to a `kforge serve` on a free port: a heredoc (`cat > f <<'TAG'`) is
run as written; a line with `curl` in it is a command (continued by a trailing `\\`) whose
expectation follows `#` on its line, or on the comment line after it: an HTTP status, then
every `backquoted` fragment, each of which must appear in what the command printed (its
stdout, with `curl -i`/`-I` the head too). No status: 2xx. A command whose status is 401 or
403 runs against a second server, one with a token file, where READ, SUBMIT and ADMIN are
tokens of those roles. KEY is the key the first section's compile answered.

    /usr/bin/python3 tests/docs/api_examples.py KFORGE_BINARY [REPO]
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Optional, Tuple

SECTIONS = [
    "POST /kernels — compile one kernel (source mode)",
    "GET /kernels/{key}/artifact, /kernels/{key}/object, /kernels/{key}/source, /kernels/{key}/log",
    "GET /kernels — list and search the cache",
    "GET /cache/export, POST /cache/import — move kernels between caches",
    "GET /status, GET /healthz, GET /readyz, GET /metrics, GET /openapi.json, GET /",
]
TOKENS = {"READ": "docs-read-token-0123456789", "SUBMIT": "docs-submit-token-0123456789",
          "ADMIN": "docs-admin-token-0123456789"}
MARK = "@@kforge-status "


def start(binary: str, root: Path, name: str, args: List[str]) -> Tuple[subprocess.Popen, str]:
    log = open(root / f"{name}.log", "ab")
    proc = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", "0", "--cache-dir",
                             str(root / f"{name}-cache"), *args], stdout=subprocess.PIPE, stderr=log)
    line = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n") and sel.select(60):
            c = os.read(proc.stdout.fileno(), 1)
            if not c:
                break
            line += c
    m = re.match(rb"listening on (http://\S+)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"kforge serve did not start: {line!r}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, m.group(1).decode()


def section_blocks(text: str, title: str) -> List[str]:
    start = text.find(f"\n## {title}\n")
    if start < 0:
        raise SystemExit(f"docs/API.md has no section `## {title}`")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end > 0 else len(text)]
    return re.findall(r"```sh\n(.*?)```", body, re.S)


class Command:
    def __init__(self, text: str, comment: str) -> None:
        self.text, self.status, self.fragments = text, None, []
        self.expect(comment)

    def expect(self, comment: str) -> None:
        m = re.match(r"\s*(\d{3})\b", comment)
        if m and self.status is None:
            self.status = int(m.group(1))
            self.fragments = re.findall(r"`([^`]+)`", comment)


def split_comment(line: str) -> Tuple[str, str]:
    """The command and its trailing comment: a `#` outside quotes, after white space."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and i and line[i - 1] in " \t":
            return line[:i].rstrip(), line[i + 1:]
    return line, ""


def parse(block: str) -> List[object]:
    """Heredocs (run as they are) and curl commands, in order."""
    out: List[object] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        here = re.match(r"cat > \S+ <<'?(\w+)'?$", line)
        if here:
            end = lines.index(here.group(1), i + 1)
            out.append("\n".join(lines[i:end + 1]))
            i = end + 1
            continue
        if line.startswith("#"):
            if out and isinstance(out[-1], Command):
                out[-1].expect(line[1:])
        elif "curl" in line:
            text = line
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1] + "\n" + lines[i]
            cmd, comment = split_comment(text)
            out.append(Command(cmd, comment))
        i += 1
    return out


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    repo = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[2]
    text = (repo / "docs" / "API.md").read_text()
    root = Path(tempfile.mkdtemp(prefix="kforge-docs-"))
    (root / "tokens").write_text(f"read:{TOKENS['READ']}\nsubmit:{TOKENS['SUBMIT']}\nadmin:{TOKENS['ADMIN']}\n")
    work = root / "work"
    work.mkdir()
    open_proc, open_url = start(binary, root, "open", [])
    auth_proc, auth_url = start(binary, root, "auth", ["--token-file", str(root / "tokens")])
    env = dict(os.environ, **TOKENS, KEY="")
    # Every curl reports its status last, whatever the line asks it to print.
    prelude = f"curl() {{ command curl \"$@\" -w '\\n{MARK}%{{http_code}}\\n'; }}\n"
    ran, failures = 0, []
    try:
        for title in SECTIONS:
            for block in section_blocks(text, title):
                for item in parse(block):
                    if isinstance(item, str):
                        subprocess.run(["bash", "-c", item], cwd=work, env=env, check=True)
                        continue
                    cmd: Command = item  # type: ignore[assignment]
                    env["K"] = auth_url if cmd.status in (401, 403) else open_url
                    r = subprocess.run(["bash", "-c", prelude + cmd.text], cwd=work, env=env,
                                       capture_output=True, text=True, timeout=120)
                    ran += 1
                    statuses = re.findall(MARK + r"(\d{3})", r.stdout)
                    got = int(statuses[-1]) if statuses else None
                    output = r.stdout.replace("\r\n", "\n")
                    what = f"{title}: {cmd.text.strip()[:110]}"
                    if got is None:
                        failures.append(f"{what}: curl printed no status (exit {r.returncode}): {r.stderr[-300:]}")
                    elif (cmd.status is None and not 200 <= got < 300) or (cmd.status is not None and got != cmd.status):
                        failures.append(f"{what}: status {got}, the docs say {cmd.status or '2xx'}: {output[:300]!r}")
                    for frag in cmd.fragments:
                        if frag not in output:
                            failures.append(f"{what}: `{frag}` is not in what it printed: {output[:400]!r}")
                    if not env["KEY"] and got == 200 and '"key"' in output:
                        env["KEY"] = json.loads(output[:output.rindex(MARK)])["key"]
    finally:
        for p in (open_proc, auth_proc):
            p.terminate()
            p.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print(f"FAIL {f}")
    print(f"api_examples: {ran} curl lines of docs/API.md run against kforge; {len(failures)} failed")
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
