#!/usr/bin/env python3
"""Keeps the design of record true to the tree (ctest Docs.MatchTheTree).

- README.md links docs/ARCHITECTURE.md, and its Layout names every top-level folder the
  repository tracks (and no folder that is not there);
- every repository path that docs/*.md and README.md cite in backticks exists: `dir/file`
  as written, a bare source file name (`client.cpp`) somewhere in the tree;
- every route of api/openapi.json has its section, or at least its path, in docs/API.md;
- docs/ holds only Markdown, no more than 3,000 lines of it (a manual, not a lab notebook);
- docs/BENCHMARKS.md's figures are the raw output's: every `bench/suite_report.py PATH...` command
  it gives reads bench/results/, every file of bench/results/ is read by one, and the Markdown
  tables that follow such a command (up to the next command or section) are tables the script
  prints from that output: the same header under the same caption, each row as printed. Each
  command is followed by at least one of its tables, so a figure that differs from the raw
  output, or a raw run the doc no longer reads, fails.

Usage: check_docs.py REPO_ROOT. Prints each failure and a summary; exit 1 on any.
"""
import json
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
failures = []


def fail(what):
    failures.append(what)
    print("FAIL", what)


tracked = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True, check=True).stdout.split()
# Files added to the working tree but not committed yet count too (a change under review).
untracked = subprocess.run(["git", "-C", str(root), "ls-files", "--others", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split()
files = set(tracked) | set(untracked)
top_dirs = {f.split("/")[0] for f in files if "/" in f and not f.startswith(".")}
basenames = {pathlib.PurePosixPath(f).name for f in files}

readme = (root / "README.md").read_text()
if "docs/ARCHITECTURE.md" not in readme:
    fail("README.md does not link docs/ARCHITECTURE.md")
layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0] if "## Layout" in readme else ""
if not layout:
    fail("README.md has no ## Layout section")
named = set(re.findall(r"^- `([^`/]+)/`", layout, re.M))
for d in sorted(top_dirs - named):
    fail(f"README.md Layout does not name the folder {d}/")
for d in sorted(named - top_dirs):
    fail(f"README.md Layout names {d}/, which the repository does not have")

# Files of a cache entry (docs/CACHE.md), not of the repository.
ENTRY_FILES = {"source.cpp", "source.cu", "source.hip", "kernel.so", "kernel.o", "compile.log"}
SOURCE = re.compile(r"\.(cpp|hpp|py|sh|mjs|js|css|html|cmake|conf|yaml|txt)$")
checked = 0
for doc in sorted([root / "README.md", *(root / "docs").glob("*.md")]):
    text = doc.read_text()
    for token in set(re.findall(r"`([^`\s]+)`", text)):
        token = token.rstrip(".,:;")
        if any(c in token for c in "{}<>*$|=()[]") or token.startswith(("/", ".", "-", "http")):
            continue  # a URL, a pattern, a flag, a placeholder
        first = token.split("/")[0]
        if "/" in token and first in top_dirs:
            checked += 1
            path = token.rstrip("/")
            module = any(path + ext in files for ext in (".hpp", ".cpp"))  # `core/jobs/jobs`
            ignored = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", path]).returncode == 0
            if path not in files and not module and not ignored and not any(f.startswith(path + "/") for f in files):
                fail(f"{doc.relative_to(root)} cites {token}, which is not in the tree")
        elif "/" not in token and SOURCE.search(token) and token not in ENTRY_FILES and not token.startswith("_"):
            checked += 1
            if token not in basenames:
                fail(f"{doc.relative_to(root)} cites {token}, and no file of the tree has that name")

api_md = (root / "docs" / "API.md").read_text()
spec = json.loads((root / "api" / "openapi.json").read_text())
for path, ops in spec["paths"].items():
    for method in ops:
        if path not in api_md:
            fail(f"docs/API.md never mentions {method.upper()} {path} (api/openapi.json has it)")

docs_files = sorted(f for f in files if f.startswith("docs/"))
for f in docs_files:
    if not f.endswith(".md"):
        fail(f"docs/ holds {f}: docs/ is Markdown only (raw runs a script reads go to bench/results/)")
DOCS_MAX_LINES = 3000
docs_lines = sum(len((root / f).read_text().splitlines()) for f in docs_files if f.endswith(".md") and (root / f).exists())
if docs_lines > DOCS_MAX_LINES:
    fail(f"docs/*.md hold {docs_lines} lines, more than {DOCS_MAX_LINES}")


def tables(lines):
    """The Markdown tables in lines: (caption, header, data rows), where the caption is the line
    before the table (blank lines skipped) if it ends with ':'."""
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            before = [x for x in lines[:i] if x.strip()]
            caption = before[-1].strip() if before and before[-1].strip().endswith(":") else None
            out.append((caption, lines[i], [r for r in lines[i + 1:j] if not r.startswith("|---")]))
            i = j
        else:
            i += 1
    return out


REPORT = re.compile(r"^\s+bench/suite_report\.py ((?:\S+ ?)+?)\s*$")
doc_lines = (root / "docs" / "BENCHMARKS.md").read_text().splitlines()
reports = []  # (paths, the doc's lines up to the next command or section)
for line in doc_lines:
    if m := REPORT.match(line):
        reports.append((m[1].split(), []))
    elif line.startswith("## "):
        reports.append((None, []))
    elif reports:
        reports[-1][1].append(line)
reports = [r for r in reports if r[0]]
read = {p.rstrip("/") for paths, _ in reports for p in paths}
for paths, after in reports:
    command = "bench/suite_report.py " + " ".join(paths)
    for p in paths:
        if not p.startswith("bench/results/"):
            fail(f"docs/BENCHMARKS.md: {command} reads {p}, outside bench/results/")
    out = subprocess.run([sys.executable, str(root / "bench" / "suite_report.py"), *[str(root / p) for p in paths]],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{command} failed: {out.stderr.strip()[:200]}")
        continue
    printed = {(caption, header): set(rows) for caption, header, rows in tables(out.stdout.splitlines())}
    captions = {caption for caption, _ in printed}
    shown = [(c if c in captions else None, h, rows) for c, h, rows in tables(after)]
    if not shown:
        fail(f"docs/BENCHMARKS.md gives {command} but none of the tables it prints")
    for caption, header, rows in shown:
        if (caption, header) not in printed:
            fail(f"docs/BENCHMARKS.md: a table after {command} is not one it prints: {caption or ''} {header}")
            continue
        for row in rows:
            if row not in printed[(caption, header)]:
                fail(f"docs/BENCHMARKS.md: {command} does not print this row: {row}")
for f in sorted(f for f in files if f.startswith("bench/results/")):
    if not any(f == p or f.startswith(p + "/") for p in read):
        fail(f"{f} is read by no bench/suite_report.py command of docs/BENCHMARKS.md")

print(f"check_docs: {checked} cited paths, {len(spec['paths'])} routes, {len(top_dirs)} folders, "
      f"{docs_lines} lines of docs, {len(reports)} suite reports; {len(failures)} failed")
sys.exit(1 if failures else 0)
