#!/usr/bin/env python3
"""Keeps the layers of docs/ARCHITECTURE.md true to the includes (ctest Docs.Layers).

- core/ is in folders, and a folder includes only its own files and folders of lower layers
  (LAYERS below, the table of docs/ARCHITECTURE.md section 1);
- core/ includes nothing of api/ or service/, and api/ nothing of service/;
- no include circle between files (a file's header and source are one node);
- nothing outside core/storage/ (and the tests) calls entry_dir(): the path of an entry is
  the storage wing's to know.

Usage: check_layers.py REPO_ROOT. Prints each failure and a summary; exit 1 on any.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()

# core/<folder>: its layer. A folder may include folders of a lower layer, and its own files.
LAYERS = {
    "base": 0,
    "process": 1, "jobs": 1, "storage": 1,
    "toolchain": 2, "cluster": 2,
    "request": 3,
    "templates": 4,
    "bench": 5,
    "build": 6,
}

failures = []


def fail(what):
    failures.append(what)
    print("FAIL", what)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
sources = [p for p in (root / "core").rglob("*") if p.suffix in (".cpp", ".hpp") and "runner" not in p.parts] + \
          [p for p in (root / "core" / "bench" / "runner").glob("*") if p.suffix in (".cpp", ".hpp")]


def folder_of(rel):  # "core/storage/disk_tier.hpp" -> "storage"
    parts = pathlib.PurePosixPath(rel).parts
    return parts[1] if len(parts) > 2 else None


graph = {}
for path in sources:
    rel = path.relative_to(root).as_posix()
    mine = folder_of(rel)
    if mine is None:
        fail(f"{rel} is in core/ itself: every core file lives in a folder of docs/ARCHITECTURE.md's layers")
        continue
    if mine not in LAYERS:
        fail(f"{rel} is in core/{mine}/, a folder with no layer in check_layers.py (and docs/ARCHITECTURE.md)")
        continue
    node = rel.rsplit(".", 1)[0]
    for inc in INCLUDE.findall(path.read_text(errors="replace")):
        if inc.startswith(("api/", "service/")):
            fail(f"{rel} includes {inc}: core/ is below api/ and service/")
            continue
        if not inc.startswith("core/"):
            continue
        theirs = folder_of(inc)
        if theirs is None or theirs not in LAYERS:
            continue  # reported for that file itself (or generated: core/renderer_digest.hpp)
        if theirs != mine and LAYERS[theirs] >= LAYERS[mine]:
            fail(f"{rel} (core/{mine}/, layer {LAYERS[mine]}) includes {inc} (core/{theirs}/, layer {LAYERS[theirs]}): "
                 "an arrow back up")
        target = inc.rsplit(".", 1)[0]
        if target != node:
            graph.setdefault(node, set()).add(target)

for path in (root / "api").glob("*.[ch]pp"):
    for inc in INCLUDE.findall(path.read_text(errors="replace")):
        if inc.startswith("service/"):
            fail(f"{path.relative_to(root)} includes {inc}: api/ is below service/")

# Circles between files (Tarjan's strongly connected components).
index, low, on_stack, stack, circles = {}, {}, set(), [], []
counter = [0]


def strongconnect(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on_stack.add(v)
    for w in graph.get(v, ()):
        if w not in index:
            strongconnect(w)
            low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on_stack.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            circles.append(sorted(comp))


sys.setrecursionlimit(10000)
for v in list(graph):
    if v not in index:
        strongconnect(v)
for c in circles:
    fail("an include circle: " + " <-> ".join(c))

# The path of an entry is the storage wing's.
for path in list(root.glob("core/**/*.[ch]pp")) + list(root.glob("api/*.[ch]pp")) + list(root.glob("service/*.[ch]pp")):
    rel = path.relative_to(root).as_posix()
    if rel.startswith("core/storage/"):
        continue
    if "entry_dir(" in path.read_text(errors="replace"):
        fail(f"{rel} calls entry_dir(): only core/storage/ knows where an entry lies")

print(f"check_layers: {len(sources)} core files, {sum(len(v) for v in graph.values())} includes between them, "
      f"{len(LAYERS)} folders; {len(failures)} failed")
sys.exit(1 if failures else 0)
